//! Where the locked claim can keep its promises, in one place, for relays and workers:
//! `validate` refuses an explicit `claim = "locked"` where it cannot, and `resolve` turns
//! `claim = "auto"` (the default) into the locked claim wherever it can and the leased claim
//! elsewhere, with the reason.

use std::time::Duration;

use crate::broker::redis::config::RedisConfig;
use crate::config::file::Config;
use crate::relay::config::RelayConfig;
use crate::relay::outbox::contract::StatementKind;
use crate::runtime::loop_config::ClaimMode;
use crate::store::config::Dialect;
use crate::worker::config::WorkerConfig;
use crate::worker::inbox::contract::WorkerStatement;

/// One reason the locked claim cannot be used.
#[derive(Clone)]
pub(super) enum Blocker {
    Mysql,
    Ordering,
    /// The settle statements replaced, by name (`mark_delivered, sql.retry`).
    Statements(String),
    /// A locked batch's lease is its idle-in-transaction timeout; an append may take `append`.
    Lease {
        lease: Duration,
        append: Duration,
        gated: bool,
    },
    /// Each locked loop holds a pooled connection while it appends; the samplers need one more.
    Pool {
        pool: usize,
        loops: u32,
    },
}

impl Blocker {
    /// The configuration error for a relay set to `claim = "locked"` (`path`: the relay's key
    /// path; for `Pool`, the database section's).
    pub(super) fn error(&self, path: &str) -> String {
        match self {
            Blocker::Mysql => format!("{path}.claim: \"locked\" needs Postgres; MySQL/MariaDB relays use \"leased\""),
            Blocker::Ordering => {
                format!("{path}.claim: \"locked\" cannot keep ordering's per-key runs; ordered relays use \"leased\"")
            }
            Blocker::Statements(names) => format!(
                "{path}.claim: \"locked\" runs the reference schema's statements, but sql.{names} replace(s) them; use claim = \"leased\" with a custom layout"
            ),
            Blocker::Lease { lease, append, gated } => format!(
                "{path}.lease ({}) must be longer than redis.command_timeout{} ({}) with claim = \"locked\": the lease is the batch's idle-in-transaction timeout",
                humantime::format_duration(*lease),
                if *gated { " + durability.timeout" } else { "" },
                humantime::format_duration(*append)
            ),
            Blocker::Pool { pool, loops } => format!(
                "{path}.pool_size ({pool}) must be larger than the concurrency of the relays with claim = \"locked\" ({loops}): each of their loops holds a connection while it appends"
            ),
        }
    }

    /// Why `claim = "auto"` chose the leased claim.
    fn reason(&self) -> String {
        match self {
            Blocker::Mysql => "the locked claim needs Postgres".into(),
            Blocker::Ordering => "ordering keeps per-key runs with the leased claim".into(),
            Blocker::Statements(names) => format!("sql.{names} replace(s) the reference statements"),
            Blocker::Lease { lease, append, .. } => format!(
                "lease ({}) is not longer than an append may take ({}), and it would be the locked batch's idle-in-transaction timeout",
                humantime::format_duration(*lease),
                humantime::format_duration(*append)
            ),
            Blocker::Pool { pool, loops } => {
                format!("database.pool_size ({pool}) is not larger than the locked claim loops would need ({loops})")
            }
        }
    }
}

/// What keeps `relay` from the locked claim (the pool aside: all relays share it).
pub(super) fn blockers(relay: &RelayConfig, dialect: Option<Dialect>, redis: &RedisConfig) -> Vec<Blocker> {
    let mut found = Vec::new();
    if dialect == Some(Dialect::Mysql) {
        found.push(Blocker::Mysql);
    }
    if relay.ordering.is_some() {
        found.push(Blocker::Ordering);
    }
    let overridden: Vec<&str> = StatementKind::ALL
        .iter()
        .filter(|kind| kind.settles_a_claim() && relay.sql.get(**kind).is_some())
        .map(|kind| kind.name())
        .collect();
    if !overridden.is_empty() {
        found.push(Blocker::Statements(overridden.join(", sql.")));
    }
    let gate = relay.durability.as_ref().map(|d| d.timeout);
    let append = redis.command_timeout + gate.unwrap_or(Duration::ZERO);
    if relay.claim_loop.lease <= append {
        found.push(Blocker::Lease { lease: relay.claim_loop.lease, append, gated: gate.is_some() });
    }
    found
}

/// Whether the pool cannot hold `loops` locked claim loops besides the samplers' connection.
pub(super) fn pool_blocker(pool: usize, loops: u32) -> Option<Blocker> {
    (loops > 0 && loops as usize >= pool).then_some(Blocker::Pool { pool, loops })
}

