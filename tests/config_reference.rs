//! The configuration reference (docs/reference/configuration.md) and the loader agree, both
//! ways: every key the loader knows is documented (itself, or as part of a documented table such
//! as `relay.backoff`), and every documented key is one the loader knows.
//!
//! The loader's side comes from the loader itself: a probe key put into a table makes it
//! answer with every key it knows there ("unknown key `…` (known here: …)"), and each known key
//! is probed in turn until only values are left.

use std::collections::BTreeSet;

use toml::Value;

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

/// The keys the reference's tables name in their first column: `a.b.c` in full; a bare name
/// after it is a sibling (`database.tls.ca_file` / `cert_file`); `[[relay]] name` is
/// `relay.name`; `redis.…` is the first key with another section; `relay.sql.*` is a table
/// whose keys another page lists.
fn documented_keys() -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for line in REFERENCE.lines().filter(|l| l.starts_with("| `")) {
        let cell = line[2..].split(" | ").next().unwrap_or_default();
        let tokens: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
        let first = tokens[0].strip_prefix("[[").map_or(tokens[0].to_owned(), |t| t.replacen("]] ", ".", 1));
        let mut parent = first.rsplit_once('.').map_or("", |(p, _)| p).to_owned();
        for token in tokens {
            let key = if let Some(section) = token.strip_suffix(".…") {
                let rest = first.split_once('.').map_or("", |(_, r)| r);
                format!("{section}.{rest}")
            } else if let Some(table) = token.strip_suffix(".*") {
                table.to_owned()
            } else if let Some(rest) = token.strip_prefix("[[") {
                rest.replacen("]] ", ".", 1)
            } else if token.contains('.') {
                token.to_owned()
            } else {
                format!("{parent}.{token}")
            };
            parent = key.rsplit_once('.').map_or("", |(p, _)| p).to_owned();
            keys.insert(key);
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
