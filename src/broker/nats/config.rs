//! `[nats]`: the NATS server (with JetStream) a relay may publish to and a bridge read from
//! instead of Redis (`broker = "nats"`): its URL, TLS (`[nats.tls]`, verified by default) and one way to
//! authenticate, each secret read from a file.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsConfig {
    /// `nats://host:port`, or `tls://host:port` for TLS. No credentials in it (it is logged):
    /// they are read from the files below.
    pub url: String,
    /// TLS; set, or a `tls://` URL: required, `verify-full` unless `mode` says otherwise. Default:
    /// off.
    #[serde(default)]
    pub tls: crate::tls::config::TlsConfig,
    /// A file holding the server's authorization token.
    pub token_file: Option<PathBuf>,
    /// A user name, with its password in `password_file`.
    pub user: Option<String>,
    /// A file holding `user`'s password.
    pub password_file: Option<PathBuf>,
    /// A `.creds` file (JWT and NKey seed, as `nsc` writes it).
    pub credentials_file: Option<PathBuf>,
    /// A file holding an NKey seed (`SU…`).
    pub nkey_file: Option<PathBuf>,
    /// The JetStream stream that captures the relays' subjects (created and configured by the
    /// operator; its duplicate window is the relay's dedupe window). Default: "HANDOFF".
    #[serde(default = "defaults::stream")]
    pub stream: String,
    /// Copies of each message when `handoff migrate` creates the stream (3 in a cluster: a
    /// PubAck then means stored on a quorum). Default: 1.
    #[serde(default = "defaults::replicas")]
    pub replicas: usize,
    /// How long a publish waits for its PubAck, and any other call for its answer. Default: "5s".
    #[serde(default = "defaults::timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

impl NatsConfig {
    /// The servers `url` lists (comma-separated: a cluster's seeds; the client learns the rest).
    pub(crate) fn urls(&self) -> impl Iterator<Item = &str> {
        self.url.split(',').map(str::trim)
    }

    /// What is wrong with the section, each naming its key.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for url in self.urls() {
            match url.split_once("://") {
                Some(("nats" | "tls", rest)) if !rest.is_empty() && !rest.contains('@') => {}
                Some(("nats" | "tls", rest)) if rest.contains('@') => problems.push(
                    "nats.url: credentials do not belong in the URL (it is logged); use token_file, user + password_file, credentials_file or nkey_file".into(),
                ),
                _ => problems.push(format!("nats.url: `{url}` is not nats://host:port or tls://host:port")),
            }
        }
        let ways = [
            self.token_file.is_some(),
            self.user.is_some() || self.password_file.is_some(),
            self.credentials_file.is_some(),
            self.nkey_file.is_some(),
        ];
        if ways.iter().filter(|w| **w).count() > 1 {
            problems.push("nats: set one of token_file, user + password_file, credentials_file, nkey_file".into());
        }
        if self.user.is_some() != self.password_file.is_some() {
            problems.push("nats.user and nats.password_file go together".into());
        }
        if self.tls.mode == Some(crate::tls::config::TlsMode::Disable) && self.tls_required() {
            problems.push("nats.tls.mode: disable, but a tls:// URL or other [nats.tls] keys ask for TLS".into());
        }
        let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if self.stream.is_empty() || !self.stream.chars().all(valid) {
            problems.push("nats.stream: a JetStream stream name is 1 or more of [A-Za-z0-9_-]".into());
        }
        if !(1..=5).contains(&self.replicas) {
            problems.push("nats.replicas must be between 1 and 5".into());
        }
        if self.timeout.is_zero() {
            problems.push("nats.timeout must be > 0".into());
        }
        problems
    }

    /// A plain connection to `url` with the defaults (for tests and the benchmark).
    pub fn new(url: &str, stream: &str) -> Self {
        Self {
            url: url.to_owned(),
            stream: stream.to_owned(),
            timeout: defaults::timeout(),
            replicas: defaults::replicas(),
            tls: Default::default(),
            token_file: None,
            user: None,
            password_file: None,
            credentials_file: None,
            nkey_file: None,
        }
    }

    /// Whether the connection must be TLS: a `tls://` URL or any `[nats.tls]` key.
    pub(crate) fn tls_required(&self) -> bool {
        self.urls().any(|url| url.starts_with("tls://"))
            || self.tls.ca_file.is_some()
            || self.tls.cert_file.is_some()
            || matches!(self.tls.mode, Some(m) if m != crate::tls::config::TlsMode::Disable && m != crate::tls::config::TlsMode::Prefer)
            || self.tls.server_name.is_some()
    }
}

mod defaults {
    use std::time::Duration;

    pub(super) fn stream() -> String {
        "HANDOFF".into()
    }

    pub(super) fn replicas() -> usize {
        1
    }

    pub(super) fn timeout() -> Duration {
        Duration::from_secs(5)
    }
}

/// Whether `subject` is a NATS subject a consumer can filter on: dot-separated non-empty tokens
/// of printable characters other than space, `*` and `>` only as whole tokens (`>` last).
pub(crate) fn is_subject(subject: &str) -> bool {
    let tokens: Vec<&str> = subject.split('.').collect();
    tokens.iter().enumerate().all(|(i, token)| {
        !token.is_empty()
            && token.chars().all(|c| c.is_ascii_graphic())
            && (!token.contains(['*', '>']) || *token == "*" || (*token == ">" && i == tokens.len() - 1))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_stay_out_of_the_url_and_one_way_to_authenticate_is_set() {
        assert!(NatsConfig::new("nats://127.0.0.1:4222", "AUDIT").problems().is_empty());
        assert!(NatsConfig::new("tls://nats.internal:4222", "AUDIT").problems().is_empty());
        let in_url = NatsConfig::new("nats://user:pw@127.0.0.1:4222", "AUDIT").problems();
        assert!(in_url.iter().any(|p| p.starts_with("nats.url: credentials")), "{in_url:?}");
        let other = NatsConfig::new("redis://127.0.0.1:6379", "AUDIT").problems();
        assert!(other.iter().any(|p| p.contains("not nats://")), "{other:?}");
        let two = NatsConfig {
            token_file: Some("/run/secrets/token".into()),
            nkey_file: Some("/run/secrets/seed".into()),
            ..NatsConfig::new("nats://127.0.0.1:4222", "AUDIT")
        };
        assert!(two.problems().iter().any(|p| p.contains("set one of")), "{:?}", two.problems());
        let lonely = NatsConfig { user: Some("relay".into()), ..NatsConfig::new("nats://h:4222", "AUDIT") };
        assert!(lonely.problems().iter().any(|p| p.contains("go together")));
        let name = NatsConfig::new("nats://h:4222", "audit.stream").problems();
        assert!(name.iter().any(|p| p.starts_with("nats.stream")), "{name:?}");
    }

    #[test]
    fn tls_is_required_by_a_tls_url_or_any_tls_key() {
        assert!(!NatsConfig::new("nats://h:4222", "S").tls_required());
        assert!(NatsConfig::new("tls://h:4222", "S").tls_required());
        let mut ca = NatsConfig::new("nats://h:4222", "S");
        ca.tls.ca_file = Some("/ca.pem".into());
        assert!(ca.tls_required());
    }

    #[test]
    fn a_subject_is_dot_separated_tokens_with_wildcards_only_as_whole_tokens() {
        for ok in ["audit.user", "audit.*", "audit.>", "a"] {
            assert!(super::is_subject(ok), "{ok}");
        }
        for bad in ["", "audit..user", "audit:user x", "audit.us*r", "audit.>.x", "audit."] {
            assert!(!super::is_subject(bad), "{bad}");
        }
    }
}