/// One reason a worker cannot use the locked claim.
pub(super) enum WorkerBlocker {
    Mysql,
    /// `sql.claim` / `sql.processed` replaced: a layout of the consumer's own.
    Statements(String),
    /// An HTTP handler: its requests would hold the rows' locks and a connection.
    Http,
}

impl WorkerBlocker {
    /// The configuration error for a worker set to `claim = "locked"` (`path`: its key path).
    pub(super) fn error(&self, path: &str) -> String {
        match self {
            WorkerBlocker::Mysql => {
                format!("{path}.claim: \"locked\" needs Postgres; MySQL/MariaDB workers use \"leased\"")
            }
            WorkerBlocker::Statements(names) => format!(
                "{path}.claim: \"locked\" runs the reference schema's statements, but sql.{names} replace(s) them; use claim = \"leased\" with a custom layout"
            ),
            WorkerBlocker::Http => format!(
                "{path}.claim: \"locked\" would hold the rows' locks and a database connection while HTTP handlers wait for their endpoints; workers with an HTTP handler use \"leased\""
            ),
        }
    }

    fn reason(&self) -> String {
        match self {
            WorkerBlocker::Mysql => "the locked claim needs Postgres".into(),
            WorkerBlocker::Statements(names) => format!("sql.{names} replace(s) the reference statements"),
            WorkerBlocker::Http => "an HTTP handler would hold the locks while it waits for its endpoint".into(),
        }
    }
}

/// What keeps `worker` from the locked claim.
pub(super) fn worker_blockers(worker: &WorkerConfig, dialect: Option<Dialect>) -> Vec<WorkerBlocker> {
    let mut found = Vec::new();
    if dialect == Some(Dialect::Mysql) {
        found.push(WorkerBlocker::Mysql);
    }
    let overridden: Vec<&str> = [WorkerStatement::Claim, WorkerStatement::Processed]
        .into_iter()
        .filter(|statement| worker.sql.get(*statement).is_some())
        .map(WorkerStatement::name)
        .collect();
    if !overridden.is_empty() {
        found.push(WorkerBlocker::Statements(overridden.join(", sql.")));
    }
    if worker.handlers.iter().any(|h| h.http.is_some()) {
        found.push(WorkerBlocker::Http);
    }
    found
}

/// Replaces every `auto` claim with `locked` or `leased` and records why in `claim_chosen`.
/// Runs on a valid configuration (explicit `locked` claims already passed `blockers`).
pub(super) fn resolve(config: &mut Config) {
    let dialect = config.database.dialect();
    let found: Vec<Vec<Blocker>> = config.relays.iter().map(|relay| blockers(relay, dialect, &config.redis)).collect();
    // Either every eligible relay fits in the pool, or none goes locked (a mix decided by file
    // order would surprise more than it saves).
    let loops = config
        .relays
        .iter()
        .zip(&found)
        .filter(|(relay, found)| {
            relay.claim_loop.claim == ClaimMode::Locked
                || (relay.claim_loop.claim == ClaimMode::Auto && found.is_empty())
        })
        .map(|(relay, _)| relay.claim_loop.concurrency)
        .sum();
    let pool = pool_blocker(config.database.pool_size, loops);
    for (relay, found) in config.relays.iter_mut().zip(found) {
        if relay.claim_loop.claim != ClaimMode::Auto {
            continue;
        }
        (relay.claim_loop.claim, relay.claim_loop.claim_chosen) =
            match found.into_iter().next().or_else(|| pool.clone()) {
                None => (ClaimMode::Locked, Some("auto: every condition for the locked claim holds".into())),
                Some(blocker) => (ClaimMode::Leased, Some(format!("auto: {}", blocker.reason()))),
            };
    }
    // A worker's locked batch holds its connection no longer than a leased batch's apply does.
    for worker in config.workers.iter_mut().filter(|w| w.claim_loop.claim == ClaimMode::Auto) {
        (worker.claim_loop.claim, worker.claim_loop.claim_chosen) =
            match worker_blockers(worker, dialect).into_iter().next() {
                None => (ClaimMode::Locked, Some("auto: every condition for the locked claim holds".into())),
                Some(blocker) => (ClaimMode::Leased, Some(format!("auto: {}", blocker.reason()))),
            };
    }
}

#[cfg(test)]
mod tests {
    use crate::config::load_str;
    use crate::runtime::loop_config::ClaimMode;

    const BASE: &str = "[database]\nurl = \"postgres://u@h/db\"\n";

