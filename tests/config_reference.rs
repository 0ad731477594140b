//! The configuration reference (docs/reference/configuration.md) and the loader agree, both
//! ways: every key the loader knows is documented (itself, or as part of a documented table such
//! as `relay.backoff`), and every documented key is one the loader knows.
//!
//! The loader's side comes from the loader itself: a probe key put into a table makes it
//! answer with every key it knows there ("unknown key `…` (known here: …)"), and each known key
//! is probed in turn until only values are left.

use std::collections::BTreeSet;

use toml::Value;

use crate::common::generated;

const REFERENCE: &str = include_str!("../docs/reference/configuration.md");
const PROBE: &str = "zz_probe";

/// A configuration with one of every section, so each table can be probed inside it.
const BASE: &str = r#"
[database]
url = "postgres://u@127.0.0.1/db"
[nats]
url = "nats://127.0.0.1:4222"
[kafka]
bootstrap_servers = "127.0.0.1:9092"
[[admin.token]]
name = "ops"
scope = "read"
token_file = "/run/secrets/token"
[[relay]]
name = "r"
[[bridge]]
name = "b"
consumer = "c"
streams = [{ key = "s" }]
[[worker]]
name = "w"
consumer = "c"
[[worker.handler]]
event_types = ["*"]
"#;

/// What the loader says of a table: the keys it knows there; `None` for a value (a scalar, a
/// list, a map of any keys, a choice between shapes).
fn known_keys(path: &[String]) -> Option<Vec<String>> {
    let mut doc: Value = toml::from_str(BASE).unwrap();
    let mut node = &mut doc;
    for part in path {
        if let Value::Array(items) = node {
            node = items.first_mut()?;
        }
        let table = node.as_table_mut()?;
        let child = table.entry(part.clone()).or_insert_with(|| Value::Table(Default::default()));
        if !matches!(child, Value::Table(_) | Value::Array(_)) {
            *child = Value::Table(Default::default());
        }
        node = child;
    }
    if let Value::Array(items) = node {
        node = items.first_mut()?;
    }
    node.as_table_mut()?.insert(PROBE.into(), Value::Integer(1));
    let Err(error) = handoff::load_str(&toml::to_string(&doc).unwrap()) else { return None };
    let error = error.to_string();
    let line = error.lines().find(|l| l.contains(&format!("unknown key `{PROBE}`")))?;
    let known = line.split("(known here: ").nth(1)?.split(')').next()?;
    Some(known.split(", ").map(str::to_owned).collect())
}

/// Every key the loader knows, and which of them are tables.
fn loader_keys() -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut keys, mut tables) = (BTreeSet::new(), BTreeSet::new());
    let mut pending: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = pending.pop() {
        let Some(known) = known_keys(&path) else { continue };
        if !path.is_empty() {
            tables.insert(path.join("."));
        }
        for key in known {
            let mut child = path.clone();
            child.push(key);
            keys.insert(child.join("."));
            if child.len() < 5 {
                pending.push(child);
            }
        }
    }
    (keys, tables)
}

/// The keys the reference's tables name in their first column, each below its section's
/// heading (`## \`[relay]\``: `trim.maxlen` is `relay.trim.maxlen`). The sections of shared
/// tables (`## tls`) are left out: each use is a row of its own; but the claim loop's keys
/// (`## claim-loop`) are each relay's and worker's own.
fn documented_keys() -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut section: Option<String> = None;
    for line in REFERENCE.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            let name = heading.strip_prefix('`').and_then(|h| h.strip_suffix('`'));
            section = name.map(|h| h.trim_matches(['[', ']']).to_owned());
            if heading == "claim-loop" {
                section = Some(heading.to_owned());
            }
        } else if let (Some(section), Some(row)) = (&section, line.strip_prefix("| `")) {
            let key = row.split('`').next().unwrap_or_default();
            if section == "claim-loop" {
                keys.extend(CLAIM_LOOP_IN.iter().map(|s| format!("{s}.{key}")));
            } else {
                keys.insert(format!("{section}.{key}"));
            }
        }
    }
    keys
}

/// Keys the loader parses (their table is shared) but refuses in this section, as the reference
/// says in words: set, each is an error naming it.
const REFUSED: &[(&str, &str)] = &[("kafka.tls.server_name", "[kafka.tls]\nserver_name = \"kafka.internal\"\n")];

