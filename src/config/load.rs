//! Reading the configuration: TOML file, then `HANDOFF_…` environment overrides, then secrets
//! from `*_file` paths, then validation. Every problem found is reported at once.

use std::fmt;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Toml};

use crate::config::file::Config;
use crate::config::validate;
use crate::relay::config::RelayConfig;
use crate::runtime::loop_config as claim_loop;
use crate::secret::Secret;

/// Environment overrides use this prefix and `__` between key parts:
/// `HANDOFF_DATABASE__URL` sets `database.url`.
const ENV_PREFIX: &str = "HANDOFF_";

/// Everything wrong with a configuration, each message naming its key.
#[derive(Debug)]
pub struct ConfigError {
    pub errors: Vec<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid configuration ({} problem{}):", self.errors.len(), plural(self.errors.len()))?;
        for error in &self.errors {
            write!(f, "\n  - {error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Loads `path`, applies environment overrides and `*_file` secrets, and validates.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    if !path.exists() {
        return Err(ConfigError { errors: vec![format!("config file {} does not exist", path.display())] });
    }
    // Read again as text for what figment's sorted maps lose: the order of an entry's fields.
    let text = std::fs::read_to_string(path).unwrap_or_default();
    finish(Figment::from(Toml::file(path)), &text)
}

/// Like [`load`] for TOML text (used by tests and `check` on inline configs).
pub fn load_str(toml: &str) -> Result<Config, ConfigError> {
    finish(Figment::from(Toml::string(toml)), toml)
}

fn finish(figment: Figment, text: &str) -> Result<Config, ConfigError> {
    // Only keys with a `__` separator are ours: Kubernetes injects `HANDOFF_PORT=tcp://…` and
    // similar for a Service named handoff, which must not trip the unknown-key check. Keys of a
    // `[[relay]]`, `[[bridge]]` or `[[worker]]` entry name it (`HANDOFF_RELAY__AUTH__BATCH_SIZE`)
    // and are applied below, to that entry.
    let env = Env::prefixed(ENV_PREFIX)
        .filter(|key| key.as_str().contains("__") && named_entry(key.as_str()).is_none())
        .split("__");
    let figment = figment.merge(env);
    let overrides = named_overrides(std::env::vars());
    let mut errors = Vec::new();
    // Syntax errors end here: nothing else can be read.
    let mut value: figment::value::Value =
        figment.extract().map_err(|e| ConfigError { errors: e.into_iter().map(|e| describe(&e, true)).collect() })?;
    for (section, name, path, raw) in &overrides {
        if let Err(e) = apply_named(&mut value, section, name, path, raw) {
            errors.push(e.to_string());
        }
    }
    if !errors.is_empty() {
        return Err(ConfigError { errors });
    }
    claim_loop::nest(&mut value);
    let Some(mut config) = extract_all(value, &mut errors) else { return Err(ConfigError { errors }) };
    let env = Some(", or HANDOFF_DATABASE__URL");
    resolve_secret("database", &mut config.database.url, &mut config.database.url_file, env, &mut errors);
    resolve_secret("redis", &mut config.redis.url, &mut config.redis.url_file, None, &mut errors);
    config.redis.named = config.redis.url.is_some();
    if config.redis.url.is_none() && errors.is_empty() {
        config.redis.url = Some(Secret::new("redis://127.0.0.1:6379"));
    }
    database_tls(&mut config.database, &mut errors);
    if let Some(admin) = &mut config.admin {
        super::admin::read_tokens(admin, &mut errors);
    }
    if let Some(auth) = &mut config.telemetry.auth {
        metrics_auth(auth, &mut errors);
    }
    for worker in &mut config.workers {
        for (h, handler) in worker.handlers.iter_mut().enumerate() {
            if let Some(http) = &mut handler.http {
                let path = format!("worker `{}` handler[{h}].http", worker.name);
                resolve_secret(&path, &mut http.url, &mut http.url_file, Some(""), &mut errors);
            }
        }
    }
    crate::relay::ordered::restore(config.relays.iter_mut().map(|r| (&mut r.fields, &mut r.envelope)), text);
    let debezium_layout =
        config.kafka.as_ref().is_some_and(|k| k.layout == crate::broker::kafka::config::Layout::Debezium);
    for relay in &mut config.relays {
        errors.extend(relay.expand_cloudevents(debezium_layout));
    }
    super::shards::expand(&mut config.bridges, &mut errors);
    errors.extend(validate::validate(&config));
    if !errors.is_empty() {
        return Err(ConfigError { errors });
    }
    super::claim::resolve(&mut config);
    super::apply::resolve(&mut config);
    config.relays.iter_mut().for_each(RelayConfig::keep_by_default);
    Ok(config)
}

/// Extracts the configuration from `value`, finding every unknown key and every value of the
/// wrong type, not only the first: each error found is recorded and its key taken out, and the
/// extraction tried again, until it succeeds (the result then still goes through the rule
/// checks, so those are reported in the same run) or stops at an error no key can be taken out
/// for (a required key that is missing).
fn extract_all(mut value: figment::value::Value, errors: &mut Vec<String>) -> Option<Config> {
    // Bounded: each round takes a key out, and a configuration has far fewer.
    for _ in 0..256 {
        match Figment::from(figment::providers::Serialized::defaults(&value)).extract::<Config>() {
            Ok(config) => return Some(config),
            Err(error) => {
                let mut progressed = false;
                for e in error {
                    errors.push(describe(&e, false));
                    progressed |= remove_key(&mut value, &e.path);
                }
                if !progressed {
                    return None;
                }
            }
        }
    }
    None
}

/// Takes the key at `path` out of `value`; false if there is none.
fn remove_key(value: &mut figment::value::Value, path: &[String]) -> bool {
    use figment::value::Value;
    let Some((last, parents)) = path.split_last() else { return false };
    let mut node = value;
    for part in parents {
        node = match node {
            Value::Dict(_, table) => match table.get_mut(part) {
                Some(next) => next,
                None => return false,
            },
            Value::Array(_, items) => match part.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                Some(next) => next,
                None => return false,
            },
            _ => return false,
        };
    }
    match node {
        Value::Dict(_, table) => table.remove(last).is_some(),
        _ => false,
    }
}

