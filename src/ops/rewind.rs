//! `handoff bridge rewind`: moves a bridge's consumer group back on each of its streams (XGROUP
//! SETID), so the entries after the new position are delivered again. The inbox's unique
//! `(consumer, event_id)` turns every event already taken over into a duplicate: effects stay
//! exactly once. Entries pending at the time stay pending to their consumers and are handed to
//! whoever reads them again. On NATS JetStream, see `rewind_nats`; on Kafka, `rewind_kafka`.

use serde::Serialize;

use crate::broker::redis::RedisStream;
use crate::broker::redis::group::Group;
use crate::config::{Broker, Config};
use crate::store::selection::{Moment, MomentError};

/// Where to move the group: just before an entry id, or to a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewindTo {
    /// The group's last-delivered id becomes this (`<ms>-<seq>`).
    Entry(String),
    /// Entries added from this time on are delivered again.
    Moment(Moment),
}

impl RewindTo {
    /// An entry id (`1700000000000-0`, or milliseconds alone), a duration ago (`1h`) or an RFC
    /// 3339 time.
    pub fn parse(text: &str) -> Result<Self, NotAPosition> {
        if parse_id(text).is_some() {
            return Ok(RewindTo::Entry(text.to_owned()));
        }
        Moment::parse(text).map(RewindTo::Moment).map_err(NotAPosition)
    }
}

/// `--to` is neither an entry id nor a time.
#[derive(Debug, thiserror::Error)]
#[error("{0}, nor an entry id (\"1700000000000-0\")")]
pub struct NotAPosition(MomentError);

/// `(ms, seq)` of an entry id; `ms` alone means `ms-0` (on NATS: the stream sequence).
pub(super) fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

#[derive(Debug, thiserror::Error)]
pub enum RewindError {
    #[error("no bridge named `{0}` in the config (configured: {1})")]
    Unknown(String, String),
    #[error("bridge `{0}` has no stream `{1}`")]
    NoStream(String, String),
    #[error(
        "bridge `{0}` reads from NATS JetStream, where rewinding recreates its durable consumers: pause it first \
         (handoff pause --bridge {0}), rewind, then resume it"
    )]
    NotPaused(String),
    #[error("stream {0}: the bridge's durable consumer does not exist yet (the bridge creates it when it starts)")]
    NoConsumer(String),
    #[error("database: {0}")]
    Database(String),
    #[error("nats: {0}")]
    Nats(String),
    #[error("kafka: {0}")]
    Kafka(String),
    #[error("stream {stream}: rewind only moves back: {to} is after the group's position {position}")]
    Forward { stream: String, to: String, position: String },
    #[error("stream {stream}: {error}")]
    Group { stream: String, error: crate::broker::group::GroupError },
    #[error("redis: {0}")]
    Connect(String),
}

/// One stream's move.
#[derive(Debug, Clone, Serialize)]
pub struct Moved {
    pub stream: String,
    /// The group's last-delivered id before.
    pub from: String,
    /// After (with `dry_run`: would be).
    pub to: String,
    /// Entries delivered and not acknowledged at the time (they stay pending).
    pub pending: u64,
}

/// Rewinds `bridge`'s group on each of its streams (or `stream` alone).
pub async fn rewind(
    config: &Config,
    bridge: &str,
    stream: Option<&str>,
    to: &RewindTo,
    dry_run: bool,
) -> Result<Vec<Moved>, RewindError> {
    let Some(b) = config.bridges.iter().find(|b| b.name == bridge) else {
        let names: Vec<&str> = config.bridges.iter().map(|b| b.name.as_str()).collect();
        return Err(RewindError::Unknown(
            bridge.to_owned(),
            if names.is_empty() { "none".into() } else { names.join(", ") },
        ));
    };
    let sources: Vec<_> = b.streams.iter().filter(|s| stream.is_none_or(|k| k == s.key)).collect();
    if let (Some(key), true) = (stream, sources.is_empty()) {
        return Err(RewindError::NoStream(bridge.to_owned(), key.to_owned()));
    }
    match b.broker {
        Broker::Nats => return super::rewind_nats::rewind(config, b, &sources, to, dry_run).await,
        Broker::Kafka => return super::rewind_kafka::rewind(config, b, &sources, to, dry_run).await,
        Broker::Redis => {}
    }
    let (redis, _) = RedisStream::connect(&config.redis).await.map_err(|e| RewindError::Connect(e.to_string()))?;
    let mut moved = Vec::new();
    for source in sources {
        let group = Group::new(redis.client().clone(), &source.key, b.group(), "rewind", config.redis.command_timeout);
        let failed = |error| RewindError::Group { stream: source.key.clone(), error };
        let target = match to {
            RewindTo::Entry(id) => id.clone(),
            RewindTo::Moment(Moment::UnixMillis(ms)) => format!("{}-0", ms.max(&0)),
            RewindTo::Moment(Moment::Ago(ago)) => {
                let now = group.server_millis().await.map_err(failed)?;
                format!("{}-0", (now - i64::try_from(ago.as_millis()).unwrap_or(i64::MAX)).max(0))
            }
        };
        let position = group.position().await.map_err(failed)?;
        if parse_id(&target) > parse_id(&position) {
            return Err(RewindError::Forward { stream: source.key.clone(), to: target, position });
        }
        let pending = group.info().await.map_err(failed)?.pending;
        if !dry_run {
            group.set_position(&target).await.map_err(failed)?;
        }
        moved.push(Moved { stream: source.key.clone(), from: position, to: target, pending });
    }
    Ok(moved)
}
