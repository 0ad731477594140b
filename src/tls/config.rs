//! `tls` tables (`[database.tls]`, `[redis.tls]`, a handler's `http.tls`), one shape for every
//! connection, and the TLS words users already write in their URLs: libpq's `sslmode`,
//! `sslrootcert`, `sslcert`, `sslkey` in a Postgres URL, MySQL's `ssl-mode`, `ssl-ca`,
//! `ssl-cert`, `ssl-key` in a MySQL one. URL words are read into the same settings and taken out
//! of the URL; where both name a setting they must agree.

use std::path::PathBuf;

use serde::Deserialize;

/// How a connection uses TLS (libpq's words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlsMode {
    /// Plain TCP.
    Disable,
    /// TLS if the server offers it, plain otherwise; the certificate is not verified.
    Prefer,
    /// TLS, but the certificate is not verified (encrypts, does not authenticate the server).
    Require,
    /// TLS; the certificate chain is verified against the CA, the host name is not.
    VerifyCa,
    /// TLS; chain and host name are verified.
    VerifyFull,
}

impl TlsMode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            TlsMode::Disable => "disable",
            TlsMode::Prefer => "prefer",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        }
    }

    /// Whether the server's certificate is checked at all.
    pub(crate) fn verifies(self) -> bool {
        matches!(self, TlsMode::VerifyCa | TlsMode::VerifyFull)
    }

    fn parse_libpq(value: &str) -> Option<Self> {
        match value {
            "disable" | "allow" => Some(TlsMode::Disable),
            "prefer" => Some(TlsMode::Prefer),
            "require" => Some(TlsMode::Require),
            "verify-ca" => Some(TlsMode::VerifyCa),
            "verify-full" => Some(TlsMode::VerifyFull),
            _ => None,
        }
    }

    fn parse_mysql(value: &str) -> Option<Self> {
        match value.to_ascii_uppercase().as_str() {
            "DISABLED" => Some(TlsMode::Disable),
            "PREFERRED" => Some(TlsMode::Prefer),
            "REQUIRED" => Some(TlsMode::Require),
            "VERIFY_CA" => Some(TlsMode::VerifyCa),
            "VERIFY_IDENTITY" => Some(TlsMode::VerifyFull),
            _ => None,
        }
    }
}

/// A `tls` table. Paths name files (mounted secrets); the key file is read at connect time and
/// never logged.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// `verify-full` checks the chain and the name, `verify-ca` the chain, `require` nothing,
    /// `prefer` may fall back to plain. Default: the table's; `verify-full` with a `ca_file`.
    pub mode: Option<TlsMode>,
    /// PEM file of the CA certificate(s) to trust. Default: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (chain) for mutual TLS; needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file` (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// The name `verify-full` checks, where it is not the URL's host (an IP address, a load
    /// balancer). Default: the URL's host.
    pub server_name: Option<String>,
}

impl TlsConfig {
    /// The mode in force: the configured one, else `verify-full` when a CA is given, else
    /// `fallback` (the connection's own default).
    pub(crate) fn mode_or(&self, fallback: TlsMode) -> TlsMode {
        self.mode.unwrap_or(if self.ca_file.is_some() { TlsMode::VerifyFull } else { fallback })
    }

    /// Whether any key is set.
    pub(crate) fn is_set(&self) -> bool {
        *self != TlsConfig::default()
    }
}

/// The URL's own TLS words, in the same shape, and the URL without them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UrlTls {
    pub tls: TlsConfig,
    pub url: String,
}

/// The query parameters that are TLS settings, per dialect: (parameter, setting).
const POSTGRES_PARAMS: &[(&str, Setting)] =
    &[("sslmode", Setting::Mode), ("sslrootcert", Setting::Ca), ("sslcert", Setting::Cert), ("sslkey", Setting::Key)];
const MYSQL_PARAMS: &[(&str, Setting)] =
    &[("ssl-mode", Setting::Mode), ("ssl-ca", Setting::Ca), ("ssl-cert", Setting::Cert), ("ssl-key", Setting::Key)];
