//! The keys a relay and a worker share: how their claim loops run. One struct, flattened into
//! `[[relay]]` and `[[worker]]` — its keys are written in the component's table, and its
//! defaults are the component's (`D`).
//!
//! The loader moves these keys into a table of their own (`claim_loop`) before it deserializes,
//! and names them without it in errors (see [`nest`]), so an error in one of them still names
//! its key (serde's flatten would lose it).

use std::marker::PhantomData;
use std::time::Duration;

use serde::Deserialize;

use crate::runtime::backoff::BackoffConfig;

/// How a relay's or a worker's claim loop runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, bound = "", default)]
pub struct ClaimLoopConfig<D: LoopDefaults> {
    /// Rows per claim; a claim that comes back full is followed by another at once. Default:
    /// 500 for a relay, 50 for a worker.
    pub batch_size: u32,
    /// Claim loops: batches in flight at once. Default: 2 for a relay, 1 for a worker.
    ///
    /// With 2, a relay appends one batch while the next is claimed and settled.
    pub concurrency: u32,
    /// Sleep after a claim that was not full. Default: "250ms".
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// How long a claim is owned before another claimant may take it over; renewed every third of
    /// it. Default: "30s".
    ///
    /// With claim = "locked" it is the batch's idle-in-transaction timeout.
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// Failures attributable to the row (an append the broker refused, a handler error) before
    /// it turns DEAD. Default: 10 for a relay, 5 for a worker.
    pub max_attempts: u32,
    /// Delay before retrying a row that failed. Default: `{ initial = "1s", max = "10m",
    /// multiplier = 2.0, jitter = 0.2 }`.
    pub backoff: BackoffConfig,
    /// Delay before claiming again after the database (or the broker) was unreachable.
    /// Default: `{ initial = "200ms", max = "30s", multiplier = 2.0, jitter = 0.2 }`.
    pub outage_backoff: BackoffConfig,
    /// `locked`: one transaction locks, works and settles the batch (Postgres, reference
    /// statements). `leased`: rows are marked in flight under a lease. Default: "auto" (`locked`
    /// wherever allowed, else `leased`).
    ///
    /// `locked` writes each row once; `leased` writes it at the claim and again at the settle.
    pub claim: ClaimMode,
    /// With claim = "auto": why loading chose what it chose (said at start and by `check`).
    #[serde(skip)]
    pub claim_chosen: Option<String>,
    #[serde(skip)]
    defaults: PhantomData<D>,
}

impl<D: LoopDefaults> ClaimLoopConfig<D> {
    /// The claim shape the loop runs and why: chosen by `auto` (with the reason) or configured.
    pub(crate) fn claim_choice(&self) -> (&'static str, &str) {
        (self.claim.name(), self.claim_chosen.as_deref().unwrap_or("configured"))
    }

    /// Every problem of these keys, each named under `path` (the relay's or worker's section,
    /// where they are written).
    pub(crate) fn problems(&self, path: &str) -> Vec<String> {
        let mut errors = Vec::new();
        let mut check = |ok: bool, message: &str| {
            if !ok {
                errors.push(format!("{path}.{message}"));
            }
        };
        check((1..=10_000).contains(&self.batch_size), "batch_size must be between 1 and 10000");
        check((1..=64).contains(&self.concurrency), "concurrency must be between 1 and 64");
        check(!self.poll_interval.is_zero(), "poll_interval must be > 0");
        check(self.lease >= Duration::from_millis(100), "lease must be at least 100ms");
        check(self.max_attempts >= 1, "max_attempts must be >= 1");
        errors.extend(self.backoff.problems(&format!("{path}.backoff")));
        errors.extend(self.outage_backoff.problems(&format!("{path}.outage_backoff")));
        errors
    }
}

impl<D: LoopDefaults> Default for ClaimLoopConfig<D> {
    fn default() -> Self {
        Self {
            batch_size: D::BATCH_SIZE,
            concurrency: D::CONCURRENCY,
            poll_interval: Duration::from_millis(250),
            lease: Duration::from_secs(30),
            max_attempts: D::MAX_ATTEMPTS,
            backoff: BackoffConfig::row_default(),
            outage_backoff: BackoffConfig::outage_default(),
            claim: ClaimMode::default(),
            claim_chosen: None,
            defaults: PhantomData,
        }
    }
}

