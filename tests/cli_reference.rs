//! The command reference (docs/reference/commands.md) and the command line agree, both ways:
//! every command and every long option clap knows is in the reference, and every `handoff …`
//! the reference shows (its code blocks and inline code) is a command clap knows, with options
//! of that command.

use clap::CommandFactory;

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