/// mysql_async's own TLS switches: refused, so one spelling decides.
const MYSQL_REFUSED: &[&str] = &["require_ssl", "verify_ca", "verify_identity", "built_in_roots"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setting {
    Mode,
    Ca,
    Cert,
    Key,
}

/// Reads and removes the TLS parameters of a `postgres://` or `mysql://` URL. Errors name the
/// parameter (never the URL, which may hold a password).
pub(crate) fn from_url(url: &str, mysql: bool) -> Result<UrlTls, Vec<String>> {
    let params = if mysql { MYSQL_PARAMS } else { POSTGRES_PARAMS };
    let parse = |value: &str| if mysql { TlsMode::parse_mysql(value) } else { TlsMode::parse_libpq(value) };
    let Some((base, query)) = url.split_once('?') else {
        return Ok(UrlTls { tls: TlsConfig::default(), url: url.to_owned() });
    };
    let mut tls = TlsConfig::default();
    let mut kept = Vec::new();
    let mut errors = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = crate::percent::decode(value);
        if mysql && MYSQL_REFUSED.contains(&name) {
            errors.push(format!("database.url: `{name}` is not read; say it with ssl-mode=… or [database.tls] mode"));
            continue;
        }
        match params.iter().find(|(p, _)| *p == name).map(|(_, s)| *s) {
            None => kept.push(pair),
            Some(Setting::Mode) => match parse(&value) {
                Some(mode) => tls.mode = Some(mode),
                None => errors.push(format!("database.url: {name}={value} is not a TLS mode")),
            },
            Some(Setting::Ca) if !mysql && value == "system" => {} // libpq's word for the system roots
            Some(Setting::Ca) => tls.ca_file = Some(PathBuf::from(value)),
            Some(Setting::Cert) => tls.cert_file = Some(PathBuf::from(value)),
            Some(Setting::Key) => tls.key_file = Some(PathBuf::from(value)),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let url = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    Ok(UrlTls { tls, url })
}

/// `explicit` (the `tls` table) merged with what the URL said; a setting given in both places
/// with different values is an error naming both.
pub(crate) fn merge(section: &str, explicit: &TlsConfig, from_url: &TlsConfig) -> Result<TlsConfig, Vec<String>> {
    let mut errors = Vec::new();
    fn pick<T: Clone + PartialEq>(
        a: &Option<T>,
        b: &Option<T>,
        key: &str,
        url_word: &str,
        errors: &mut Vec<String>,
    ) -> Option<T> {
        match (a, b) {
            (Some(x), Some(y)) if x != y => {
                errors.push(format!("{key} and the URL's {url_word} disagree; keep one"));
                a.clone()
            }
            (Some(_), _) => a.clone(),
            (None, _) => b.clone(),
        }
    }
    let merged = TlsConfig {
        mode: pick(&explicit.mode, &from_url.mode, &format!("{section}.tls.mode"), "TLS mode", &mut errors),
        ca_file: pick(&explicit.ca_file, &from_url.ca_file, &format!("{section}.tls.ca_file"), "CA", &mut errors),
        cert_file: pick(
            &explicit.cert_file,
            &from_url.cert_file,
            &format!("{section}.tls.cert_file"),
            "client certificate",
            &mut errors,
        ),
        key_file: pick(&explicit.key_file, &from_url.key_file, &format!("{section}.tls.key_file"), "key", &mut errors),
        // No URL carries a server name of its own.
        server_name: explicit.server_name.clone(),
    };
    if errors.is_empty() { Ok(merged) } else { Err(errors) }
}

/// Rules every `tls` table follows, whatever it is for; each error names `path`'s key.
pub(crate) fn check_shape(path: &str, tls: &TlsConfig, mode: TlsMode) -> Vec<String> {
    let mut errors = Vec::new();
    if tls.cert_file.is_some() != tls.key_file.is_some() {
        errors.push(format!("{path}.cert_file and {path}.key_file go together (mutual TLS needs both)"));
    }
    if mode == TlsMode::Disable && (tls.ca_file.is_some() || tls.cert_file.is_some()) {
        errors.push(format!("{path}: certificates are given but mode is disable"));
    }
    if let Some(name) = &tls.server_name {
        if mode != TlsMode::VerifyFull {
            errors.push(format!(
                "{path}.server_name is the name verify-full checks the certificate for; mode is {}",
                mode.name()
            ));
        }
        if rustls::pki_types::ServerName::try_from(name.as_str()).is_err() {
            errors.push(format!("{path}.server_name `{name}` is not a DNS name or an IP address"));
        }
    }
    errors
}

/// `[telemetry.tls]`, `[admin.tls]`: a listener's own certificate, as Prometheus exporters take it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ListenerTls {
    /// PEM certificate (chain) the listener presents.
    pub cert_file: std::path::PathBuf,
    /// PEM private key of `cert_file`.
    pub key_file: std::path::PathBuf,
    /// PEM CA certificate(s): when set, clients must present a certificate it signed.
    pub client_ca_file: Option<std::path::PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_words_are_read_and_taken_out_of_the_url() {
        let parsed = from_url(
            "postgres://u:p@db:5432/x?application_name=a&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&sslcert=/c&sslkey=/k",
            false,
        )
        .unwrap();
        assert_eq!(parsed.url, "postgres://u:p@db:5432/x?application_name=a");
        assert_eq!(parsed.tls.mode, Some(TlsMode::VerifyFull));
        assert_eq!(parsed.tls.ca_file, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!((parsed.tls.cert_file.is_some(), parsed.tls.key_file.is_some()), (true, true));
    }

    #[test]
    fn mysql_words_are_read_and_its_driver_switches_refused() {
        let parsed = from_url("mysql://u@db/x?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem", true).unwrap();
        assert_eq!((parsed.url.as_str(), parsed.tls.mode), ("mysql://u@db/x", Some(TlsMode::VerifyFull)));
        let errors = from_url("mysql://u@db/x?require_ssl=true", true).unwrap_err();
        assert!(errors[0].contains("require_ssl") && errors[0].contains("ssl-mode"), "{errors:?}");
        let errors = from_url("postgres://u:secret@db/x?sslmode=paranoid", false).unwrap_err();
        assert!(errors[0].contains("sslmode=paranoid") && !errors[0].contains("secret"), "{errors:?}");
    }

    #[test]
    fn a_ca_means_verify_full_unless_a_mode_is_named() {
        let with_ca = TlsConfig { ca_file: Some("/ca".into()), ..Default::default() };
        assert_eq!(with_ca.mode_or(TlsMode::Prefer), TlsMode::VerifyFull);
        assert_eq!(TlsConfig::default().mode_or(TlsMode::Prefer), TlsMode::Prefer);
        let named = TlsConfig { mode: Some(TlsMode::VerifyCa), ..with_ca };
        assert_eq!(named.mode_or(TlsMode::Prefer), TlsMode::VerifyCa);
    }

    #[test]
    fn the_table_and_the_url_must_agree() {
        let table = TlsConfig { mode: Some(TlsMode::Require), ..Default::default() };
        let url = TlsConfig { mode: Some(TlsMode::VerifyFull), ca_file: Some("/ca".into()), ..Default::default() };
        let errors = merge("database", &table, &url).unwrap_err();
        assert!(errors[0].contains("database.tls.mode"), "{errors:?}");
        let same = TlsConfig { mode: Some(TlsMode::VerifyFull), ..Default::default() };
        assert_eq!(merge("database", &same, &url).unwrap().ca_file, Some(PathBuf::from("/ca")));
    }

    #[test]
    fn server_name_is_checked_only_in_verify_full_and_must_be_a_name() {
        let named = |name: &str| TlsConfig { server_name: Some(name.into()), ..Default::default() };
        assert!(check_shape("redis.tls", &named("redis.internal"), TlsMode::VerifyFull).is_empty());
        assert!(check_shape("redis.tls", &named("10.0.0.7"), TlsMode::VerifyFull).is_empty());
        let errors = check_shape("redis.tls", &named("redis.internal"), TlsMode::VerifyCa);
        assert!(errors[0].contains("redis.tls.server_name") && errors[0].contains("verify-ca"), "{errors:?}");
        let errors = check_shape("nats.tls", &named("not a name"), TlsMode::VerifyFull);
        assert!(errors[0].contains("nats.tls.server_name `not a name`"), "{errors:?}");
    }

    #[test]
    fn mariadb_refuses_a_server_name_its_driver_cannot_check() {
        let toml = "[database]\nurl = \"mysql://db/app\"\n[database.tls]\nmode = \"verify-full\"\nserver_name = \"db.internal\"\n";
        let error = crate::config::load_str(toml).unwrap_err().to_string();
        assert!(error.contains("database.tls.server_name cannot be honoured on MySQL"), "{error}");
    }
}
