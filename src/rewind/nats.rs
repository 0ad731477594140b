//! `handoff bridge rewind` on NATS JetStream. A durable consumer's start cannot move, so each of
//! the bridge's consumers is deleted and created again with the same settings, delivering from
//! the sequence after the entry given, or from a time. That forgets which later messages were
//! acknowledged: they are delivered again and the inbox recognises them (effects stay once).
//! Deleting a consumer a running bridge reads from would race its re-creation, so the bridge
//! must be paused (`handoff pause --bridge B`) while it is rewound.

use async_nats::jetstream::consumer::DeliverPolicy;

use super::position::{Moved, RewindError, RewindTo};
use crate::bridge::config::{BridgeConfig, StreamSource};
use crate::broker::EntryId;
use crate::broker::nats::NatsStream;
use crate::config::Config;
use crate::pause::{ComponentKind, Target};

pub(super) async fn rewind(
    config: &Config,
    bridge: &BridgeConfig,
    sources: &[&StreamSource],
    to: &RewindTo,
    dry_run: bool,
) -> Result<Vec<Moved>, RewindError> {
    let db = crate::store::Database::connect(&config.database, "handoff-rewind")
        .map_err(|e| RewindError::Database(e.to_string()))?;
    let pauses = crate::pause::active(&db).await.map_err(|e| RewindError::Database(e.to_string()))?;
    let target = Target { component: ComponentKind::Bridge, name: bridge.name.clone() };
    if !dry_run && !pauses.iter().any(|p| p.target == target) {
        return Err(RewindError::NotPaused(bridge.name.clone()));
    }
    let Some(nats) = &config.nats else { return Err(RewindError::Nats("no [nats] section".into())) };
    let client =
        NatsStream::connect(nats, &bridge.envelope.payload).await.map_err(|e| RewindError::Nats(e.to_string()))?;
    let mut moved = Vec::new();
    for source in sources {
        let group = client.group(bridge.nats_group(&source.key, "rewind"));
        let failed = |error| RewindError::Group { stream: source.key.clone(), error };
        let Some((position, pending)) = group.position().await.map_err(failed)? else {
            return Err(RewindError::NoConsumer(source.key.clone()));
        };
        let (start, shown) = match to {
            RewindTo::Entry(id) => {
                let sequence = EntryId::parse(id).map_or(0, |id| id.0);
                if sequence > position {
                    return Err(RewindError::Forward {
                        stream: source.key.clone(),
                        to: sequence.to_string(),
                        position: position.to_string(),
                    });
                }
                (DeliverPolicy::ByStartSequence { start_sequence: sequence + 1 }, sequence.to_string())
            }
            RewindTo::Moment(moment) => {
                let millis = moment.unix_millis();
                let start_time = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis.max(0)) * 1_000_000)
                    .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
                (DeliverPolicy::ByStartTime { start_time }, format!("messages from {start_time}"))
            }
        };
        if !dry_run {
            group.restart_at(start).await.map_err(failed)?;
        }
        moved.push(Moved { stream: source.key.clone(), from: position.to_string(), to: shown, pending });
    }
    Ok(moved)
}
