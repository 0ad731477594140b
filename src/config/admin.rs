//! `[admin]`: the admin listener (off unless the table is there), its tokens and TLS.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::secret::Secret;
use crate::tls::config::ListenerTls;

/// `[admin]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Where the admin API and status page listen. Separate from `telemetry.listen`: the probes
    /// and `/metrics` never share its credentials.
    pub listen: SocketAddr,
    /// Who may call it: at least one token.
    #[serde(default, rename = "token")]
    pub tokens: Vec<AdminToken>,
    /// The listener's own certificate. Default: plain HTTP (keep it on a private address).
    pub tls: Option<ListenerTls>,
    /// A request's headers must arrive within this, and its body within this again.
    /// Default: "5s".
    #[serde(default = "five_seconds", with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// As `telemetry.max_connections`. Default: 32.
    ///
    /// A flood of idle or slow connections can neither shut the operators out nor grow the process.
    #[serde(default = "thirty_two")]
    pub max_connections: usize,
}

/// `[[admin.token]]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminToken {
    /// Who calls with it, as the audit log and a pause's `paused_by` name it.
    pub name: String,
    /// `read`: status, lists, the page. `write`: also re-drives, pause / resume, replay,
    /// rewind, reprocess.
    pub scope: Scope,
    /// A file holding the token (at least 16 characters).
    pub token_file: PathBuf,
    /// Read from the file when the configuration loads.
    #[serde(skip)]
    pub token: Option<Secret>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Read,
    Write,
}

fn five_seconds() -> Duration {
    Duration::from_secs(5)
}

fn thirty_two() -> usize {
    32
}

/// The shortest token accepted: a guessable one would open the write API.
pub(crate) const MIN_TOKEN_LEN: usize = 16;

/// Reads each token's file; problems name the token.
pub(super) fn read_tokens(admin: &mut AdminConfig, errors: &mut Vec<String>) {
    if admin.tokens.is_empty() {
        errors.push("admin: at least one [[admin.token]] is required (name, scope, token_file)".into());
    }
    let mut names = std::collections::BTreeSet::new();
    for token in &mut admin.tokens {
        if !names.insert(token.name.clone()) {
            errors.push(format!("admin.token `{}`: the name is used twice", token.name));
        }
        match std::fs::read_to_string(&token.token_file) {
            Ok(text) if text.trim().len() >= MIN_TOKEN_LEN => token.token = Some(Secret::new(text.trim())),
            Ok(text) => errors.push(format!(
                "admin.token `{}`: {} holds {} characters; a token needs at least {MIN_TOKEN_LEN}",
                token.name,
                token.token_file.display(),
                text.trim().len()
            )),
            Err(e) => {
                errors.push(format!("admin.token `{}`: cannot read {}: {e}", token.name, token.token_file.display()))
            }
        }
    }
}