#[test]
fn every_key_the_loader_knows_is_documented_and_every_documented_key_is_known() {
    for (key, toml) in REFUSED {
        let error = handoff::load_str(&format!("{BASE}{toml}")).unwrap_err().to_string();
        assert!(error.contains(&format!("{key}:")), "{key} is refused by name: {error}");
    }
    let (loader, tables) = loader_keys();
    assert!(loader.contains("relay.retention.delivered_after"), "the probe reaches nested tables: {loader:?}");
    let documented = documented_keys();
    // A key is documented by itself, or as part of a documented table below the top level
    // (`relay.backoff` documents `relay.backoff.initial`).
    let covered = |key: &str| {
        let parts: Vec<&str> = key.split('.').collect();
        (2..=parts.len()).any(|n| documented.contains(&parts[..n].join(".")))
    };
    let refused = |key: &str| REFUSED.iter().any(|(k, _)| *k == key);
    let undocumented: Vec<&String> =
        loader.iter().filter(|k| !tables.contains(*k) && !covered(k) && !refused(k)).collect();
    let unknown: Vec<&String> = documented.iter().filter(|k| !loader.contains(*k)).collect();
    assert!(
        undocumented.is_empty(),
        "known to the loader but not in docs/reference/configuration.md: {undocumented:?}"
    );
    assert!(unknown.is_empty(), "in docs/reference/configuration.md but unknown to the loader: {unknown:?}");
}

// ---- The generated part: every key from the config structs' source and doc comments. ----

/// Tables whose keys another page lists: one row, pointing there.
const ELSEWHERE: &[(&str, &str)] = &[
    ("SqlOverrides", "[The relay's statements](sql-contract.md)."),
    ("TakeoverOverrides", "[The bridge's statements](sql-contract.md#the-bridges-statements)."),
    ("WorkerOverrides", "[The worker's statements](sql-contract.md#the-workers-statements)."),
];

/// Tables used under several keys: their keys are listed once, in a section of their own.
const SHARED: &[(&str, &str, &str)] = &[
    (
        "TlsConfig",
        "tls",
        "TLS to a server: every `tls` table below `database`, `redis`, `nats`, `kafka`, `telemetry.tracing` and `worker.handler.http`.",
    ),
    ("ListenerTls", "listener-tls", "TLS of handoff's own listeners: `telemetry.tls` and `admin.tls`."),
    ("BackoffConfig", "backoff", "A backoff: `backoff` and `outage_backoff` of a relay or a worker."),
    (
        "ClaimLoopConfig",
        "claim-loop",
        "How a relay or a worker claims rows: keys written in the `[[relay]]` or `[[worker]]` entry itself.",
    ),
];

/// The sections whose entries hold the claim loop's keys themselves (the loader nests them).
const CLAIM_LOOP_IN: &[&str] = &["relay", "worker"];

/// Where a key is explained at length, added to its meaning.
const LINKS: &[(&str, &str)] = &[
    ("kafka", "[Use Apache Kafka](../how-to/kafka.md)."),
    ("admin", "[The admin API](commands.md#admin-api-and-status-page)."),
    ("telemetry.tracing", "[Traces](metrics.md#traces)."),
    ("database.tls", "[TLS](deployment.md#tls-to-every-server)."),
    ("relay.stream", "[Sharded streams](../explanation/scaling.md#sharded-streams)."),
    (
        "claim-loop.claim",
        "Locked claim: [relay](../explanation/delivery.md#locked-claim), [worker](../explanation/consumer.md#locked-claim).",
    ),
    ("relay.envelope", "[The envelope](sql-contract.md#the-envelope)."),
    ("relay.cloudevents", "[CloudEvents](sql-contract.md#cloudevents)."),
    ("relay.trim", "[Trimming](../explanation/delivery.md#consumer-aware-trimming)."),
    ("relay.notify", "[Wake-up](../explanation/delivery.md#low-latency-wake-up)."),
    ("relay.dedupe", "[Publish dedupe](../explanation/delivery.md#publish-dedupe)."),
    ("relay.ordering", "[Per-key ordering](../explanation/delivery.md#per-key-ordering)."),
    ("relay.retention", "[Retention](../explanation/delivery.md#retention)."),
    ("relay.partitions", "[Partitioned outbox](../explanation/scaling.md#partitioned-outbox)."),
    ("relay.durability", "[Durability gate](../explanation/delivery.md#durability-gate)."),
    ("relay.broker_loss", "[Broker data loss](../explanation/delivery.md#broker-data-loss)."),
    (
        "bridge.broker",
        "[NATS](../explanation/consumer.md#on-nats-jetstream), [Kafka](../explanation/consumer.md#on-kafka).",
    ),
    ("bridge.batch_bytes", "[Memory](../explanation/consumer.md#memory)."),
    (
        "bridge.max_deliveries",
        "[The delivery limit](../explanation/consumer.md#the-delivery-limit-counts-only-deliveries-that-reached-the-inbox).",
    ),
    ("bridge.envelope", "[The envelope](sql-contract.md#the-envelope)."),
    ("bridge.apply", "[Apply at take-over](../explanation/consumer.md#apply-at-take-over)."),
    ("worker.handler_errors", "[Failures](../explanation/consumer.md#failures)."),
    ("worker.handler", "[Handlers](../explanation/consumer.md#handlers)."),
];

