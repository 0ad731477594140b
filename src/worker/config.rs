//! `[[worker]]`: the inbox state machine applying handlers to one consumer's inbox rows.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::names::{is_identifier, is_label};
use crate::runtime::loop_config::{ClaimLoopConfig, WorkerLoop};
use crate::tls::config::TlsMode;
use crate::worker::inbox::contract::WorkerStatement;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerConfig {
    /// Name in metrics labels, logs and the lease owner id. Required, unique among workers.
    pub name: String,
    /// Whose inbox rows to process (the bridge's `consumer`).
    pub consumer: String,
    /// Inbox table. Default: "consumer_inbox".
    #[serde(default = "defaults::table")]
    pub table: String,
    /// How the worker's claim loops run: `batch_size`, `concurrency`, `poll_interval`, `lease`,
    /// `max_attempts`, `backoff`, `outage_backoff`, `claim` (written in `[[worker]]` itself).
    /// `claim = "locked"` needs Postgres, the reference statements and SQL handlers only.
    #[serde(default)]
    pub claim_loop: ClaimLoopConfig<WorkerLoop>,
    /// Lease expiries (its worker died mid-handler) before a row turns DEAD. Default: 3.
    #[serde(default = "defaults::max_expired_leases")]
    pub max_expired_leases: u32,
    /// Longest `last_error` kept, in characters. Default: 2000.
    #[serde(default = "defaults::error_max_len")]
    pub error_max_len: usize,
    /// What to do with an event type no handler names: `dead` or `skip` (marked PROCESSED with
    /// no effect). Default: "dead".
    #[serde(default)]
    pub unhandled: Unhandled,
    /// Purge PROCESSED (and IGNORED) rows after an age. Default: off (they stay).
    pub retention: Option<InboxRetention>,
    /// Handlers, tried in order; the first whose `event_types` matches applies.
    #[serde(default, rename = "handler")]
    pub handlers: Vec<HandlerConfig>,
    /// What a handler statement's error means, by the server's code: `retry` first, then `dead`,
    /// then the dialect (a data or constraint error: DEAD; anything else: an outage).
    #[serde(default)]
    pub handler_errors: HandlerErrors,
    /// Statement overrides for an inbox of your own; absent ones use the reference schema's.
    #[serde(default)]
    pub sql: WorkerOverrides,
}

impl WorkerConfig {
    /// Every problem of this section alone, each naming its key under `path` (statements and
    /// names used twice read other sections: the root configuration checks those).
    pub(crate) fn problems(&self, path: &str) -> Vec<String> {
        let mut errors = Vec::new();
        let mut check = |ok: bool, message: &str| {
            if !ok {
                errors.push(format!("{path}.{message}"));
            }
        };
        check(is_label(&self.name), "name must be 1-64 characters of [A-Za-z0-9_.-]");
        check(!self.consumer.is_empty(), "consumer must not be empty");
        check(is_identifier(&self.table), "table must be a plain or schema-qualified identifier");
        check(self.max_expired_leases >= 1, "max_expired_leases must be >= 1");
        for (h, handler) in self.handlers.iter().enumerate() {
            let ok = handler.event_types.iter().all(|t| !t.is_empty()) && !handler.event_types.is_empty();
            check(ok, &format!("handler[{h}].event_types must list at least one non-empty type"));
            let one = handler.sql.is_empty() != handler.http.is_none();
            check(one, &format!("handler[{h}]: set exactly one of sql, http"));
        }
        errors.extend(self.claim_loop.problems(path));
        for (h, handler) in self.handlers.iter().enumerate() {
            if let Some(http) = &handler.http {
                errors.extend(http.problems(&format!("{path}.handler[{h}].http")));
            }
        }
        errors
    }
}

/// `[worker.retention]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InboxRetention {
    /// PROCESSED / IGNORED rows older than this (by `processed_at` / `received_at`) are deleted.
    #[serde(with = "humantime_serde")]
    pub processed_after: Duration,
    /// Rows per delete statement. Default: 1000.
    #[serde(default = "defaults::purge_batch")]
    pub batch: u32,
    /// Pause between purge passes. Default: "1m".
    #[serde(default = "defaults::purge_interval", with = "humantime_serde")]
    pub interval: Duration,
}

/// `[worker.handler_errors]`: what an error of a handler statement means, by the server's
/// code: a Postgres SQLSTATE (`"23503"`, or a class by its first two characters, `"22"`) or a
/// MySQL / MariaDB error number (`"1452"`). `retry` is looked at first, then `dead`; an error in
/// neither is judged by the dialect (a data or constraint error: DEAD; anything else — the
/// server unreachable, a missing table or privilege — an outage: the rows go back untouched).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HandlerErrors {
    /// Errors retried after `backoff`, counting an attempt: SQLSTATEs (`"22"`: a class) or MySQL
    /// codes. Default: ["23503", "40001", "40P01", "55P03", "1452", "1213", "1205"].
    ///
    /// These are failures about other rows or transactions, which pass when they settle: a foreign
    /// key whose parent row has not arrived yet, a serialization failure, a deadlock, a lock not
    /// available.
    pub retry: Vec<String>,
    /// DEAD at once: the row's data can never be applied. Default: ["22", "23", "44", "P0",
    /// "1048", "1062", "1153", "1264", "1265", "1292", "1366", "1406", "1451", "3140", "4025"].
    pub dead: Vec<String>,
}

