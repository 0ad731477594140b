//! TLS for every connection handoff makes (Postgres, MySQL, Redis, HTTP handlers): a rustls
//! client configuration built from a `tls` table and a mode in libpq's words, with the ring
//! provider. Errors name the config key at fault and never a file's contents.

pub(crate) mod config;
pub(crate) mod https;
mod verify;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

pub(crate) use config::{TlsConfig, TlsMode};

/// Why a TLS configuration could not be built: each names the key at fault (and the file), never
/// a file's contents.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{key}: cannot read certificates from {}: {detail}", file.display())]
    Unreadable { key: String, file: PathBuf, detail: String },
    #[error("{key}: no certificate in {}", file.display())]
    NoCertificate { key: String, file: PathBuf },
    #[error("{key}: no usable CA certificate in {}", file.display())]
    NoCa { key: String, file: PathBuf },
    #[error("{key}: no usable private key in {}: {detail}", file.display())]
    NoKey { key: String, file: PathBuf, detail: String },
    #[error(
        "{path}.ca_file: mode {mode} verifies the server against a CA, none is given and the system has no root certificates"
    )]
    NoSystemRoots { path: String, mode: &'static str },
    #[error("{path}.mode is disable: no TLS configuration to build")]
    Disabled { path: String },
    #[error("{key}: {detail}")]
    Refused { key: String, detail: String },
}

/// Why `handoff check`'s handshake with a server did not finish.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProbeError {
    #[error("`{host}` is not a valid TLS server name: {detail}")]
    Name { host: String, detail: String },
    #[error("{0}")]
    Connect(std::io::Error),
    #[error("no TLS handshake within {0:?}")]
    Timeout(Duration),
}

/// The one crypto provider handoff uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client configuration for `mode` (which must not be `disable`). `path` is the `tls`
/// table's key path (`database.tls`), used in errors.
pub(crate) fn client_config(path: &str, mode: TlsMode, tls: &TlsConfig) -> Result<ClientConfig, TlsError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| refused(path, e))?;
    let builder = match mode {
        TlsMode::Disable => return Err(TlsError::Disabled { path: path.to_owned() }),
        TlsMode::VerifyFull => match &tls.server_name {
            None => builder.with_root_certificates(roots(path, mode, tls)?),
            Some(name) => {
                let verifier =
                    verify::Verifier::renamed(roots(path, mode, tls)?, provider, name).map_err(|e| refused(path, e))?;
                builder.dangerous().with_custom_certificate_verifier(Arc::new(verifier))
            }
        },
        TlsMode::VerifyCa => {
            let verifier =
                verify::Verifier::chain_only(roots(path, mode, tls)?, provider).map_err(|e| refused(path, e))?;
            builder.dangerous().with_custom_certificate_verifier(Arc::new(verifier))
        }
        TlsMode::Require | TlsMode::Prefer => {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(verify::Verifier::unverified(provider)))
        }
    };
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let chain = certificates(&format!("{path}.cert_file"), cert)?;
            let key = private_key(&format!("{path}.key_file"), key)?;
            builder.with_client_auth_cert(chain, key).map_err(|e| refused(&format!("{path}.key_file"), e))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// The telemetry listener's server configuration (`[telemetry.tls]`): its certificate, and the