/// The entry section of a `HANDOFF_` key (lower case, without the prefix) that names an entry:
/// `relay__auth__batch_size` → `relay`.
fn named_entry(key: &str) -> Option<&'static str> {
    let key = key.to_ascii_lowercase();
    ["relay", "bridge", "worker"].into_iter().find(|s| key.starts_with(&format!("{s}__")))
}

/// `HANDOFF_RELAY__AUTH__BATCH_SIZE=10` → (`relay`, `auth`, [`batch_size`], `10`).
fn named_overrides(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String, Vec<String>, String)> {
    vars.filter_map(|(key, value)| {
        let rest = key.strip_prefix(ENV_PREFIX)?;
        let section = named_entry(rest)?;
        let mut parts = rest.split("__").skip(1).map(str::to_ascii_lowercase);
        let name = parts.next()?;
        let path: Vec<String> = parts.collect();
        (!path.is_empty()).then(|| (section.to_owned(), name, path, value))
    })
    .collect()
}

/// Why an environment override of a named entry cannot be applied; each names the variable.
#[derive(Debug, thiserror::Error)]
enum OverrideError {
    #[error("{key}: the configuration is not a table")]
    NotATable { key: String },
    #[error("{key}: there is no [[{section}]] entry to override")]
    NoSection { key: String, section: String },
    #[error("{key}: no [[{section}]] entry is named `{name}`")]
    NoEntry { key: String, section: String, name: String },
    #[error("{key}: `{path}` is not a table")]
    NotATablePath { key: String, path: String },
}

/// Sets `path` in the `[[section]]` entry called `name` (compared without case, `-` and `_`
/// alike, as environment variable names cannot hold `-`).
fn apply_named(
    config: &mut figment::value::Value,
    section: &str,
    name: &str,
    path: &[String],
    raw: &str,
) -> Result<(), OverrideError> {
    use figment::value::Value;
    let key = format!("{ENV_PREFIX}{}__{}__{}", section, name, path.join("__")).to_ascii_uppercase();
    let normal = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let Value::Dict(_, root) = config else { return Err(OverrideError::NotATable { key }) };
    let Some(Value::Array(_, entries)) = root.get_mut(section) else {
        return Err(OverrideError::NoSection { key, section: section.to_owned() });
    };
    let entry = entries
        .iter_mut()
        .find(|e| e.find_ref("name").and_then(|n| n.as_str()).is_some_and(|n| normal(n) == normal(name)));
    let Some(mut node) = entry else {
        return Err(OverrideError::NoEntry { key, section: section.to_owned(), name: name.to_owned() });
    };
    for (i, part) in path.iter().enumerate() {
        let Value::Dict(_, table) = node else {
            return Err(OverrideError::NotATablePath { key, path: path[..i].join(".") });
        };
        if i + 1 == path.len() {
            let value: Value = raw.parse().unwrap_or_else(|never| match never {});
            table.insert(part.clone(), value);
            return Ok(());
        }
        node =
            table.entry(part.clone()).or_insert_with(|| Value::Dict(figment::value::Tag::Default, Default::default()));
    }
    Ok(())
}