/// Every struct and enum of `src/` that derives `Deserialize`, by name.
fn config_items() -> std::collections::HashMap<String, syn::Item> {
    fn visit(items: Vec<syn::Item>, out: &mut std::collections::HashMap<String, syn::Item>) {
        for item in items {
            let (name, attrs) = match &item {
                syn::Item::Struct(s) => (s.ident.to_string(), &s.attrs),
                syn::Item::Enum(e) => (e.ident.to_string(), &e.attrs),
                syn::Item::Mod(m) => {
                    if let Some((_, inner)) = &m.content {
                        visit(inner.clone(), out);
                    }
                    continue;
                }
                _ => continue,
            };
            let derives =
                attrs.iter().any(|a| a.path().is_ident("derive") && quote_of(&a.meta).contains("Deserialize"));
            // Types are found by name: a config type (one that denies unknown keys) keeps its
            // name against any other; two others sharing a name make it ambiguous.
            match out.get(&name) {
                _ if !derives => {}
                Some(before) if is_config(before) && is_config(&item) => {
                    panic!("two config types named {name}: the generator finds types by name")
                }
                Some(before) if is_config(before) => {}
                Some(_) if !is_config(&item) => {
                    DUPLICATES.lock().unwrap().push(name);
                }
                _ => {
                    out.insert(name, item);
                }
            }
        }
    }
    fn walk(dir: &std::path::Path, out: &mut std::collections::HashMap<String, syn::Item>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let file = syn::parse_file(&std::fs::read_to_string(&path).unwrap()).unwrap();
                visit(file.items, out);
            }
        }
    }
    let mut out = std::collections::HashMap::new();
    walk(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut out);
    out
}

/// Whether an item is part of the configuration (denies unknown keys, as every section does).
fn is_config(item: &syn::Item) -> bool {
    let attrs = match item {
        syn::Item::Struct(s) => &s.attrs,
        syn::Item::Enum(e) => &e.attrs,
        _ => return false,
    };
    attrs.iter().any(|a| a.path().is_ident("serde") && quote_of(&a.meta).contains("deny_unknown_fields"))
}

fn quote_of(meta: &syn::Meta) -> String {
    match meta {
        syn::Meta::List(list) => list.tokens.to_string(),
        syn::Meta::NameValue(nv) => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => s.value(),
            _ => String::new(),
        },
        syn::Meta::Path(_) => String::new(),
    }
}

/// A doc comment as one line of text.
/// A doc comment's paragraphs, each on one line. The page shows the first (and the `Default:`
/// sentence, wherever it is); the others are detail for the code's readers.
fn doc(attrs: &[syn::Attribute]) -> Vec<String> {
    let lines: Vec<String> =
        attrs.iter().filter(|a| a.path().is_ident("doc")).map(|a| quote_of(&a.meta).trim().to_owned()).collect();
    lines
        .split(|l| l.is_empty())
        .map(|p| p.join(" ").split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect()
}

/// `serde(...)` options of a field or a type, as `name` or `name = "value"` strings.
fn serde_options(attrs: &[syn::Attribute]) -> Vec<(String, Option<String>)> {
    let mut options = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let parsed = attr.parse_nested_meta(|meta| {
            let name = meta.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
            let value = if meta.input.peek(syn::Token![=]) {
                let lit: syn::LitStr = meta.value()?.parse()?;
                Some(lit.value())
            } else {
                None
            };
            options.push((name, value));
            Ok(())
        });
        if let Err(e) = parsed {
            PROBLEMS.lock().unwrap().push(format!("a serde attribute the generator cannot read: {e}"));
        }
    }
    options
}

