//! A topic deleted and made again under the same name (an operator's mistake, a cluster
//! rebuilt, the chaos harness) starts again at offset 0 with a new topic id. librdkafka keeps
//! what it knew of the old topic: a member's position and the group's committed offsets go on
//! pointing into the old topic (its source says "FIXME: an offset reset must be triggered"), and
//! the partitions' leader epochs, which restart at 0, are taken for stale metadata. A member left
//! alone would skip what the new topic holds below the old offset, or fetch from the old
//! leaders for ever.
//!
//! So the member commits its offsets with the topic's id as their metadata. Offsets committed
//! under another id are not taken: those partitions are read from the start. And a member that
//! sees the id change while it runs is replaced by a new one, which joins the group with fresh
//! metadata, once nothing it read from the old topic is still in flight.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};

use super::{Incarnation, KafkaGroup, unavailable};
use crate::broker::group::{GroupResult, Read};
use crate::broker::kafka::message::parse_entry_id;

/// How often a member asks for its topic's id (one metadata request).
const TOPIC_CHECK: Duration = Duration::from_secs(5);

impl KafkaGroup {
    pub(super) fn incarnation(&self) -> std::sync::MutexGuard<'_, Incarnation> {
        self.incarnation.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The topic's id now, asked of the cluster at most every [`TOPIC_CHECK`] (`force`: now);
    /// `None` while it cannot be read (the topic is being made again, the cluster is down). An
    /// id other than the member's marks the topic recreated.
    pub(super) async fn topic_id(&self, force: bool) -> Option<String> {
        if let Some((id, at)) = &self.incarnation().described
            && !force
            && at.elapsed() < TOPIC_CHECK
        {
            return Some(id.clone());
        }
        let client = self.watermarks().ok()?;
        let (topic, timeout) = (self.settings.topic.clone(), self.config.timeout);
        let described = tokio::task::spawn_blocking(move || {
            crate::broker::kafka::topic_id::describe(client.client(), &topic, timeout)
        });
        let id = match described.await {
            Ok(Ok(id)) => id,
            Ok(Err(e)) => {
                tracing::debug!(topic = %self.settings.topic, error = %e, "the topic's id could not be read");
                return None;
            }
            Err(_) => return None,
        };
        let mut known = self.incarnation();
        known.described = Some((id.clone(), Instant::now()));
        match &known.id {
            None => known.id = Some(id.clone()),
            Some(old) if *old != id && !known.recreated => {
                tracing::warn!(topic = %self.settings.topic, old = %old, new = %id, "the topic was deleted and made again; a new member reads it from its start");
                known.recreated = true;
            }
            Some(_) => {}
        }
        Some(id)
    }

    /// After the topic was made again, a new member takes over, once nothing read from the old
    /// topic is in flight: an acknowledgement names a partition and an offset, which the new
    /// topic reuses. Entries in flight for `claim_idle` are not waited for (their takeover
    /// failed). False while they are waited for: nothing is read meanwhile.
    pub(super) async fn replace_if_recreated(&self, block: Option<Duration>) -> GroupResult<bool> {
        let new_id = match &*self.incarnation() {
            Incarnation { recreated: true, described: Some((id, _)), .. } => id.clone(),
            _ => return Ok(true),
        };
        let settled =
            self.owned.lock().values().all(|state| {
                state.in_flight.values().all(|(read_at, _)| read_at.elapsed() >= self.settings.claim_idle)
            });
        if !settled {
            if let Some(block) = block {
                tokio::time::sleep(block.min(Duration::from_millis(100))).await;
            }
            return Ok(false);
        }
        // The old member's callbacks (its revoke, served while it closes) are ignored from here.
        let context = self.owned.next_member();
        let member = Self::member_of(&self.config, &self.settings, &context)?;
        member.subscribe(&[&self.settings.topic]).map_err(unavailable)?;
        let old = std::mem::replace(
            &mut *self.consumer.write().unwrap_or_else(std::sync::PoisonError::into_inner),
            Arc::new(member),
        );
        {
            // Still in flight: taken over late, their acknowledgements name offsets the new
            // topic reuses.
            let (mut owned, mut retired) = (self.owned.lock(), self.owned.retired());
            for (partition, state) in owned.drain() {
                retired.extend(state.in_flight.keys().map(|offset| (partition, *offset)));
            }
        }
        self.owned.assigned().clear();
        let old_watermarks = self.watermarks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        {
            let mut known = self.incarnation();
            (known.id, known.recreated) = (Some(new_id), false);
        }
        // Closing a client waits for its threads (and leaving the group for the coordinator):
        // off the async threads.
        tokio::task::spawn_blocking(move || drop((old, old_watermarks)));
        Ok(true)
    }