/// One line per figment error: what is wrong, the key, and (`with_source`) where the value
/// came from.
fn describe(error: &figment::Error, with_source: bool) -> String {
    let key = key_path(&error.path);
    let source =
        error.metadata.as_ref().filter(|_| with_source).map(|m| format!(" (from {})", m.name)).unwrap_or_default();
    match &error.kind {
        figment::error::Kind::UnknownField(found, known) => {
            // An entry's claim-loop keys are known in it (the loader gathered them apart).
            let known: Vec<&str> = known
                .iter()
                .flat_map(|k| if *k == claim_loop::TABLE { claim_loop::KEYS } else { std::slice::from_ref(k) })
                .copied()
                .collect();
            let hint = closest(found, &known).map(|k| format!("; did you mean `{k}`?")).unwrap_or_default();
            format!("{key}: unknown key `{found}`{hint} (known here: {}){source}", known.join(", "))
        }
        kind => format!("{key}: {kind}{source}"),
    }
}

/// `relay.0.batch_size` as the rule checks write it: `relay[0].batch_size`.
fn key_path(path: &[String]) -> String {
    if path.is_empty() {
        return "(top level)".to_owned();
    }
    let mut key = String::new();
    // The claim-loop keys are written in the entry itself (see `claim_loop::nest`).
    for part in path.iter().filter(|p| *p != claim_loop::TABLE) {
        if part.chars().all(|c| c.is_ascii_digit()) {
            key.push_str(&format!("[{part}]"));
        } else {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(part);
        }
    }
    key
}

/// The known key closest to a misspelt one, if it is close enough to be the one meant.
fn closest<'a>(found: &str, known: &[&'a str]) -> Option<&'a str> {
    let (best, distance) = known.iter().map(|k| (*k, edit_distance(found, k))).min_by_key(|(_, d)| *d)?;
    (distance <= 2.max(found.len() / 4)).then_some(best)
}

/// Levenshtein distance (insertions, deletions, substitutions).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

/// Reads the database URL's TLS words into `database.tls` and takes them out of the URL (the
/// drivers are given the settings, not the words).
fn database_tls(database: &mut crate::store::config::DatabaseConfig, errors: &mut Vec<String>) {
    let Some(url) = &database.url else { return };
    let Some(dialect) = crate::store::config::Dialect::of(url.expose()) else { return };
    let mysql = dialect == crate::store::config::Dialect::Mysql;
    let parsed = match crate::tls::config::from_url(url.expose(), mysql) {
        Ok(parsed) => parsed,
        Err(found) => return errors.extend(found),
    };
    match crate::tls::config::merge("database", &database.tls, &parsed.tls) {
        Ok(tls) => {
            database.tls = tls;
            database.url = Some(Secret::new(parsed.url));
        }
        Err(found) => errors.extend(found),
    }
}

/// Reads `[telemetry.auth]`'s secret files: exactly one of a bearer token or a basic user with
/// its password, each as long as an admin token must be (one rule for every credential handoff
/// checks).
fn metrics_auth(auth: &mut crate::telemetry::config::MetricsAuth, errors: &mut Vec<String>) {
    use super::admin::MIN_TOKEN_LEN;
    let read = |key: &str, path: &PathBuf, errors: &mut Vec<String>| match std::fs::read_to_string(path) {
        Ok(text) if text.trim().len() >= MIN_TOKEN_LEN => Some(Secret::new(text.trim())),
        Ok(text) => {
            errors.push(format!(
                "telemetry.auth.{key}: {} holds {} characters; a credential needs at least {MIN_TOKEN_LEN}",
                path.display(),
                text.trim().len()
            ));
            None
        }
        Err(e) => {
            errors.push(format!("telemetry.auth.{key}: cannot read {}: {e}", path.display()));
            None
        }
    };
    match (&auth.bearer_token_file, &auth.basic_user, &auth.basic_password_file) {
        (Some(path), None, None) => auth.bearer_token = read("bearer_token_file", path, errors),
        (None, Some(_), Some(path)) => auth.basic_password = read("basic_password_file", path, errors),
        _ => errors.push(
            "telemetry.auth: set bearer_token_file, or basic_user with basic_password_file (one of the two)".into(),
        ),
    }
}