fn option<'a>(options: &'a [(String, Option<String>)], name: &str) -> Option<&'a Option<String>> {
    options.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

/// `snake_case` / `lowercase` / `kebab-case` / `SCREAMING-KEBAB-CASE` of a variant's name.
fn renamed(name: &str, rule: Option<&str>) -> String {
    let mut words = Vec::new();
    let mut word = String::new();
    for c in name.chars() {
        if c.is_uppercase() && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        word.push(c);
    }
    words.push(word);
    match rule {
        Some("snake_case") => words.join("_").to_lowercase(),
        Some("kebab-case") => words.join("-").to_lowercase(),
        Some("lowercase") => name.to_lowercase(),
        Some("SCREAMING-KEBAB-CASE") => words.join("-").to_uppercase(),
        Some("UPPERCASE") => name.to_uppercase(),
        Some(other) => panic!("rename_all = {other}: teach the generator"),
        None => name.to_owned(),
    }
}

/// The last segment of a type's path and its generic arguments: `Option<Vec<String>>` →
/// (`Option`, [`Vec<String>`]).
fn split_type(ty: &syn::Type) -> (String, Vec<syn::Type>) {
    let syn::Type::Path(path) = ty else { return (String::from("?"), Vec::new()) };
    let last = path.path.segments.last().unwrap();
    let args = match &last.arguments {
        syn::PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|a| if let syn::GenericArgument::Type(t) = a { Some(t.clone()) } else { None })
            .collect(),
        _ => Vec::new(),
    };
    (last.ident.to_string(), args)
}

/// A sentence of a doc comment: up to a full stop outside parentheses, quotes and backticks.
fn sentences(text: &str) -> Vec<String> {
    let (mut out, mut current, mut depth, mut quoted) = (Vec::new(), String::new(), 0i32, false);
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        current.push(c);
        match c {
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            '`' | '"' => quoted = !quoted,
            '.' if depth == 0
                && !quoted
                && chars.get(i + 1).is_none_or(|n| *n == ' ')
                && !current.ends_with("e.g.")
                && !current.ends_with("i.e.") =>
            {
                out.push(std::mem::take(&mut current).trim().to_owned());
            }
            _ => {}
        }
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_owned());
    }
    out
}

/// A field's doc comment split into its meaning and its `Default: …` sentence.
fn meaning_and_default(doc: &[String]) -> (String, Option<String>) {
    let mut meaning = Vec::new();
    let mut default = None;
    for (i, paragraph) in doc.iter().enumerate() {
        for sentence in sentences(paragraph) {
            match sentence.strip_prefix("Default: ").or_else(|| sentence.strip_prefix("Default ")) {
                Some(rest) if default.is_none() => default = Some(rest.trim_end_matches('.').to_owned()),
                _ if i == 0 => meaning.push(sentence),
                _ => {}
            }
        }
    }
    (meaning.join(" ").replace('|', "\\|"), default)
}

/// Names two `Deserialize` types share (neither a config section): a lookup of one is ambiguous.
static DUPLICATES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// The config type named `name`, noting a problem when the name is ambiguous.
fn lookup<'a>(items: &'a std::collections::HashMap<String, syn::Item>, name: &str) -> Option<&'a syn::Item> {
    if DUPLICATES.lock().unwrap().iter().any(|d| d == name) {
        PROBLEMS.lock().unwrap().push(format!("two Deserialize types are named {name}: rename one"));
    }
    items.get(name)
}

/// What the config structs lack for the page (each named), reported together.
static PROBLEMS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

struct Row {
    key: String,
    kind: String,
    default: String,
    meaning: String,
}

