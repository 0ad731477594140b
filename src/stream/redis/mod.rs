//! Redis Streams via `fred`: standalone, sentinel or cluster, chosen by the URL scheme.

use std::time::{SystemTime, UNIX_EPOCH};

use fred::prelude::*;
use fred::types::config::{TlsConfig, TlsConnector, TlsHostMapping};
use fred::types::streams::{XCap, XCapKind, XCapTrim};

use super::{AppendOptions, AppendOutcome, Entry, EventStream, Trim, Unavailable};
use crate::config::{RedisConfig, TlsMode};

#[derive(Clone)]
pub struct RedisStream {
    client: Client,
    /// SHA of the loaded append script; cleared when Redis forgets it (restart, failover).
    script_sha: std::sync::Arc<tokio::sync::Mutex<Option<String>>>,
}

/// Why connecting failed: a bad URL or credentials (fatal), or an unreachable server.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("redis.url is invalid: {0}")]
    Config(String),
    #[error("redis rejected the credentials: {0}")]
    Auth(String),
    #[error("redis is unreachable: {0}")]
    Unreachable(String),
}

impl RedisStream {
    /// Builds a client that reconnects by itself with exponential backoff, forever. Waits up to
    /// `command_timeout` for the first connection: bad URLs and credentials fail at once, an
    /// unreachable server is returned as `Unreachable` along with the client, which keeps trying.
    pub async fn connect(config: &RedisConfig) -> Result<(Self, Option<ConnectError>), ConnectError> {
        let url = config.url.as_ref().map(|u| u.expose()).unwrap_or("redis://127.0.0.1:6379");
        let mode = config.tls_mode();
        // fred would build its own TLS settings for a `rediss` scheme; handoff's (CA file, client
        // certificate, mode) replace them, so it parses the plain scheme.
        let plain_url = if mode == TlsMode::Disable { url.to_owned() } else { plain_scheme(url) };
        let mut redis_config =
            Config::from_url(&plain_url).map_err(|e| ConnectError::Config(e.details().to_owned()))?;
        if mode != TlsMode::Disable {
            let client = crate::tls::client_config("redis.tls", mode, &config.tls).map_err(ConnectError::Config)?;
            // Cluster nodes and a sentinel's primary are announced by IP address: they are
            // verified against the host name the URL names.
            redis_config.tls =
                Some(TlsConfig { connector: TlsConnector::from(client), hostnames: TlsHostMapping::DefaultHost });
        }
        redis_config.fail_fast = false;
        let client = Builder::from_config(redis_config)
            .with_connection_config(|c| {
                c.connection_timeout = config.command_timeout;
                c.internal_command_timeout = config.command_timeout;
                // Few resends: a command cut off by a dropped connection soon fails back to the
                // relay, which releases the row itself (the relay does the long retrying).
                c.max_command_attempts = 2;
            })
            .with_performance_config(|p| p.default_command_timeout = config.command_timeout)
            .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
            .build()
            .map_err(|e| ConnectError::Config(e.details().to_owned()))?;
        client.connect();
        let first = tokio::time::timeout(config.command_timeout, client.wait_for_connect()).await;
        let warning = match first {
            Ok(Ok(())) => None,
            Ok(Err(e)) if *e.kind() == ErrorKind::Auth => return Err(ConnectError::Auth(e.details().to_owned())),
            Ok(Err(e)) => Some(ConnectError::Unreachable(e.details().to_owned())),
            Err(_) => Some(ConnectError::Unreachable("no connection within redis.command_timeout".into())),
        };
        Ok((Self { client, script_sha: Default::default() }, warning))
    }

    /// The underlying client, for components that need more than appends (bridge, trimming).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A new client with its own connection(s), for blocking reads that must not hold up the
    /// shared connection. It reconnects by itself like the original.
    pub fn dedicated(&self) -> Client {
        let client = self.client.clone_new();
        client.connect();
        client
    }
}

impl EventStream for RedisStream {
    async fn append(&self, entries: &[Entry], options: &AppendOptions) -> Vec<AppendOutcome> {
        if options.dedupe.is_some() || entries.iter().any(|e| e.run.is_some()) {
            return self.append_scripted(entries, options).await;
        }
        self.append_plain(entries, options.trim).await
    }

    async fn ping(&self) -> Result<(), Unavailable> {
        self.client.ping::<String>(None).await.map(drop).map_err(|e| Unavailable(e.details().to_owned()))
    }

    async fn trim_acknowledged(&self, stream: &str) -> Result<u64, Unavailable> {
        self.trim_below_acknowledged(stream).await
    }
}