/// Moves a `url_file`'s contents into `url`; exactly one of the two may be set. `required`:
/// where else the URL may come from, when it must be given (an HTTP handler's URL may carry
/// credentials, `user:password@` or a token in the query, so it is a secret as well).
fn resolve_secret(
    section: &str,
    url: &mut Option<Secret>,
    url_file: &mut Option<PathBuf>,
    required: Option<&str>,
    errors: &mut Vec<String>,
) {
    match (url.is_some(), url_file.take()) {
        (true, Some(_)) => errors.push(format!("{section}.url and {section}.url_file are both set; keep one")),
        (false, Some(path)) => match std::fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => *url = Some(Secret::new(text.trim())),
            Ok(_) => errors.push(format!("{section}.url_file: {} is empty", path.display())),
            Err(e) => errors.push(format!("{section}.url_file: cannot read {}: {e}", path.display())),
        },
        (false, None) if let Some(or) = required => {
            errors.push(format!("{section}.url is required (or {section}.url_file{or})"))
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_key_gets_the_closest_known_one_and_a_stranger_none() {
        let known = ["name", "batch_size", "poll_interval", "lease"];
        assert_eq!(closest("batch_sise", &known), Some("batch_size"));
        assert_eq!(closest("pollinterval", &known), Some("poll_interval"));
        assert_eq!(closest("colour", &known), None);
        assert_eq!(key_path(&["relay".into(), "0".into(), "batch_sise".into()]), "relay[0].batch_sise");
    }

    #[test]
    fn an_environment_override_reaches_the_named_entry_only() {
        let vars = [
            ("HANDOFF_RELAY__AUTH_SERVICE__BATCH_SIZE", "42"),
            ("HANDOFF_RELAY__AUTH_SERVICE__DURABILITY__REPLICAS", "2"),
            ("HANDOFF_DATABASE__POOL_SIZE", "3"),
            ("HANDOFF_PORT", "tcp://10.0.0.1:9464"),
        ];
        let overrides = named_overrides(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        assert_eq!(overrides.len(), 2);
        let toml = "[database]\nurl = \"postgres://x@h/db\"\n[[relay]]\nname = \"orders\"\n[[relay]]\nname = \"auth-service\"\n";
        let mut value: figment::value::Value = Figment::from(Toml::string(toml)).extract().unwrap();
        for (section, name, path, raw) in &overrides {
            apply_named(&mut value, section, name, path, raw).unwrap();
        }
        claim_loop::nest(&mut value);
        let config: Config = Figment::from(figment::providers::Serialized::defaults(value)).extract().unwrap();
        assert_eq!(config.relays[1].claim_loop.batch_size, 42);
        assert_eq!(config.relays[1].durability.as_ref().map(|d| d.replicas), Some(2), "a table created on the way");
        assert_eq!(config.relays[0].claim_loop.batch_size, 500, "the other entry keeps its value");
        let mut value: figment::value::Value = Figment::from(Toml::string(toml)).extract().unwrap();
        let unknown = apply_named(&mut value, "relay", "billing", &["batch_size".into()], "1").unwrap_err().to_string();
        assert!(unknown.contains("HANDOFF_RELAY__BILLING__BATCH_SIZE") && unknown.contains("billing"), "{unknown}");
    }

    #[test]
    fn a_metrics_credential_needs_as_many_characters_as_an_admin_token() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        let config = format!(
            "[database]\nurl = \"postgres://x@h/db\"\n[telemetry.auth]\nbearer_token_file = \"{}\"\n",
            file.display()
        );
        std::fs::write(&file, "short\n").unwrap();
        let error = format!("{:#}", load_str(&config).unwrap_err());
        assert!(error.contains("holds 5 characters; a credential needs at least 16"), "{error}");
        std::fs::write(&file, "0123456789abcdef\n").unwrap();
        assert!(load_str(&config).is_ok());
    }

    #[test]
    fn a_missing_url_names_where_else_it_may_come_from() {
        let error = format!("{:#}", load_str("[database]\npool_size = 2\n").unwrap_err());
        assert!(error.contains("database.url is required (or database.url_file, or HANDOFF_DATABASE__URL)"), "{error}");
        let config = "[database]\nurl = \"postgres://x@h/db\"\n[[worker]]\nname = \"hooks\"\nconsumer = \"c\"\n\
                      [[worker.handler]]\nevent_types = [\"*\"]\nhttp = { timeout = \"5s\" }\n";
        let error = format!("{:#}", load_str(config).unwrap_err());
        let path = "worker `hooks` handler[0].http";
        assert!(error.contains(&format!("{path}.url is required (or {path}.url_file)")), "{error}");
    }
}
