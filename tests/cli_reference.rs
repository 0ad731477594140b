//! The command reference (docs/reference/commands.md) and the command line agree, both ways:
//! the page's list of every command and option is generated from clap (what `--help` says), and
//! every `handoff …` the rest of the page shows (its code blocks and inline code) is a command
//! clap knows, with options of that command.

use clap::CommandFactory;

use crate::common::generated;

const REFERENCE: &str = include_str!("../docs/reference/commands.md");

/// Every command that runs something (`dead list`, not `dead`), with its long options.
fn commands() -> Vec<(String, Vec<String>)> {
    fn walk(command: &clap::Command, prefix: &[String], out: &mut Vec<(String, Vec<String>)>) {
        for sub in command.get_subcommands().filter(|s| s.get_name() != "help" && !s.is_hide_set()) {
            let path: Vec<String> = prefix.iter().cloned().chain([sub.get_name().to_owned()]).collect();
            if sub.has_subcommands() {
                walk(sub, &path, out);
            } else {
                let options = sub.get_arguments().filter(|a| !a.is_hide_set()).filter_map(|a| a.get_long());
                out.push((path.join(" "), options.map(str::to_owned).collect()));
            }
        }
    }
    let mut out = Vec::new();
    walk(&handoff::Cli::command(), &[], &mut out);
    out
}

/// Every `handoff …` the reference shows: the lines of its code blocks that start with it, and
/// its inline code that does (which may run over a line break), comments cut off.
fn shown() -> Vec<String> {
    let mut shown = Vec::new();
    let mut in_block = false;
    for line in REFERENCE.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
        } else if in_block && line.starts_with("handoff ") {
            shown.push(line.split(" # ").next().unwrap_or(line).to_owned());
        }
    }
    let prose: String = REFERENCE.split("```").step_by(2).collect::<Vec<_>>().join(" ");
    for (i, code) in prose.split('`').enumerate() {
        if i % 2 == 1 && code.starts_with("handoff ") {
            shown.push(code.replace('\n', " "));
        }
    }
    shown
}

fn options_in(text: &str) -> Vec<String> {
    let mut options = Vec::new();
    for (i, _) in text.match_indices("--") {
        let name: String =
            text[i + 2..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '-' || c.is_ascii_digit()).collect();
        if !name.is_empty() {
            options.push(name.trim_end_matches('-').to_owned());
        }
    }
    options
}

/// An argument as a synopsis writes it: `--for <EXPIRES_AFTER>`, `--since`, `--json`, `<ID>`.
fn usage(arg: &clap::Arg) -> String {
    let value = arg.get_value_names().and_then(|names| names.first()).map(|n| n.to_string());
    let value = value.unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
    let takes_value = arg.get_action().takes_values();
    let long = match arg.get_long() {
        // `--relay <RELAY>` says no more than `--relay`: only a value named apart is shown.
        Some(long) if takes_value && value != long.to_uppercase().replace('-', "_") => format!("--{long} <{value}>"),
        Some(long) => format!("--{long}"),
        None => format!("<{value}>"),
    };
    match arg.get_short() {
        Some(short) => format!("-{short}`, `{long}"),
        None => long,
    }
}

/// Help text on one line, ending with a full stop (clap drops a one-sentence comment's).
fn sentence(text: &str) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() || text.ends_with('.') { text } else { format!("{text}.") }
}

/// One line of help, with what clap adds to `--help`: the choices, the default, repeatable.
fn meaning(arg: &clap::Arg) -> String {
    let text = arg.get_long_help().or(arg.get_help()).map(|h| h.to_string()).unwrap_or_default();
    let mut text = sentence(&text).replace('|', "\\|");
    let choices: Vec<String> =
        arg.get_possible_values().iter().filter(|v| !v.is_hide_set()).map(|v| format!("`{}`", v.get_name())).collect();
    if !choices.is_empty() && !matches!(arg.get_action(), clap::ArgAction::SetTrue) {
        text.push_str(&format!(" One of {}.", choices.join(", ")));
    }
    let defaults: Vec<String> = arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
    if !defaults.is_empty() && arg.get_action().takes_values() {
        text.push_str(&format!(" Default: `{}`.", defaults.join(" ")));
    }
    if matches!(arg.get_action(), clap::ArgAction::Append) {
        text.push_str(" Repeatable.");
    }
    if let Some(env) = arg.get_env() {
        text.push_str(&format!(" Also from `{}`.", env.to_string_lossy()));
    }
    if arg.is_required_set() {
        text.push_str(" Required.");
    }
    text.trim().to_owned()
}