/// CA its clients' certificates must be signed by, when one is given.
pub(crate) fn server_config(tls: &crate::tls::config::ListenerTls) -> Result<rustls::ServerConfig, TlsError> {
    let path = "telemetry.tls";
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| refused(path, e))?;
    let builder = match &tls.client_ca_file {
        Some(file) => {
            let key = format!("{path}.client_ca_file");
            let mut store = RootCertStore::empty();
            let (added, _) = store.add_parsable_certificates(certificates(&key, file)?);
            if added == 0 {
                return Err(TlsError::NoCa { key, file: file.clone() });
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider())
                .build()
                .map_err(|e| refused(&key, e))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let chain = certificates(&format!("{path}.cert_file"), &tls.cert_file)?;
    let key = private_key(&format!("{path}.key_file"), &tls.key_file)?;
    builder.with_single_cert(chain, key).map_err(|e| refused(&format!("{path}.key_file"), e))
}

/// The CA file's certificates, or the system's roots when none is given.
fn roots(path: &str, mode: TlsMode, tls: &TlsConfig) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    match &tls.ca_file {
        Some(file) => {
            let key = format!("{path}.ca_file");
            let (added, _) = store.add_parsable_certificates(certificates(&key, file)?);
            if added == 0 {
                return Err(TlsError::NoCa { key, file: file.clone() });
            }
        }
        None => {
            store.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if store.is_empty() {
                return Err(TlsError::NoSystemRoots { path: path.to_owned(), mode: mode.name() });
            }
        }
    }
    Ok(store)
}

fn certificates(key: &str, file: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(file)
        .and_then(|iter| iter.collect::<Result<_, _>>())
        .map_err(|e| TlsError::Unreadable { key: key.to_owned(), file: file.to_owned(), detail: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { key: key.to_owned(), file: file.to_owned() });
    }
    Ok(certs)
}

fn private_key(key: &str, file: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(file).map_err(|e| TlsError::NoKey {
        key: key.to_owned(),
        file: file.to_owned(),
        detail: e.to_string(),
    })
}

/// rustls refused what it was given (a key that does not match its certificate, say).
fn refused(key: &str, error: impl std::fmt::Display) -> TlsError {
    TlsError::Refused { key: key.to_owned(), detail: error.to_string() }
}

/// What a mode promises, for logs and `handoff check`.
pub(crate) fn describe(mode: TlsMode) -> &'static str {
    match mode {
        TlsMode::Disable => "not encrypted (tls mode disable)",
        TlsMode::Prefer => {
            "plain text if the server offers no TLS, and the certificate NOT verified if it does (mode prefer, libpq's default)"
        }
        TlsMode::Require => "encrypted, certificate NOT verified (mode require)",
        TlsMode::VerifyCa => "certificate chain verified, host name not checked (mode verify-ca)",
        TlsMode::VerifyFull => "certificate and host name verified (mode verify-full)",
    }
}

/// Whether `host` is this machine (a sidecar's neighbour): an unverified connection to anything
/// else deserves a warning.
pub(crate) fn is_local(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.starts_with('/') || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Host and port of a URL (`scheme://[user[:pass]@]host[:port][/…][?…]`), without the
/// credentials; for a URL naming several hosts, the first.
pub(crate) fn host_port(url: &str) -> Option<(String, Option<u16>)> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let hosts = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let first = hosts.split(',').next()?;
    let (host, port) = match first.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && !port.contains(']') => (host, port.parse().ok()),
        _ => (first, None),
    };
    (!host.is_empty()).then(|| (host.trim_start_matches('[').trim_end_matches(']').to_owned(), port))
}

/// A log or `check` line for a connection to `host` in `mode`; `warn` when the connection is
/// unverified and leaves the machine.
pub(crate) fn summary(host: &str, mode: TlsMode) -> (String, bool) {
    let warn = !mode.verifies() && !is_local(host);
    let advice = if warn {
        " — the connection leaves this machine unverified: anyone on the path can read or change it; set its tls mode to verify-full (in a Postgres URL: sslmode=verify-full)"
    } else {
        ""
    };
    (format!("{} (server `{host}`){advice}", describe(mode)), warn)
}

