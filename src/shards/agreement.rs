//! The shard count of a relay's sharded streams: agreed with what its database recorded (at
//! relay start and by `check`), and changed on purpose by `handoff reshard`.

use super::{mysql, postgres};
use crate::config::Config;
use crate::relay::config::RelayConfig;
use crate::relay::outbox::{Outbox, OutboxStore};
use crate::store::database::Database;
use crate::store::error::{OutageKind, StoreError, StoreResult};
use crate::template::Template;

/// A family's recorded count, and who recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Recorded {
    shard_count: u32,
    recorded_by: String,
}

/// Records `count` for `family` unless one is recorded already; returns what is recorded now.
async fn record_count(db: &Database, family: &str, count: u32, by: &str) -> StoreResult<Recorded> {
    let (shard_count, recorded_by) = match db {
        Database::Postgres(pool) => postgres::record(pool, family, count, by).await?,
        Database::Mysql(pool) => mysql::record(pool, family, count, by).await?,
    };
    Ok(Recorded { shard_count, recorded_by })
}

/// What is recorded for `family`, if anything (nothing is written).
async fn recorded_count(db: &Database, family: &str) -> StoreResult<Option<Recorded>> {
    let found = match db {
        Database::Postgres(pool) => postgres::recorded(pool, family).await?,
        Database::Mysql(pool) => mysql::recorded(pool, family).await?,
    };
    Ok(found.map(|(shard_count, recorded_by)| Recorded { shard_count, recorded_by }))
}

/// Replaces the recorded count of `family` (after its old shards were drained).
async fn replace_count(db: &Database, family: &str, count: u32, by: &str) -> StoreResult<()> {
    match db {
        Database::Postgres(pool) => postgres::replace(pool, family, count, by).await,
        Database::Mysql(pool) => mysql::replace(pool, family, count, by).await,
    }
}

/// How a relay's configured shard count stands against the recorded one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Agreement {
    /// The stream template has no `{shard(column, N)}`.
    NotSharded,
    /// The recorded count is the configured one (or, for `check`, none is recorded yet).
    Agrees { family: String, count: u32 },
    /// `handoff_stream_shards` is missing or not granted: nothing guards a change of count.
    Unguarded(String),
    /// The family was written with another count: starting would break per-key order.
    Differs(String),
}

/// The family and shard count of `relay`'s stream template, if it is sharded.
pub(super) fn sharding(relay: &RelayConfig) -> Option<(String, u32)> {
    let template = Template::parse(&relay.stream).ok()?;
    Some((template.family(), template.shard_count()?))
}

/// Compares `relay`'s shard count with the recorded one; `record` writes it when none is
/// recorded yet (the relay at start; `check` only reads). A connection failure is returned for
/// the caller to wait out.
pub(crate) async fn agree(db: &Database, relay: &RelayConfig, record: bool) -> Result<Agreement, StoreError> {
    let Some((family, count)) = sharding(relay) else { return Ok(Agreement::NotSharded) };
    let found = if record {
        record_count(db, &family, count, &relay.name).await.map(Some)
    } else {
        recorded_count(db, &family).await
    };
    match found {
        Ok(None) => Ok(Agreement::Agrees { family, count }),
        Ok(Some(recorded)) if recorded.shard_count == count => Ok(Agreement::Agrees { family, count }),
        Ok(Some(recorded)) => Ok(Agreement::Differs(differs(relay, &family, count, &recorded))),
        Err(e) if matches!(e.outage_kind(), Some(OutageKind::Schema | OutageKind::Permission)) => {
            Ok(Agreement::Unguarded(format!(
                "relay `{}`: handoff_stream_shards cannot be used ({}); a change of the shard count of `{family}` \
                 would go unnoticed — run `handoff migrate` or grant the relay's user SELECT, INSERT on it",
                relay.name,
                crate::error::error_chain(&e)
            )))
        }
        Err(e) => Err(e),
    }
}

fn differs(relay: &RelayConfig, family: &str, count: u32, recorded: &Recorded) -> String {
    format!(
        "relay `{name}`: the stream family `{family}` was written with {old} shards (recorded by relay `{by}`), \
         this config says {count}. A new count sends a key to another shard while the old one may still hold \
         its earlier events, so consumers would see them out of order. Either write to a new family (change the \
         template's fixed text, e.g. a `:v2` suffix, and let the bridges read both until the old one is drained), \
         or drain: stop the relays, wait until every bridge's lag on the old shards is 0, then run \
         `handoff reshard --relay {name}`",
        name = relay.name,
        old = recorded.shard_count,
        by = recorded.recorded_by,
    )
}

/// What `handoff reshard` did.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Resharded {
    pub family: String,
    pub from: Option<u32>,
    pub to: u32,
}

/// Records `relay`'s configured shard count as its family's count, once the outbox holds no
/// undelivered row (handoff cannot see the consumers' side: the operator drains it first).
pub(crate) async fn reshard(config: &Config, db: &Database, name: &str) -> anyhow::Result<Resharded> {
    let relay = config.relays.iter().find(|r| r.name == name).ok_or_else(|| anyhow::anyhow!("no relay `{name}`"))?;
    let (family, count) = sharding(relay)
        .ok_or_else(|| anyhow::anyhow!("relay `{name}`: its stream template has no {{shard(column, N)}}"))?;
    let outbox = Outbox::prepare(db, relay).await.map_err(|e| anyhow::anyhow!("relay `{name}`: {e}"))?;
    if let Some(stats) = outbox.stats().await? {
        let undelivered = stats.pending + stats.in_flight;
        anyhow::ensure!(
            undelivered == 0,
            "relay `{name}`: {undelivered} rows are not delivered yet; stop the relay's writers or wait, \
             and let the bridges drain the old shards, before the count changes"
        );
    }
    let from = recorded_count(db, &family).await?.map(|r| r.shard_count);
    replace_count(db, &family, count, name).await?;
    Ok(Resharded { family, from, to: count })
}