/// What a value's type is called on the page; `None` for a table (a config struct).
fn kind(ty: &syn::Type, items: &std::collections::HashMap<String, syn::Item>) -> Option<String> {
    let (name, args) = split_type(ty);
    Some(match name.as_str() {
        "Option" => return kind(&args[0], items),
        "String" | "Secret" => "string".into(),
        "PathBuf" => "path".into(),
        "SocketAddr" => "address".into(),
        "bool" => "boolean".into(),
        "u8" | "u16" | "u32" | "u64" | "usize" | "i32" | "i64" | "NonZeroU32" | "NonZeroUsize" => "integer".into(),
        "f64" => "number".into(),
        "Duration" => "duration".into(),
        "Vec" => format!("list of {}s", kind(&args[0], items)?),
        "BTreeMap" | "HashMap" | "IndexMap" => format!("table of {}s", kind(&args[1], items)?),
        "Fields" => "table of strings".into(),
        other => match lookup(items, other) {
            Some(syn::Item::Enum(e)) => {
                let container = serde_options(&e.attrs);
                let shaped = ["untagged", "tag", "content"].iter().any(|o| option(&container, o).is_some());
                if shaped || e.variants.iter().any(|v| !matches!(v.fields, syn::Fields::Unit)) {
                    PROBLEMS.lock().unwrap().push(format!("enum {other}: only unit variants are rendered"));
                }
                let rule = option(&container, "rename_all").cloned().flatten();
                let variants: Vec<String> = e
                    .variants
                    .iter()
                    .filter(|v| option(&serde_options(&v.attrs), "skip").is_none())
                    .map(|v| {
                        let rename = option(&serde_options(&v.attrs), "rename").cloned().flatten();
                        format!("`{}`", rename.unwrap_or_else(|| renamed(&v.ident.to_string(), rule.as_deref())))
                    })
                    .collect();
                variants.join(" \\| ")
            }
            Some(syn::Item::Struct(_)) => return None,
            _ => {
                PROBLEMS.lock().unwrap().push(format!("config type {other}: teach the generator what to call it"));
                "?".into()
            }
        },
    })
}

/// The rows of a config struct's keys under `prefix`, nested tables after their own row.
fn rows(name: &str, prefix: &str, items: &std::collections::HashMap<String, syn::Item>, out: &mut Vec<Row>) {
    let Some(syn::Item::Struct(item)) = lookup(items, name) else { panic!("no config struct {name}") };
    let syn::Fields::Named(fields) = &item.fields else { panic!("{name}: named fields expected") };
    // `#[serde(default)]` on the struct: every key may be left out.
    let container = serde_options(&item.attrs);
    let all_defaulted = option(&container, "default").is_some();
    if option(&container, "rename_all").is_some() {
        PROBLEMS.lock().unwrap().push(format!("{name}: rename_all on a config struct is not rendered"));
    }
    for field in &fields.named {
        let options = serde_options(&field.attrs);
        if option(&options, "skip").is_some() || option(&options, "skip_deserializing").is_some() {
            continue;
        }
        for unread in ["alias", "flatten"] {
            if option(&options, unread).is_some() {
                PROBLEMS.lock().unwrap().push(format!("{name}: `{unread}` on a field is not rendered"));
            }
        }
        let ident = field.ident.as_ref().unwrap().to_string();
        let key = option(&options, "rename").cloned().flatten().unwrap_or(ident);
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        let (type_name, args) = split_type(&field.ty);
        // The claim-loop keys are written in the entry itself (the loader nests them).
        if type_name == "ClaimLoopConfig" {
            let mut keys = Vec::new();
            rows(&type_name, "", items, &mut keys);
            let names: Vec<String> =
                keys.iter().filter(|r| !r.key.contains('.')).map(|r| format!("`{}`", r.key)).collect();
            // No backticks in the first cell: the keys are documented in their own section.
            out.push(Row {
                key: format!("{prefix}.claim loop"),
                kind: String::new(),
                default: String::new(),
                meaning: format!("{}: [the claim loop](#claim-loop).", names.join(", ")),
            });
            continue;
        }
        let (meaning, stated) = meaning_and_default(&doc(&field.attrs));
        let optional = type_name == "Option";
        let defaulted = all_defaulted || option(&options, "default").is_some();
        let inner = if optional { args[0].clone() } else { field.ty.clone() };
        let (inner_name, inner_args) = split_type(&inner);
        // A table's default is its keys'; a value's must be stated.
        let table = items.get(&inner_name).is_some_and(|i| matches!(i, syn::Item::Struct(_)));
        let default = stated
            .unwrap_or_else(|| {
                if optional {
                    "none".into()
                } else if !defaulted {
                    "required".into()
                } else if table || inner_name == "Vec" {
                    "—".into()
                } else {
                    PROBLEMS
                        .lock()
                        .unwrap()
                        .push(format!("{path}: its doc comment must state its default (`Default: …`)"));
                    "?".into()
                }
            })
            .replace('|', "\\|");
        if meaning.is_empty() {
            PROBLEMS.lock().unwrap().push(format!("{path}: no doc comment"));
        }
        if let Some((_, elsewhere)) = ELSEWHERE.iter().find(|(n, _)| *n == inner_name) {
            out.push(Row { key: path, kind: "table".into(), default, meaning: format!("{meaning} {elsewhere}") });
            continue;
        }
        let meaning = match LINKS.iter().find(|(k, _)| *k == path) {
            Some((_, link)) => format!("{meaning} {link}"),
            None => meaning,
        };
        if let Some((_, anchor, _)) = SHARED.iter().find(|(n, _, _)| *n == inner_name) {
            let meaning = format!("{meaning} [Its keys](#{anchor}).");
            out.push(Row { key: path, kind: "table".into(), default, meaning });
            continue;
        }
        let element = if inner_name == "Vec" { Some(split_type(&inner_args[0]).0) } else { None };
        match (kind(&inner, items), element) {
            (Some(kind), _) => out.push(Row { key: path, kind, default, meaning }),
            (None, Some(element)) => {
                out.push(Row { key: path.clone(), kind: "list of tables".into(), default, meaning });
                rows(&element, &path, items, out);
            }
            (None, None) => {
                out.push(Row { key: path.clone(), kind: "table".into(), default, meaning });
                rows(&inner_name, &path, items, out);
            }
        }
    }
}

