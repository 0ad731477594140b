//! `handoff bridge rewind`: moves a bridge's consumer group back on each of its streams (XGROUP
//! SETID on Redis), so the entries after the new position are delivered again. The inbox's unique
//! `(consumer, event_id)` turns every event already taken over into a duplicate: effects stay
//! exactly once. Entries pending at the time stay pending to their consumers and are handed to
//! whoever reads them again. On NATS JetStream, see `nats.rs`; on Kafka, `kafka.rs`.

use super::position::{Moved, RewindError, RewindTo};
use crate::broker::Broker;
use crate::broker::EntryId;
use crate::broker::redis::RedisStream;
use crate::broker::redis::group::Group;
use crate::config::Config;
use crate::store::selection::Moment;

/// Rewinds `bridge`'s group on each of its streams (or `stream` alone).
pub(crate) async fn rewind(
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
        Broker::Nats => return super::nats::rewind(config, b, &sources, to, dry_run).await,
        Broker::Kafka => return super::kafka::rewind(config, b, &sources, to, dry_run).await,
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
        if EntryId::parse(&target) > EntryId::parse(&position) {
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
