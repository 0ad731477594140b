//! Reading the configuration: TOML file, then `HANDOFF_…` environment overrides, then secrets
//! from `*_file` paths, then validation. Every problem found is reported at once.

use std::fmt;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Toml};

use super::{Config, Secret, validate};

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
    finish(Figment::from(Toml::file(path)))
}

/// Like [`load`] for TOML text (used by tests and `check` on inline configs).
pub fn load_str(toml: &str) -> Result<Config, ConfigError> {
    finish(Figment::from(Toml::string(toml)))
}

fn finish(figment: Figment) -> Result<Config, ConfigError> {
    // Only keys with a `__` separator are ours: Kubernetes injects `HANDOFF_PORT=tcp://…` and
    // similar for a Service named handoff, which must not trip the unknown-key check.
    let env = Env::prefixed(ENV_PREFIX).filter(|key| key.as_str().contains("__")).split("__");
    let mut config: Config = figment
        .merge(env)
        .extract()
        .map_err(|e| ConfigError { errors: e.into_iter().map(|e| describe(&e)).collect() })?;
    let mut errors = Vec::new();
    resolve_secret("database", &mut config.database.url, &mut config.database.url_file, true, &mut errors);
    resolve_secret("redis", &mut config.redis.url, &mut config.redis.url_file, false, &mut errors);
    if config.redis.url.is_none() && errors.is_empty() {
        config.redis.url = Some(Secret::new("redis://127.0.0.1:6379"));
    }
    database_tls(&mut config.database, &mut errors);
    errors.extend(validate::validate(&config));
    if errors.is_empty() { Ok(config) } else { Err(ConfigError { errors }) }
}

/// One line per figment error: what is wrong, the key, and where the value came from.
fn describe(error: &figment::Error) -> String {
    let key = key_path(&error.path);
    let source = error.metadata.as_ref().map(|m| format!(" (from {})", m.name)).unwrap_or_default();
    match &error.kind {
        figment::error::Kind::UnknownField(found, known) => {
            let hint = closest(found, known).map(|k| format!("; did you mean `{k}`?")).unwrap_or_default();
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
    for part in path {
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
fn database_tls(database: &mut super::DatabaseConfig, errors: &mut Vec<String>) {
    let Some(url) = &database.url else { return };
    let Some(dialect) = crate::config::Dialect::of(url.expose()) else { return };
    let mysql = dialect == crate::config::Dialect::Mysql;
    let parsed = match super::tls::from_url(url.expose(), mysql) {
        Ok(parsed) => parsed,
        Err(found) => return errors.extend(found),
    };
    match super::tls::merge("database", &database.tls, &parsed.tls) {
        Ok(tls) => {
            database.tls = tls;
            database.url = Some(Secret::new(parsed.url));
        }
        Err(found) => errors.extend(found),
    }
}

/// Moves a `url_file`'s contents into `url`; exactly one of the two may be set.
fn resolve_secret(
    section: &str,
    url: &mut Option<Secret>,
    url_file: &mut Option<PathBuf>,
    required: bool,
    errors: &mut Vec<String>,
) {
    match (url.is_some(), url_file.take()) {
        (true, Some(_)) => errors.push(format!("{section}.url and {section}.url_file are both set; keep one")),
        (false, Some(path)) => match std::fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => *url = Some(Secret::new(text.trim())),
            Ok(_) => errors.push(format!("{section}.url_file: {} is empty", path.display())),
            Err(e) => errors.push(format!("{section}.url_file: cannot read {}: {e}", path.display())),
        },
        (false, None) if required => errors.push(format!(
            "{section}.url is required (or {section}.url_file, or HANDOFF_{}__URL)",
            section.to_uppercase()
        )),
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
}