impl Default for HandlerErrors {
    fn default() -> Self {
        let list = |codes: &[&str]| codes.iter().map(|c| (*c).to_owned()).collect();
        Self {
            retry: list(&["23503", "40001", "40P01", "55P03", "1452", "1213", "1205"]),
            dead: list(&[
                "22", "23", "44", "P0", "1048", "1062", "1153", "1264", "1265", "1292", "1366", "1406", "1451", "3140",
                "4025",
            ]),
        }
    }
}

/// What [`HandlerErrors`] says of an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandlerVerdict {
    Retry,
    Dead,
}

impl HandlerErrors {
    /// The verdict for a server error `code`, if either list names it.
    pub(crate) fn verdict(&self, code: &str) -> Option<HandlerVerdict> {
        let names = |list: &[String]| {
            list.iter().any(|c| c == code || (c.len() == 2 && code.len() == 5 && code.starts_with(c.as_str())))
        };
        if names(&self.retry) {
            Some(HandlerVerdict::Retry)
        } else if names(&self.dead) {
            Some(HandlerVerdict::Dead)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unhandled {
    #[default]
    Dead,
    Skip,
}

/// `[[worker.handler]]`: SQL statements run in the transaction that marks the row PROCESSED,
/// or an HTTP POST made before it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerConfig {
    /// The `handler` label of the worker's metrics. Default: the `event_types` patterns joined
    /// with commas (metrics are never labelled by event type: producers choose those).
    pub name: Option<String>,
    /// Event types this handler serves; `"*"` serves all, `"order.*"` a prefix.
    pub event_types: Vec<String>,
    /// Statements run per event (`:event_id`, `:event_type`, `:owner`, `:aggregate_type`,
    /// `:aggregate_id`, `:payload`, `:headers`, `:payload.<field>…`, `:fields.<name>`) or per batch
    /// (`:event_ids`, Postgres).
    ///
    /// A missing payload field sends the row to DEAD. `:fields.<name>` is a field the entry carried
    /// beyond the mapped ones.
    #[serde(default)]
    pub sql: Vec<String>,
    /// POST the event to a URL instead.
    pub http: Option<HttpHandlerConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpHandlerConfig {
    /// `http://…` or `https://…` (verified with `tls`); this or `url_file`. Shown redacted
    /// everywhere.
    ///
    /// It may carry credentials: `user:pass@` is sent as Basic authentication. Logs, errors and
    /// `check` show `https://***@host:port/***?***`.
    pub url: Option<crate::secret::Secret>,
    /// A file holding the URL instead (a mounted secret).
    pub url_file: Option<std::path::PathBuf>,
    /// Per-request timeout; no answer within it is an outage of the endpoint (the row goes back
    /// untouched). Default: "10s".
    #[serde(default = "defaults::http_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Statuses that mean the event can never succeed: the row goes DEAD at once.
    /// Default: [400, 404, 409, 410, 415, 422].
    #[serde(default = "defaults::dead_statuses")]
    pub dead_on: Vec<u16>,
    /// Extra request headers (constants). Default: none.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Event headers sent as HTTP headers, by name. Default: ["traceparent", "tracestate",
    /// "baggage"].
    ///
    /// Case-insensitive; hop-by-hop, credential and framing headers are never forwarded, and a name
    /// is sent at most once.
    #[serde(default = "defaults::forward_headers")]
    pub forward_headers: Vec<String>,
    /// TLS for an `https://` URL. Default: `verify-full` against the system roots.
    #[serde(default)]
    pub tls: crate::tls::config::TlsConfig,
    /// POSTs in flight per worker loop, started in batch order (1: one after the other). Default:
    /// 8.
    #[serde(default = "defaults::http_concurrency")]
    pub concurrency: u32,
}

impl HttpHandlerConfig {
    /// The URL itself (set once the configuration is loaded), for the one place that connects.
    pub(crate) fn url(&self) -> &str {
        self.url.as_ref().map_or("", |u| u.expose())
    }

    /// The URL as logs, errors and `check` show it.
    pub(crate) fn shown_url(&self) -> String {
        crate::secret::redacted_url(self.url())
    }

    /// Every problem of this handler's HTTP settings, each naming its key under `path`: TLS
    /// that agrees with the URL, no event header that would steer the call, no constant that
    /// would frame it.
    pub(crate) fn problems(&self, path: &str) -> Vec<String> {
        let mut errors = self.tls_problems(path);
        for name in &self.forward_headers {
            if never_forwarded(&name.to_ascii_lowercase()) {
                errors.push(format!("{path}.forward_headers: `{name}` is never taken from an event (it frames, routes or authenticates the call)"));
            }
        }
        for name in self.headers.keys() {
            if reserved_request_header(&name.to_ascii_lowercase()) {
                errors.push(format!("{path}.headers.{name}: handoff sets this header itself"));
            }
        }
        if !(1..=256).contains(&self.concurrency) {
            errors.push(format!("{path}.concurrency must be between 1 and 256"));
        }
        errors
    }

    fn tls_problems(&self, path: &str) -> Vec<String> {
        let https = self.url().trim_start().to_ascii_lowercase().starts_with("https://");
        if !https {
            return if self.tls.is_set() {
                vec![format!("{path}.tls is set but {path}.url is not https://")]
            } else {
                vec![]
            };
        }
        let mode = self.tls.mode_or(TlsMode::VerifyFull);
        let mut errors = crate::tls::config::check_shape(&format!("{path}.tls"), &self.tls, mode);
        if matches!(mode, TlsMode::Disable | TlsMode::Prefer) {
            errors.push(format!(
                "{path}.tls.mode: {} makes no sense with https://; use http:// for plain TCP",
                mode.name()
            ));
        }
        errors
    }
}

/// Headers that frame the request or that handoff writes itself: a handler's constant `headers`
/// may not set them (lower case, as every check compares).
const RESERVED: &[&str] = &[
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "content-type",
    "idempotency-key",
    "x-event-type",
];

/// Beyond those, headers an event may never set: proxy and routing headers, credentials,
/// encodings handoff does not apply.
const NEVER_FROM_EVENTS: &[&str] = &[
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "content-encoding",
    "expect",
    "authorization",
    "cookie",
    "set-cookie",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
];

/// Whether a handler's constant `headers` may not set `name` (lower case).
fn reserved_request_header(name: &str) -> bool {
    RESERVED.contains(&name)
}

/// Whether an event may never set `name` (lower case), whatever `forward_headers` says.
pub(crate) fn never_forwarded(name: &str) -> bool {
    RESERVED.contains(&name) || NEVER_FROM_EVENTS.contains(&name)
}

/// `[worker.sql]`: statement overrides for an inbox of your own; absent ones use the reference
/// schema's. What each is offered and must return: `worker/inbox/contract.rs`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerOverrides {
    pub claim: Option<String>,
    pub processed: Option<String>,
    pub retry: Option<String>,
    pub dead: Option<String>,
    pub renew: Option<String>,
    pub release: Option<String>,
    pub stats: Option<String>,
    pub purge: Option<String>,
}

impl WorkerOverrides {
    pub(crate) fn get(&self, statement: WorkerStatement) -> Option<&str> {
        match statement {
            WorkerStatement::Claim => self.claim.as_deref(),
            WorkerStatement::Processed => self.processed.as_deref(),
            WorkerStatement::Retry => self.retry.as_deref(),
            WorkerStatement::Dead => self.dead.as_deref(),
            WorkerStatement::Renew => self.renew.as_deref(),
            WorkerStatement::Release => self.release.as_deref(),
            WorkerStatement::Stats => self.stats.as_deref(),
            WorkerStatement::Purge => self.purge.as_deref(),
        }
    }
}

mod defaults {
    use std::time::Duration;

    pub(super) fn table() -> String {
        "consumer_inbox".into()
    }
    pub(super) fn max_expired_leases() -> u32 {
        3
    }
    pub(super) fn error_max_len() -> usize {
        2000
    }
    pub(super) fn http_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub(super) fn purge_batch() -> u32 {
        1000
    }
    pub(super) fn purge_interval() -> Duration {
        Duration::from_secs(60)
    }
    pub(super) fn http_concurrency() -> u32 {
        8
    }

    pub(super) fn forward_headers() -> Vec<String> {
        ["traceparent", "tracestate", "baggage"].map(String::from).to_vec()
    }
    pub(super) fn dead_statuses() -> Vec<u16> {
        vec![400, 404, 409, 410, 415, 422]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_is_looked_at_before_dead_and_a_class_matches_its_sqlstates() {
        let errors = HandlerErrors::default();
        assert_eq!(errors.verdict("23503"), Some(HandlerVerdict::Retry), "a foreign key waits for its parent");
        assert_eq!(errors.verdict("23505"), Some(HandlerVerdict::Dead), "class 23 otherwise");
        assert_eq!(errors.verdict("40P01"), Some(HandlerVerdict::Retry));
        assert_eq!(errors.verdict("22P02"), Some(HandlerVerdict::Dead));
        assert_eq!(errors.verdict("1452"), Some(HandlerVerdict::Retry));
        assert_eq!(errors.verdict("1406"), Some(HandlerVerdict::Dead));
        assert_eq!(errors.verdict("42P01"), None, "a missing table is the dialect's to judge: an outage");
        assert_eq!(errors.verdict("2200"), None, "a class matches five-character SQLSTATEs only");
    }
}
