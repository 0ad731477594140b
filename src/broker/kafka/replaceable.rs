//! A producer that a new one takes over from when it can no longer be trusted: after a fatal
//! error (the idempotent producer's sequence state is lost: librdkafka fails every message from
//! then on) or a message that timed out. The rows are released as in an outage and produced
//! again by the new one. The relay's batch producer and the one-message producer (for a message
//! too large to share a request) are each one of these.
//!
//! A timeout counts because librdkafka can stay wedged when the cluster is back: after a topic
//! is deleted and made again, its partitions' leader epochs start again at 0, and librdkafka
//! ignores metadata older than the epoch it cached, so it keeps sending to the old topic's
//! leaders. A new producer reads the metadata afresh. In a real outage this makes a new producer
//! once per `delivery_timeout`, which costs a connection.

use std::sync::{Arc, PoisonError, RwLock};

use rdkafka::error::KafkaError;
use rdkafka::producer::ThreadedProducer;

use super::client::{self, KafkaSetupError, Logged};
use super::config::KafkaConfig;

/// A producer the relay's batches share; its context gathers delivery reports.
pub(super) type Producer = Arc<ThreadedProducer<Logged>>;

pub(super) struct Replaceable {
    /// One message per request (`linger.ms = 0`, one message a batch).
    alone: bool,
    /// The producer in use and how many were made before it; `None` until first used.
    slot: RwLock<Option<(u64, Producer)>>,
}

impl Replaceable {
    /// `first`: the producer to start with (made at once, so a bad configuration shows at
    /// start); without it one is made on first use.
    pub(super) fn new(alone: bool, first: Option<Producer>) -> Self {
        Self { alone, slot: RwLock::new(first.map(|producer| (0, producer))) }
    }

    /// The producer in use, with its generation.
    pub(super) fn get(&self, config: &KafkaConfig) -> Result<(u64, Producer), KafkaSetupError> {
        if let Some((generation, producer)) = &*self.slot.read().unwrap_or_else(PoisonError::into_inner) {
            return Ok((*generation, producer.clone()));
        }
        let mut slot = self.slot.write().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some((0, make(config, self.alone)?));
        }
        let (generation, producer) = slot.as_ref().expect("made above");
        Ok((*generation, producer.clone()))
    }

    /// Whether the producer of `generation` was replaced (its last copy is to be dropped off the
    /// async threads: closing joins its threads and flushes).
    pub(super) fn retired(&self, generation: u64) -> bool {
        self.slot.read().unwrap_or_else(PoisonError::into_inner).as_ref().is_some_and(|(g, _)| *g != generation)
    }

    /// After `error` from the producer of `generation`: a new one takes over if `error` says it
    /// cannot be trusted. Only the producer of `generation` is replaced, once.
    pub(super) fn after(&self, config: &KafkaConfig, generation: u64, error: &KafkaError) {
        use rdkafka::types::RDKafkaErrorCode::{Fatal, MessageTimedOut};
        if !matches!(error.rdkafka_error_code(), Some(Fatal | MessageTimedOut)) {
            return;
        }
        let mut slot = self.slot.write().unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_none_or(|(g, _)| *g != generation) {
            return;
        }
        match make(config, self.alone) {
            Ok(producer) => {
                tracing::warn!(error = %error, alone = self.alone, "kafka: a new producer takes over from one that failed");
                if let Some((_, old)) = slot.replace((generation + 1, producer)) {
                    tokio::task::spawn_blocking(move || drop(old));
                }
            }
            Err(e) => tracing::error!(error = %e, "kafka: a new producer could not be made"),
        }
    }
}

/// A producer for `config`; `alone`: one message per request.
pub(super) fn make(config: &KafkaConfig, alone: bool) -> Result<Producer, KafkaSetupError> {
    let mut settings = client::producer_config(config)?;
    if alone {
        settings.set("linger.ms", "0").set("batch.num.messages", "1");
    }
    settings.create_with_context(Logged).map(Arc::new).map_err(|e| KafkaSetupError::Client(e.to_string()))
}