impl RedisStream {
    /// One pipelined XADD per entry: the fast path when nothing needs a script.
    async fn append_plain(&self, entries: &[Entry], trim: Option<Trim>) -> Vec<AppendOutcome> {
        let results: Vec<Result<String, Error>> = if self.client.is_clustered() {
            // A pipeline goes to one node; across slots, concurrent commands (which the client
            // pipelines per node by itself) reach each entry's node.
            let calls =
                entries.iter().map(|e| self.client.xadd(e.stream.as_str(), false, cap(trim), "*", e.fields.clone()));
            futures_util::future::join_all(calls).await
        } else {
            let pipeline = self.client.pipeline();
            for entry in entries {
                // Queuing only buffers the command locally; errors arrive with the results.
                let _: Result<(), _> =
                    pipeline.xadd(entry.stream.as_str(), false, cap(trim), "*", entry.fields.clone()).await;
            }
            pipeline.try_all().await
        };
        outcomes(results, entries.len(), outcome)
    }
}

/// `rediss://…` → `redis://…` (likewise `-cluster`, `-sentinel`, and fred's `valkeys`).
fn plain_scheme(url: &str) -> String {
    let url = url.trim_start();
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let plain = scheme.to_ascii_lowercase().replacen("rediss", "redis", 1).replacen("valkeys", "valkey", 1);
            format!("{plain}://{rest}")
        }
        None => url.to_owned(),
    }
}

/// One outcome per command. A pipeline that failed as a whole answers with a single error: then
/// no command can be trusted to have failed for its own reasons, and all count as unavailable.
pub(super) fn outcomes<T>(
    results: Vec<Result<T, Error>>,
    expected: usize,
    each: impl Fn(Result<T, Error>) -> AppendOutcome,
) -> Vec<AppendOutcome> {
    if results.len() == expected {
        return results.into_iter().map(each).collect();
    }
    let why = results.into_iter().find_map(Result::err).map(|e| e.details().to_owned());
    vec![AppendOutcome::Unavailable(why.unwrap_or_else(|| "no reply from redis".into())); expected]
}

/// The MINID for `min_age` trimming, by the relay's clock.
pub(super) fn min_id(age: std::time::Duration) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}-0", now.saturating_sub(age).as_millis())
}

fn cap(trim: Option<Trim>) -> XCap {
    match trim {
        None => XCap::from(None::<()>),
        Some(Trim::MaxLen(n)) => XCap::try_from((XCapKind::MaxLen, XCapTrim::AlmostExact, n as i64))
            .unwrap_or_else(|_| XCap::from(None::<()>)),
        Some(Trim::MinAge(age)) => XCap::try_from((XCapKind::MinID, XCapTrim::AlmostExact, min_id(age)))
            .unwrap_or_else(|_| XCap::from(None::<()>)),
    }
}

mod scripted;
mod trim;

/// Server replies that mean the broker, not the entry, is the problem.
const OUTAGE_REPLIES: &[&str] = &[
    "LOADING",
    "READONLY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "BUSY",
    "OOM",
    "NOREPLICAS",
    "MISCONF",
    "NOAUTH",
    "WRONGPASS",
    "NOPERM",
];

fn outcome(result: Result<String, Error>) -> AppendOutcome {
    match result {
        Ok(id) => AppendOutcome::Appended(id),
        Err(e) if is_outage(&e) => AppendOutcome::Unavailable(e.details().to_owned()),
        Err(e) => AppendOutcome::Rejected(e.details().to_owned()),
    }
}

/// An error reply (from inside the append script) as an outcome.
pub(super) fn reply_outcome(reply: &str) -> AppendOutcome {
    let code = reply.split_whitespace().next().unwrap_or_default();
    if OUTAGE_REPLIES.contains(&code) {
        AppendOutcome::Unavailable(reply.to_owned())
    } else {
        AppendOutcome::Rejected(reply.to_owned())
    }
}

/// Connection-level failures and broker states that pass by themselves are outages; a reply
/// about this particular command (WRONGTYPE, ERR …) is the entry's.
pub fn is_outage(error: &Error) -> bool {
    match error.kind() {
        ErrorKind::InvalidArgument | ErrorKind::InvalidCommand => false,
        ErrorKind::Unknown => {
            let code = error.details().split_whitespace().next().unwrap_or_default();
            OUTAGE_REPLIES.contains(&code)
                || error.details().contains("max number of clients")
                // The client gave up resending (connection trouble, cluster redirections).
                || error.details().starts_with("Too many failed write attempts")
        }
        _ => true,
    }
}

/// Milliseconds part of a Redis entry id (`1700000000000-0`).
pub fn entry_millis(entry_id: &str) -> Option<u64> {
    entry_id.split('-').next()?.parse().ok()
}
