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
    let key = if error.path.is_empty() { "(top level)".to_owned() } else { error.path.join(".") };
    let source = error.metadata.as_ref().map(|m| format!(" (from {})", m.name)).unwrap_or_default();
    format!("{key}: {}{source}", error.kind)
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
