//! `handoff bridge rewind` on Kafka: the bridge's group's committed offsets move back, on each
//! partition of each topic, to the first message at or after a time; the messages after it are
//! read again and the inbox recognises those already taken over (effects stay once). Kafka takes
//! offsets committed from outside a group only while it has no members: the bridge's processes
//! must be stopped (a paused bridge stays a member). Positions are times, not entry ids: an
//! offset names one partition only.

use super::position::{Moved, RewindError, RewindTo};
use crate::bridge::config::{BridgeConfig, StreamSource};
use crate::broker::kafka::offsets::rewind_to_time;
use crate::config::Config;

pub(super) async fn rewind(
    config: &Config,
    bridge: &BridgeConfig,
    sources: &[&StreamSource],
    to: &RewindTo,
    dry_run: bool,
) -> Result<Vec<Moved>, RewindError> {
    let Some(kafka) = &config.kafka else { return Err(RewindError::Kafka("no [kafka] section".into())) };
    let unix_ms = match to {
        RewindTo::Moment(moment) => moment.unix_millis(),
        RewindTo::Entry(id) => {
            return Err(RewindError::Kafka(format!(
                "`{id}` is an entry id; on Kafka, rewind to a time (--to 1h, or an RFC 3339 time)"
            )));
        }
    };
    let mut moved = Vec::new();
    for source in sources {
        let resets = rewind_to_time(kafka, bridge.group(), &source.key, unix_ms, dry_run)
            .await
            .map_err(|e| RewindError::Kafka(format!("{}: {e}", source.key)))?;
        let place = |partition: i32, offset: Option<i64>| {
            offset.map_or(format!("{partition}:(none)"), |o| format!("{partition}:{o}"))
        };
        let from: Vec<String> = resets.iter().map(|r| place(r.partition, r.from)).collect();
        let to: Vec<String> = resets.iter().map(|r| place(r.partition, Some(r.to))).collect();
        moved.push(Moved { stream: source.key.clone(), from: from.join(","), to: to.join(","), pending: 0 });
    }
    Ok(moved)
}