    fn claims(toml: &str) -> Vec<(ClaimMode, String)> {
        let config = load_str(toml).unwrap();
        config
            .relays
            .iter()
            .map(|r| (r.claim_loop.claim, r.claim_loop.claim_chosen.clone().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn the_default_is_the_locked_claim_where_it_applies() {
        let got = claims(&format!("{BASE}[[relay]]\nname = \"a\"\nstream = \"s\"\n"));
        assert_eq!(got[0].0, ClaimMode::Locked, "{got:?}");
    }

    #[test]
    fn auto_falls_back_to_leased_and_says_why() {
        let toml = format!(
            "{BASE}[[relay]]\nname = \"ordered\"\nstream = \"s\"\n[relay.ordering]\non_failure = \"hold\"\n\
             [[relay]]\nname = \"short\"\nstream = \"t\"\nlease = \"2s\"\n\
             [[relay]]\nname = \"explicit\"\nstream = \"u\"\nclaim = \"leased\"\n"
        );
        let got = claims(&toml);
        assert_eq!(got[0].0, ClaimMode::Leased);
        assert!(got[0].1.contains("ordering"), "{}", got[0].1);
        assert_eq!(got[1].0, ClaimMode::Leased);
        assert!(got[1].1.contains("lease (2s)"), "{}", got[1].1);
        assert_eq!(got[2], (ClaimMode::Leased, String::new()), "an explicit choice stays");
        let mysql = claims("[database]\nurl = \"mysql://u@h/db\"\n[[relay]]\nname = \"m\"\nstream = \"s\"\n");
        assert_eq!(mysql[0].0, ClaimMode::Leased);
        assert!(mysql[0].1.contains("Postgres"));
    }

    #[test]
    fn auto_stays_leased_for_every_relay_when_the_pool_cannot_hold_their_loops() {
        let toml = format!(
            "{BASE}pool_size = 4\n[[relay]]\nname = \"a\"\nstream = \"s\"\n[[relay]]\nname = \"b\"\nstream = \"t\"\n"
        );
        let got = claims(&toml);
        assert!(got.iter().all(|(mode, why)| *mode == ClaimMode::Leased && why.contains("pool_size (4)")), "{got:?}");
        let roomy = claims(&toml.replace("pool_size = 4", "pool_size = 5"));
        assert!(roomy.iter().all(|(mode, _)| *mode == ClaimMode::Locked), "{roomy:?}");
    }

    fn workers(toml: &str) -> Vec<(ClaimMode, String)> {
        let config = load_str(toml).unwrap();
        config
            .workers
            .iter()
            .map(|w| (w.claim_loop.claim, w.claim_loop.claim_chosen.clone().unwrap_or_default()))
            .collect()
    }

    const SQL_HANDLER: &str = "[[worker.handler]]\nevent_types = [\"*\"]\nsql = [\"SELECT 1\"]\n";

    #[test]
    fn a_worker_with_sql_handlers_takes_the_locked_claim_by_default_and_others_say_why_not() {
        let toml = format!(
            "{BASE}[[worker]]\nname = \"a\"\nconsumer = \"c\"\n{SQL_HANDLER}\
             [[worker]]\nname = \"http\"\nconsumer = \"c\"\n[[worker.handler]]\nevent_types = [\"*\"]\n\
             [worker.handler.http]\nurl = \"http://127.0.0.1:9/\"\n\
             [[worker]]\nname = \"own\"\nconsumer = \"c\"\n{SQL_HANDLER}[worker.sql]\n\
             claim = \"SELECT id, token, event_id, event_type, payload, attempts, expired_leases FROM t\"\n"
        );
        let got = workers(&toml);
        assert_eq!(got[0].0, ClaimMode::Locked, "{got:?}");
        assert_eq!(got[1].0, ClaimMode::Leased);
        assert!(got[1].1.contains("HTTP handler"), "{}", got[1].1);
        assert_eq!(got[2].0, ClaimMode::Leased);
        assert!(got[2].1.contains("sql.claim"), "{}", got[2].1);
        let mysql = workers(&format!(
            "[database]\nurl = \"mysql://u@h/db\"\n[[worker]]\nname = \"m\"\nconsumer = \"c\"\n{SQL_HANDLER}"
        ));
        assert_eq!(mysql[0].0, ClaimMode::Leased);
        assert!(mysql[0].1.contains("Postgres"), "{}", mysql[0].1);
    }

    #[test]
    fn an_explicit_locked_worker_where_it_cannot_hold_is_refused_naming_why() {
        let toml = format!(
            "[database]\nurl = \"mysql://u@h/db\"\n[[worker]]\nname = \"m\"\nconsumer = \"c\"\nclaim = \"locked\"\n{SQL_HANDLER}"
        );
        let error = format!("{:#}", load_str(&toml).unwrap_err());
        assert!(error.contains("worker[0].claim: \"locked\" needs Postgres"), "{error}");
    }
}
