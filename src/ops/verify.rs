//! `handoff verify`: looks up the entries of a window of delivered rows in their streams, as the
//! relay does by itself after signs of broker data loss, and reports per stream what is there,
//! what was trimmed (older than the stream's first entry: not a loss) and what is missing;
//! `--repair` moves the rows of missing entries back to PENDING so the relay appends them again.
//! Each relay is checked on its own broker: Redis Streams or NATS JetStream.

use std::time::Duration;

use serde::Serialize;

use crate::broker::Broker;
use crate::broker::EventStream;
use crate::broker::kafka::KafkaStream;
use crate::broker::nats::NatsStream;
use crate::broker::redis::RedisStream;
use crate::config::Config;
use crate::relay::config::RelayConfig;
use crate::relay::loss::{self, StreamReport};
use crate::relay::outbox::Outbox;
use crate::store::Database;

/// Why `handoff verify` could not check.
#[derive(Debug, thiserror::Error)]
pub(crate) enum VerifyError {
    #[error("no relay in the config matches")]
    NoMatch,
    #[error(transparent)]
    Database(#[from] crate::store::error::ConnectError),
    #[error(transparent)]
    Redis(#[from] crate::broker::redis::ConnectError),
    #[error("nats: {0}")]
    Nats(String),
    #[error("{0}")]
    Kafka(String),
    #[error(transparent)]
    Statements(#[from] crate::store::PrepareError),
    #[error(transparent)]
    Check(#[from] loss::LossCheckError),
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct RelayReport {
    pub relay: String,
    pub streams: Vec<StreamReport>,
    /// Why nothing could be checked, if so.
    pub note: Option<String>,
}

pub(crate) async fn run(
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
    // Every broker the relays use, before any row is looked at: one that fails part-way would
    // end the command with repairs already made and not reported.
    let uses = |broker| relays.iter().any(|r| r.broker == broker);
    let redis = if uses(Broker::Redis) { Some(RedisStream::connect(&config.redis).await?.0) } else { None };
    let nats = if uses(Broker::Nats) { Some(connect_nats(config).await?) } else { None };
    let kafka = if uses(Broker::Kafka) { Some(connect_kafka(config).await?) } else { None };
    let mut reports = Vec::new();
    for relay in relays {
        let store = Outbox::prepare(&db, relay).await?;
        let page = relay.broker_loss.page_rows;
        let found = match (relay.broker, &redis, &nats) {
            (Broker::Redis, Some(stream), _) => loss::verify(&store, stream, since, repair, page).await?,
            (Broker::Nats, _, Some(stream)) => loss::verify(&store, stream, since, repair, page).await?,
            (Broker::Kafka, _, _) if kafka.is_some() => {
                loss::verify(&store, kafka.as_ref().expect("checked"), since, repair, page).await?
            }
            _ => unreachable!("connected above to every broker a relay uses"),
        };
        let note = found.is_none().then(|| {
            "delivered rows are not kept (settle = \"delete\", or no sql.delivered_since for this table)".to_owned()
        });
        reports.push(RelayReport { relay: relay.name.clone(), streams: found.unwrap_or_default(), note });
    }
    Ok(reports)
}

/// A client of `[kafka]`, once the cluster answers (as for NATS: verify says it could not look
/// rather than report what it did not see).
async fn connect_kafka(config: &Config) -> Result<KafkaStream, VerifyError> {
    let kafka = config.kafka.as_ref().ok_or_else(|| VerifyError::Kafka("kafka: no [kafka] section".into()))?;
    let stream = KafkaStream::connect(kafka, "payload").map_err(|e| VerifyError::Kafka(e.to_string()))?;
    stream.ping().await.map_err(|e| VerifyError::Kafka(e.0))?;
    Ok(stream)
}

/// The JetStream stream of `[nats]`, once it answers: a server that does not would make every
/// look-up fail, and verify says so rather than report what it could not see.
async fn connect_nats(config: &Config) -> Result<NatsStream, VerifyError> {
    let nats = config.nats.as_ref().ok_or_else(|| VerifyError::Nats("no [nats] section".into()))?;
    let stream = NatsStream::connect(nats, "payload").await.map_err(|e| VerifyError::Nats(e.to_string()))?;
    if !stream.connected().await {
        return Err(VerifyError::Nats(format!("{} does not answer within {:?}", nats.url, nats.timeout)));
    }
    Ok(stream)
}