    /// Partitions assigned since the last check whose committed offset was committed under
    /// another id of the topic (before it was deleted and made again) are read from the
    /// start, and what this read took from them is dropped. An offset committed without an id
    /// (by an older handoff) is taken as it is.
    pub(super) async fn check_assigned(&self, read: &mut Read) {
        let unchecked: Vec<i32> = self.owned.assigned().iter().copied().collect();
        if unchecked.is_empty() {
            return;
        }
        match self.stale_offsets(&unchecked).await {
            Ok(stale) if stale.is_empty() => {}
            Ok(stale) => {
                tracing::warn!(topic = %self.settings.topic, partitions = ?stale, "the group's offsets were committed before the topic was made again; reading it from its start");
                drop_partitions(read, &stale);
                let from_start = stale.iter().map(|p| (*p, Offset::Beginning)).collect();
                if let Err(e) = self.seek_to(from_start).await {
                    // Checked again at the next read (they stay unchecked).
                    tracing::warn!(topic = %self.settings.topic, error = %e, "seeking to the start of a recreated topic failed");
                    return;
                }
            }
            Err(e) => {
                // Checked again at the next read; meanwhile nothing of those partitions is
                // handed on, and they are read again from where this read began.
                tracing::debug!(topic = %self.settings.topic, error = %e, "the assigned partitions' offsets could not be checked yet");
                let back = drop_partitions(read, &unchecked).into_iter().map(|(p, o)| (p, Offset::Offset(o))).collect();
                if let Err(e) = self.seek_to(back).await {
                    tracing::warn!(topic = %self.settings.topic, error = %e, "seeking back over a dropped read failed");
                }
                return;
            }
        }
        let mut assigned = self.owned.assigned();
        unchecked.iter().for_each(|p| _ = assigned.remove(p));
    }

    /// Those of `partitions` whose committed offset carries another id of the topic.
    async fn stale_offsets(&self, partitions: &[i32]) -> GroupResult<Vec<i32>> {
        let id = self.topic_id(true).await.ok_or_else(|| unavailable("the topic's id could not be read"))?;
        let mut list = TopicPartitionList::new();
        partitions.iter().for_each(|p| _ = list.add_partition(&self.settings.topic, *p));
        let (consumer, timeout) = (self.consumer(), self.config.timeout);
        let committed = tokio::task::spawn_blocking(move || consumer.committed_offsets(list, timeout))
            .await
            .map_err(unavailable)?
            .map_err(unavailable)?;
        let elements = committed.elements();
        let stale = elements.iter().filter(|e| !e.metadata().is_empty() && e.metadata() != id);
        Ok(stale.map(|e| e.partition()).collect())
    }

    /// Seeks each partition to the offset given, and forgets what this member read of those
    /// it sought. A partition whose seek failed keeps what it read in flight, so no commit
    /// passes it (`reclaim` seeks back to it later).
    async fn seek_to(&self, offsets: BTreeMap<i32, Offset>) -> GroupResult<()> {
        let (consumer, topic, timeout) = (self.consumer(), self.settings.topic.clone(), self.config.timeout);
        let sought = tokio::task::spawn_blocking(move || {
            let seek = |(p, offset)| consumer.seek(&topic, p, offset, timeout).map(|()| p);
            offsets.into_iter().map(seek).collect::<Vec<_>>()
        })
        .await
        .map_err(unavailable)?;
        let mut owned = self.owned.lock();
        let mut failed = None;
        for result in sought {
            match result {
                Ok(partition) => _ = owned.remove(&partition),
                Err(e) => failed = Some(e),
            }
        }
        failed.map_or(Ok(()), |e| Err(unavailable(e)))
    }
}

/// Removes from `read` the entries of `partitions`, and gives each partition's first offset
/// removed.
fn drop_partitions(read: &mut Read, partitions: &[i32]) -> BTreeMap<i32, i64> {
    let mut dropped = BTreeMap::new();
    for list in [&mut read.entries, &mut read.redelivered] {
        list.retain(|entry| match parse_entry_id(&entry.id) {
            Some((partition, offset)) if partitions.contains(&partition) => {
                let first = dropped.entry(partition).or_insert(offset);
                *first = (*first).min(offset);
                false
            }
            _ => true,
        });
    }
    dropped
}