/// Every command, its help and its options' help, as the page lists them; sibling commands
/// with the same options (`dead list`, `retry`, `purge`) share one table.
fn generated_reference() -> String {
    fn options(command: &clap::Command) -> Vec<(String, String)> {
        command
            .get_arguments()
            .filter(|a| !a.is_hide_set() && !a.is_global_set())
            .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
            .map(|a| (usage(a), meaning(a)))
            .collect()
    }
    /// `seen`: each option row shown so far, with the command that showed it first.
    fn walk(command: &clap::Command, prefix: &str, out: &mut String, seen: &mut Vec<(String, String, String)>) {
        let subs: Vec<&clap::Command> =
            command.get_subcommands().filter(|s| s.get_name() != "help" && !s.is_hide_set()).collect();
        let mut i = 0;
        while i < subs.len() {
            let sub = subs[i];
            let path = format!("{prefix} {}", sub.get_name());
            if sub.has_subcommands() {
                walk(sub, &path, out, seen);
                i += 1;
                continue;
            }
            let shared = options(sub);
            let mut group = vec![sub];
            while let Some(next) = subs.get(i + group.len()) {
                if next.has_subcommands() || options(next) != shared || shared.is_empty() {
                    break;
                }
                group.push(next);
            }
            let about = |c: &clap::Command| {
                sentence(&c.get_long_about().or(c.get_about()).map(|a| a.to_string()).unwrap_or_default())
            };
            if group.len() == 1 {
                out.push_str(&format!("\n### `{path}`\n\n{}\n", about(sub)));
            } else {
                let names: Vec<String> = group.iter().map(|c| format!("`{prefix} {}`", c.get_name())).collect();
                out.push_str(&format!("\n### {}\n\n", names.join(", ")));
                for c in &group {
                    out.push_str(&format!("- `{}`: {}\n", c.get_name(), about(c)));
                }
            }
            if !shared.is_empty() {
                out.push_str("\n| option | meaning |\n|---|---|\n");
                let earlier = |row: &(String, String)| {
                    seen.iter().find(|(u, m, _)| (u, m) == (&row.0, &row.1)).map(|(_, _, c)| c.clone())
                };
                let mut j = 0;
                while j < shared.len() {
                    // Three or more options in a row shown alike for one earlier command (the
                    // selection filters) are one row pointing there.
                    let first = earlier(&shared[j]);
                    let run = shared[j..].iter().take_while(|r| first.is_some() && earlier(r) == first).count();
                    if run >= 3 {
                        let names: Vec<String> = shared[j..j + run].iter().map(|(u, _)| format!("`{u}`")).collect();
                        out.push_str(&format!("| {} | As for `{}`. |\n", names.join(", "), first.unwrap()));
                        j += run;
                        continue;
                    }
                    let (usage, meaning) = &shared[j];
                    out.push_str(&format!("| `{usage}` | {meaning} |\n"));
                    j += 1;
                }
                seen.extend(shared.iter().map(|(u, m)| (u.clone(), m.clone(), path.clone())));
            }
            i += group.len();
        }
    }
    let cli = handoff::Cli::command();
    let mut out = String::new();
    let config = cli.get_arguments().find(|a| a.get_id() == "config").expect("--config");
    out.push_str(&format!("Every command takes `{}`: {}\n", usage(config), meaning(config)));
    walk(&cli, "handoff", &mut out, &mut Vec::new());
    out
}

#[test]
fn the_list_of_commands_is_what_the_command_line_says() {
    generated::check("docs/reference/commands.md", &generated_reference());
}

#[test]
fn every_command_and_option_is_in_the_reference_and_the_reference_shows_only_real_ones() {
    let commands = commands();
    assert!(commands.iter().any(|(c, _)| c == "dead list"), "the walk reaches subcommands: {commands:?}");
    let mut missing = Vec::new();
    for (command, options) in &commands {
        if !REFERENCE.contains(&format!("handoff {command}")) {
            missing.push(format!("handoff {command}"));
        }
        missing.extend(
            options.iter().filter(|o| !REFERENCE.contains(&format!("--{o}"))).map(|o| format!("{command} --{o}")),
        );
    }
    assert!(missing.is_empty(), "not in docs/reference/commands.md: {missing:?}");

    let mut wrong = Vec::new();
    for text in shown() {
        let words: Vec<&str> = text["handoff ".len()..].split_whitespace().collect();
        // The longest run of leading words that names a command.
        let found =
            (1..=words.len().min(3)).rev().find_map(|n| commands.iter().find(|(c, _)| *c == words[..n].join(" ")));
        let Some((command, options)) = found else {
            wrong.push(format!("no command: `{text}`"));
            continue;
        };
        for option in options_in(&text) {
            if option != "config" && !options.contains(&option) {
                wrong.push(format!("`handoff {command}` has no --{option}: `{text}`"));
            }
        }
    }
    assert!(wrong.is_empty(), "docs/reference/commands.md shows what the command line does not know: {wrong:#?}");
}
