//! The broker: the seam the relay appends through (`seam`), the seam a bridge reads a consumer
//! group through (`group`), entries as read (`read`), the dedupe / ordered-run script
//! (`script`), and the brokers behind both seams: Redis Streams (`redis`) and NATS JetStream
//! (`nats`), and Apache Kafka (`kafka`).

pub(crate) mod group;
pub(crate) mod kafka;
pub(crate) mod nats;
pub(crate) mod read;
pub(crate) mod redis;
pub(crate) mod script;
pub(crate) mod seam;

/// Which broker a relay publishes to, or a bridge reads from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Broker {
    #[default]
    Redis,
    Nats,
    Kafka,
}

impl Broker {
    /// Its name in configuration and metric labels.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Broker::Redis => "redis",
            Broker::Nats => "nats",
            Broker::Kafka => "kafka",
        }
    }
}

pub(crate) use seam::{Dedupe, Durability, EntryId, ServerId, StreamState, Trim, Unavailable};

pub(crate) use seam::{AppendOptions, AppendOutcome, Entry, EventStream};
