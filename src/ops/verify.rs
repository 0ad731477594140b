//! `handoff verify`: looks up the entries of a window of delivered rows in their streams, as the
//! relay does by itself after signs of broker data loss, and reports per stream what is there,
//! what was trimmed (older than the stream's first entry: not a loss) and what is missing;
//! `--repair` moves the rows of missing entries back to PENDING so the relay appends them again.

use std::time::Duration;

use serde::Serialize;

use crate::config::{Config, RelayConfig};
use crate::relay::loss::{self, StreamReport};
use crate::store::Database;
use crate::store::outbox::Outbox;
use crate::stream::redis::RedisStream;

/// Why `handoff verify` could not check.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("no relay in the config matches")]
    NoMatch,
    #[error(transparent)]
    Database(#[from] crate::store::error::ConnectError),
    #[error(transparent)]
    Redis(#[from] crate::stream::redis::ConnectError),
    #[error(transparent)]
    Statements(#[from] crate::store::PrepareError),
    #[error(transparent)]
    Check(#[from] loss::LossCheckError),
}

#[derive(Debug, Clone, Serialize)]
pub struct RelayReport {
    pub relay: String,
    pub streams: Vec<StreamReport>,
    /// Why nothing could be checked, if so.
    pub note: Option<String>,
}

pub async fn run(
    config: &Config,
    relay: Option<&str>,
    since: Duration,
    repair: bool,
) -> Result<Vec<RelayReport>, VerifyError> {
    let relays: Vec<&RelayConfig> = config.relays.iter().filter(|r| relay.is_none_or(|n| n == r.name)).collect();
    if relays.is_empty() {
        return Err(VerifyError::NoMatch);
    }
    let db = Database::connect(&config.database, "handoff-verify")?;
    let (stream, _) = RedisStream::connect(&config.redis).await?;
    let mut reports = Vec::new();
    for relay in relays {
        let store = Outbox::prepare(&db, relay).await?;
        let found = loss::verify(&store, &stream, since, repair, relay.broker_loss.page_rows).await?;
        let note = found.is_none().then(|| {
            "delivered rows are not kept (settle = \"delete\", or no sql.delivered_since for this table)".to_owned()
        });
        reports.push(RelayReport { relay: relay.name.clone(), streams: found.unwrap_or_default(), note });
    }
    Ok(reports)
}