/// How a claim holds its rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimMode {
    /// Resolved when the configuration is loaded: `Locked` where every condition for it holds
    /// (Postgres, reference statements, no ordering, a lease longer than an append, a spare
    /// pooled connection), `Leased` elsewhere. Anything that sees it unresolved treats it as
    /// `Leased`.
    #[default]
    Auto,
    Leased,
    Locked,
}

impl ClaimMode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ClaimMode::Auto => "auto",
            ClaimMode::Leased => "leased",
            ClaimMode::Locked => "locked",
        }
    }
}

/// The defaults that differ between a relay's loop and a worker's.
pub trait LoopDefaults {
    const BATCH_SIZE: u32;
    const CONCURRENCY: u32;
    const MAX_ATTEMPTS: u32;
}

#[derive(Debug, Clone)]
pub struct RelayLoop;

impl LoopDefaults for RelayLoop {
    const BATCH_SIZE: u32 = 500;
    const CONCURRENCY: u32 = 2;
    const MAX_ATTEMPTS: u32 = 10;
}

#[derive(Debug, Clone)]
pub struct WorkerLoop;

impl LoopDefaults for WorkerLoop {
    const BATCH_SIZE: u32 = 50;
    const CONCURRENCY: u32 = 1;
    const MAX_ATTEMPTS: u32 = 5;
}

/// The table the loader gathers the keys into (never written by hand: errors name the keys
/// without it).
pub(crate) const TABLE: &str = "claim_loop";

/// The keys of [`ClaimLoopConfig`], as written in `[[relay]]` and `[[worker]]`.
pub(crate) const KEYS: &[&str] =
    &["batch_size", "concurrency", "poll_interval", "lease", "max_attempts", "backoff", "outage_backoff", "claim"];

/// Moves every claim-loop key of each `[[relay]]` and `[[worker]]` entry into its [`TABLE`].
pub(crate) fn nest(config: &mut figment::value::Value) {
    use figment::value::{Tag, Value};
    let Value::Dict(_, root) = config else { return };
    for section in ["relay", "worker"] {
        let Some(Value::Array(_, entries)) = root.get_mut(section) else { continue };
        for entry in entries {
            let Value::Dict(_, table) = entry else { continue };
            let moved: Vec<(String, Value)> =
                KEYS.iter().filter_map(|key| table.remove(*key).map(|value| ((*key).to_owned(), value))).collect();
            if !moved.is_empty() {
                table.insert(TABLE.to_owned(), Value::Dict(Tag::Default, moved.into_iter().collect()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_components() {
        let relay = ClaimLoopConfig::<RelayLoop>::default();
        let worker = ClaimLoopConfig::<WorkerLoop>::default();
        assert_eq!((relay.batch_size, relay.concurrency, relay.max_attempts), (500, 2, 10));
        assert_eq!((worker.batch_size, worker.concurrency, worker.max_attempts), (50, 1, 5));
        assert_eq!((relay.lease, worker.poll_interval), (Duration::from_secs(30), Duration::from_millis(250)));
    }

    #[test]
    fn every_out_of_range_key_is_named_under_its_section_and_the_defaults_have_none() {
        assert_eq!(ClaimLoopConfig::<RelayLoop>::default().problems("relay[0]"), Vec::<String>::new());
        assert_eq!(ClaimLoopConfig::<WorkerLoop>::default().problems("worker[0]"), Vec::<String>::new());
        let mut bad = ClaimLoopConfig::<WorkerLoop> {
            batch_size: 0,
            concurrency: 65,
            poll_interval: Duration::ZERO,
            lease: Duration::from_millis(99),
            max_attempts: 0,
            ..Default::default()
        };
        bad.backoff.multiplier = 0.5;
        bad.outage_backoff.initial = Duration::ZERO;
        assert_eq!(
            bad.problems("worker[1]"),
            [
                "worker[1].batch_size must be between 1 and 10000",
                "worker[1].concurrency must be between 1 and 64",
                "worker[1].poll_interval must be > 0",
                "worker[1].lease must be at least 100ms",
                "worker[1].max_attempts must be >= 1",
                "worker[1].backoff.multiplier must be between 1 and 10",
                "worker[1].outage_backoff.initial must be > 0",
            ]
        );
    }
}