/// The page's generated part: one table per top-level section.
fn generated_reference() -> String {
    let items = config_items();
    let mut all = Vec::new();
    rows("Config", "", &items, &mut all);
    for (name, anchor, _) in SHARED {
        rows(name, anchor, &items, &mut all);
    }
    let problems = std::mem::take(&mut *PROBLEMS.lock().unwrap());
    assert!(problems.is_empty(), "the config structs' doc comments:\n{}", problems.join("\n"));
    let mut out = String::new();
    let mut section = String::new();
    for row in all {
        let top = row.key.split('.').next().unwrap().to_owned();
        if top != section {
            if let Some((_, _, about)) = SHARED.iter().find(|(_, anchor, _)| *anchor == top) {
                out.push_str(&format!(
                    "\n## {top}\n\n{about}\n\n| key | type | default | meaning |\n|---|---|---|---|\n"
                ));
                section = top;
                let key = row.key.split_once('.').map_or(row.key.as_str(), |(_, k)| k);
                out.push_str(&format!("| `{key}` | {} | {} | {} |\n", row.kind, row.default, row.meaning));
                continue;
            }
            // A section's own default (`[admin]`: off) goes with its description.
            let meaning = match row.default.as_str() {
                "—" | "required" => row.meaning.clone(),
                default => format!("{} Default: {default}.", row.meaning),
            };
            let heading = if row.kind == "list of tables" { format!("[[{top}]]") } else { format!("[{top}]") };
            out.push_str(&format!(
                "\n## `{heading}`\n\n{meaning}\n\n| key | type | default | meaning |\n|---|---|---|---|\n"
            ));
            section = top;
            if !row.key.contains('.') && (row.kind == "table" || row.kind == "list of tables") {
                continue;
            }
        }
        let key = row.key.split_once('.').map_or(row.key.as_str(), |(_, k)| k);
        if key == "claim loop" {
            out.push_str(&format!("| {key} | | | {} |\n", row.meaning));
            continue;
        }
        out.push_str(&format!("| `{key}` | {} | {} | {} |\n", row.kind, row.default, row.meaning));
    }
    out
}

#[test]
fn the_reference_lists_what_the_config_structs_say() {
    generated::check("docs/reference/configuration.md", &generated_reference());
}