/// `error` with advice naming the keys to look at, when it is a TLS failure (`path` is the
/// connection's `tls` table); unchanged otherwise.
pub(crate) fn explain(path: &str, error: &str) -> String {
    let lower = error.to_ascii_lowercase();
    let advice = if lower.contains("not valid for name") {
        format!(
            "the server's certificate does not name the host the URL connects to: connect by a name it lists, set {path}.server_name to one, or set {path}.mode = \"verify-ca\""
        )
    } else if lower.contains("unknownissuer") || lower.contains("unknown issuer") || lower.contains("badsignature") {
        format!(
            "the server's certificate is not signed by a CA in {path}.ca_file (or the system's roots when it is not set)"
        )
    } else if lower.contains("certificaterequired")
        || lower.contains("certificate required")
        || lower.contains("requires a valid client certificate")
    {
        format!("the server asks for a client certificate: set {path}.cert_file and {path}.key_file")
    } else if lower.contains("expired") && lower.contains("certificate") {
        "the server's certificate has expired (or is not valid yet)".to_owned()
    } else if lower.contains("tls") || lower.contains("certificate") || lower.contains("handshake") {
        format!("TLS handshake failed; see {path}")
    } else {
        return error.to_owned();
    };
    format!("{error} ({advice})")
}

/// A finished handshake, as `handoff check` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    pub version: String,
    pub cipher: String,
}

/// Connects to `host:port` and runs a TLS handshake with `config` (which decides what is
/// verified), for `check` to report what a connection negotiates. Closes at once.
pub(crate) async fn probe(
    host: &str,
    port: u16,
    config: Arc<ClientConfig>,
    timeout: Duration,
) -> Result<Session, ProbeError> {
    let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_owned())
        .map_err(|e| ProbeError::Name { host: host.to_owned(), detail: e.to_string() })?;
    let handshake = async {
        let tcp = tokio::net::TcpStream::connect((host, port)).await.map_err(ProbeError::Connect)?;
        let tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.map_err(ProbeError::Connect)?;
        let (_, connection) = tls.get_ref();
        Ok(Session {
            version: connection.protocol_version().map(|v| format!("{v:?}")).unwrap_or_default(),
            cipher: connection.negotiated_cipher_suite().map(|s| format!("{:?}", s.suite())).unwrap_or_default(),
        })
    };
    tokio::time::timeout(timeout, handshake).await.map_err(|_| ProbeError::Timeout(timeout))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_key() {
        let tls = TlsConfig { ca_file: Some("/nonexistent/ca.pem".into()), ..Default::default() };
        let error = client_config("database.tls", TlsMode::VerifyFull, &tls).unwrap_err().to_string();
        assert!(error.starts_with("database.tls.ca_file: cannot read"), "{error}");
        let tls =
            TlsConfig { cert_file: Some("/nonexistent/c".into()), key_file: Some("/k".into()), ..Default::default() };
        let error = client_config("redis.tls", TlsMode::Require, &tls).unwrap_err().to_string();
        assert!(error.starts_with("redis.tls.cert_file"), "{error}");
    }

    #[test]
    fn host_and_port_without_credentials() {
        assert_eq!(host_port("postgres://u:p@db.internal:6432/x?a=b"), Some(("db.internal".into(), Some(6432))));
        assert_eq!(host_port("rediss://:secret@cache/0"), Some(("cache".into(), None)));
        assert_eq!(host_port("redis-cluster://[::1]:7000?node=h:1"), Some(("::1".into(), Some(7000))));
        assert_eq!(host_port("https://hooks.local/x"), Some(("hooks.local".into(), None)));
    }

    #[test]
    fn an_unverified_connection_off_the_machine_is_said_plainly() {
        let (line, warn) = summary("db.internal", TlsMode::Prefer);
        assert!(
            warn && line.contains("plain text") && line.contains("NOT verified") && line.contains("verify-full"),
            "{line}"
        );
        assert!(!summary("127.0.0.1", TlsMode::Prefer).1, "a sidecar's neighbour on loopback is not warned about");
        assert!(!summary("db.internal", TlsMode::VerifyFull).1);
    }

    #[test]
    fn local_hosts() {
        assert!(is_local("127.0.0.1") && is_local("localhost") && is_local("[::1]") && is_local("/run/postgresql"));
        assert!(!is_local("db.internal") && !is_local("10.0.0.5"));
    }
}
