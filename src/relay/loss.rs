//! Broker-loss detection and repair (invariant 9). Redis acknowledges an `XADD` before it is
//! durable; a crash before fsync, a failover to a lagging replica, a flush or an eviction can
//! lose entries whose rows were settled as delivered. The relay watches for the signs — a
//! server process it writes to changed (restart, failover), a stream it writes to vanished or
//! counts fewer entries ever added than before, a reconnect or an outage — and after each one
//! looks up the entries of the rows it settled recently in their streams. Rows whose entries
//! are gone (and were not trimmed) go back to PENDING and are appended again; consumers
//! deduplicate on event id.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::broker::{EntryId, EventStream, StreamState, Unavailable};
use crate::relay::outbox::{DeliveredRow, OutboxStore};
use crate::store::StoreError;

/// Streams a relay appended to, and what it last saw of them.
#[derive(Default)]
pub(crate) struct LossWatch {
    streams: Mutex<HashMap<String, StreamMark>>,
    /// Set by the append path when the broker misbehaved (an outage: maybe a restart).
    suspect: AtomicBool,
    /// Woken by the first append to a stream: the watch looks at it at once, so that what it
    /// compares later looks with (a Kafka topic's id) is that of the stream appended to.
    pub(crate) new_stream: tokio::sync::Notify,
    /// The streams appended to for the first time since the watch last took them.
    new_streams: Mutex<Vec<String>>,
}

#[derive(Debug, Clone)]
struct StreamMark {
    last_appended: Instant,
    appended: Appended,
    entries_added: Option<u64>,
    /// The stream's incarnation when last looked at (`StreamState::incarnation`).
    incarnation: Option<u64>,
    /// When the oldest entry some consumer group still needed was appended (ms, stream clock).
    needed_since_ms: Option<u64>,
}

/// What a relay appended to a stream: a look compares the stream's end with what was appended
/// before the look began (an entry appended while it ran may lie past the end it read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Appended {
    /// The newest entry this relay appended (or found appended) to the stream.
    newest: Option<EntryId>,
    /// In a partitioned stream (Kafka), the newest offset this relay appended to each partition.
    in_partition: HashMap<i32, i64>,
}

/// What one verification found for one stream.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct StreamReport {
    pub stream: String,
    pub checked: usize,
    pub trimmed: usize,
    pub missing: usize,
    /// The range of the missing entry ids.
    pub first_missing: Option<String>,
    pub last_missing: Option<String>,
    pub redriven: u64,
}

impl LossWatch {
    /// Records the entries a batch appended (or found appended), by stream. A partition's mark
    /// is the newest offset of the latest batch, not the newest ever: after a topic is made
    /// again its offsets start over, and a mark kept at the old topic's would be a sign at every
    /// look until the new topic passed it.
    pub(crate) fn appended<'a>(&self, entries: impl Iterator<Item = (&'a str, &'a str)>) {
        let now = Instant::now();
        let mut map = self.streams.lock().expect("loss watch lock");
        let mut this_batch: HashMap<(&str, i32), i64> = HashMap::new();
        for (stream, entry_id) in entries {
            let mark = map.entry(stream.to_owned()).or_insert_with(|| {
                self.new_streams.lock().expect("loss watch lock").push(stream.to_owned());
                self.new_stream.notify_one();
                StreamMark {
                    last_appended: now,
                    appended: Appended::default(),
                    entries_added: None,
                    incarnation: None,
                    needed_since_ms: None,
                }
            });
            mark.last_appended = now;
            let appended = &mut mark.appended;
            appended.newest = appended.newest.max(EntryId::parse(entry_id));
            if let Some((partition, offset)) = crate::broker::kafka::parse_entry_id(entry_id) {
                let newest = this_batch.entry((stream, partition)).or_insert(offset);
                *newest = (*newest).max(offset);
            }
        }
        for ((stream, partition), offset) in this_batch {
            if let Some(mark) = map.get_mut(stream) {
                mark.appended.in_partition.insert(partition, offset);
            }
        }
    }

    /// The streams appended to for the first time since the last call.
    pub(crate) fn take_new(&self) -> Vec<String> {
        std::mem::take(&mut *self.new_streams.lock().expect("loss watch lock"))
    }

    /// The broker misbehaved: verify at the next check.
    pub(crate) fn suspect(&self) {
        self.suspect.store(true, Ordering::Relaxed);
    }

    /// Whether the broker misbehaved since the last check (and forgets it).
    pub(crate) fn take_suspect(&self) -> bool {
        self.suspect.swap(false, Ordering::Relaxed)
    }

    /// What the relay has appended to `stream` so far (taken before a look reads its state).
    pub(crate) fn appended_so_far(&self, stream: &str) -> Appended {
        let map = self.streams.lock().expect("loss watch lock");
        map.get(stream).map(|mark| mark.appended.clone()).unwrap_or_default()
    }

    /// Compares what `stream` says of itself now (`state`, and `floor`: the oldest entry some
    /// consumer group still needs) with what was seen before, and with `before` (what
    /// [`appended_so_far`](Self::appended_so_far) said before `state` was read); notes a
    /// `reason` when a counter went backwards, the stream vanished or ends before what the relay
    /// appended. Returns when the oldest entry some group still needed was appended (ms), as it
    /// was before this look; `Some(0)` (look back as far as `max_window` allows) when the stream
    /// lost what it held and no group's floor bounds what matters (Kafka, NATS).
    pub(crate) fn observe(
        &self,
        stream: &str,
        before: &Appended,
        state: &StreamState,
        floor: Option<EntryId>,
        reason: &mut Option<String>,
    ) -> Option<u64> {
        let mut map = self.streams.lock().expect("loss watch lock");
        let mark = map.get_mut(stream)?;
        let needed = mark.needed_since_ms;
        // Gone, made again or cut below what this relay appended: old entries are lost as well
        // as recent ones, however long ago the last clean look was.
        let mut whole = !state.exists;
        // Marked only by entries it stored, and not there: flushed or deleted, even if no look
        // saw it before (it may have gone between the append and the first look).
        if !state.exists {
            reason.get_or_insert_with(|| format!("stream {stream} vanished"));
        }
        // A stream that ends before an entry this relay appended was emptied or recreated,
        // even if this is the first look since the append (no counter seen before to compare).
        if let (Some(last), Some(ours)) = (state.last_entry, before.newest)
            && last < ours
        {
            reason.get_or_insert_with(|| {
                format!("stream {stream} ends at {last}, before {ours} which this relay appended")
            });
        }
        // The same for each partition of a partitioned stream (Kafka), which has no one end; a
        // partition appended to that the stream no longer has (made again with fewer) too.
        let gone = (!state.partition_ends.is_empty())
            .then(|| before.in_partition.keys().find(|p| !state.partition_ends.iter().any(|(q, _)| q == *p)))
            .flatten();
        whole |= gone.is_some();
        if let Some(partition) = gone {
            reason.get_or_insert_with(|| {
                format!("stream {stream} has no partition {partition}, which this relay appended to")
            });
        }
        let short = state
            .partition_ends
            .iter()
            .find(|(partition, end)| before.in_partition.get(partition).is_some_and(|&ours| *end <= ours));
        whole |= short.is_some();
        if let Some(&(partition, end)) = short {
            reason.get_or_insert_with(|| {
                let ours = before.in_partition[&partition];
                format!("partition {partition} of stream {stream} ends at {end}, at or before offset {ours} which this relay appended")
            });
        }
        if let (Some(before), Some(now)) = (mark.entries_added, state.entries_added)
            && now < before
        {
            reason.get_or_insert_with(|| format!("stream {stream} counts fewer entries ever added ({now} < {before})"));
        }
        if let (Some(before), Some(now)) = (mark.incarnation, state.incarnation)
            && now != before
        {
            whole = true;
            reason.get_or_insert_with(|| format!("stream {stream} was deleted and made again (a new topic id)"));
        }
        if state.exists {
            mark.entries_added = state.entries_added;
            mark.incarnation = state.incarnation.or(mark.incarnation);
        }
        if let Some(EntryId(ms, _)) = floor {
            mark.needed_since_ms = Some(ms);
        }
        // A wider window costs only look-ups: a row is re-driven only if its entry is missing.
        if whole && needed.is_none() { Some(0) } else { needed }
    }

    /// Streams appended to within `within`, for checks and acknowledged trimming.
    pub(crate) fn streams(&self, within: Duration) -> Vec<String> {
        let mut map = self.streams.lock().expect("loss watch lock");
        map.retain(|_, mark| mark.last_appended.elapsed() <= within);
        map.keys().cloned().collect()
    }
}

/// Why a look-up of delivered rows' entries stopped: the database or the broker failed it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LossCheckError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Broker(#[from] Unavailable),
}

/// Looks up the entries of the rows delivered within `window` in their streams, `page` rows
/// at a time; those missing (and not trimmed) are reported and, with `repair`, re-driven once
/// every page is read. `None` when the store keeps no delivered rows to look at.
pub(crate) async fn verify<S: OutboxStore, P: EventStream>(
    store: &S,
    stream: &P,
    window: Duration,
    repair: bool,
    page: usize,
) -> Result<Option<Vec<StreamReport>>, LossCheckError> {
    let Some(mut pages) = store.delivered_since(window, page).await? else {
        return Ok(None);
    };
    let mut seen: HashMap<String, Seen> = HashMap::new();
    while let Some(rows) = pages.next().await {
        let rows = rows?;
        let mut by_stream: HashMap<&str, Vec<&DeliveredRow>> = HashMap::new();
        for row in &rows {
            by_stream.entry(row.stream.as_str()).or_default().push(row);
        }
        for (key, rows) in by_stream {
            let found = seen.entry(key.to_owned()).or_default();
            look_up(stream, key, &rows, found).await?;
        }
    }
    let mut reports = Vec::new();
    for (key, mut found) in seen {
        found.missing.sort_by_key(|r| EntryId::parse(&r.entry_id));
        let redriven = if repair && !found.missing.is_empty() { store.redrive(&found.missing).await? } else { 0 };
        reports.push(StreamReport {
            stream: key,
            checked: found.checked,
            trimmed: found.trimmed,
            missing: found.missing.len(),
            first_missing: found.missing.first().map(|r| r.entry_id.clone()),
            last_missing: found.missing.last().map(|r| r.entry_id.clone()),
            redriven,
        });
    }
    reports.sort_by(|a, b| a.stream.cmp(&b.stream));
    Ok(Some(reports))
}

/// What the pages read so far found in one stream.
#[derive(Default)]
struct Seen {
    checked: usize,
    trimmed: usize,
    missing: Vec<DeliveredRow>,
}

/// Looks up one page's rows of `stream`.
async fn look_up<P: EventStream>(
    broker: &P,
    stream: &str,
    rows: &[&DeliveredRow],
    seen: &mut Seen,
) -> Result<(), Unavailable> {
    let state = broker.stream_state(stream).await?;
    let entries: Vec<(String, Option<String>)> =
        rows.iter().map(|r| (r.entry_id.clone(), r.event_id.clone())).collect();
    let present =
        if state.exists { broker.entries_of_events(stream, &entries).await? } else { vec![false; entries.len()] };
    seen.checked += rows.len();
    // An absent entry removed on purpose (trimmed or deleted: at or below the stream's newest
    // removed entry) is not a loss; every entry of a stream that is gone, or was lost and
    // recreated, is.
    for (row, _) in rows.iter().zip(present).filter(|(_, here)| !here) {
        if EntryId::parse(&row.entry_id).is_some_and(|id| state.removed_on_purpose(id)) {
            seen.trimmed += 1;
        } else {
            seen.missing.push((*row).clone());
        }
    }
    Ok(())
}

pub(super) fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(watch: &LossWatch, state: StreamState) -> Option<String> {
        let mut reason = None;
        watch.observe("s", &watch.appended_so_far("s"), &state, None, &mut reason);
        reason
    }

    fn there(entries_added: u64) -> StreamState {
        StreamState { exists: true, entries_added: Some(entries_added), ..StreamState::default() }
    }

    #[test]
    fn a_stream_appended_to_and_missing_at_the_first_look_is_a_sign() {
        let watch = LossWatch::default();
        watch.appended([("s", "100-0")].into_iter());
        assert_eq!(look(&watch, StreamState::default()).as_deref(), Some("stream s vanished"));
    }

    #[test]
    fn a_stream_recreated_before_the_first_look_ends_before_what_was_appended() {
        let watch = LossWatch::default();
        watch.appended([("s", "20"), ("s", "19")].into_iter());
        let recreated = StreamState { last_entry: Some(EntryId(3, 0)), ..there(3) };
        assert!(look(&watch, recreated).is_some_and(|r| r.contains("ends at 3-0, before 20-0")));
        let kept = StreamState { last_entry: Some(EntryId(20, 0)), ..there(20) };
        assert_eq!(look(&watch, kept), None);
    }

    #[test]
    fn a_stream_that_vanishes_or_counts_fewer_entries_is_a_sign_and_one_that_grows_is_not() {
        let watch = LossWatch::default();
        watch.appended([("s", "100-0")].into_iter());
        assert_eq!(look(&watch, there(5)), None);
        assert_eq!(look(&watch, there(7)), None);
        assert!(look(&watch, there(3)).is_some_and(|r| r.contains("fewer entries")));
        assert_eq!(look(&watch, StreamState::default()).as_deref(), Some("stream s vanished"));
    }

    #[test]
    fn a_topic_made_again_is_a_sign_though_refilled_past_the_old_count() {
        let watch = LossWatch::default();
        watch.appended([("s", "0:5")].into_iter());
        assert_eq!(look(&watch, StreamState { incarnation: Some(1), ..there(8200) }), None);
        assert_eq!(look(&watch, StreamState { incarnation: None, ..there(8300) }), None, "an id not read: no sign");
        let refilled = StreamState { incarnation: Some(2), ..there(9000) };
        assert!(look(&watch, refilled).is_some_and(|r| r.contains("deleted and made again")));
        assert_eq!(look(&watch, StreamState { incarnation: Some(2), ..there(9100) }), None);
    }

    #[test]
    fn a_partition_that_ends_at_or_before_an_offset_appended_to_it_is_a_sign_at_the_first_look() {
        let watch = LossWatch::default();
        watch.appended([("s", "0:40"), ("s", "1:7"), ("s", "0:41")].into_iter());
        let ends = |ends: &[(i32, i64)]| StreamState { partition_ends: ends.to_vec(), ..there(100) };
        assert_eq!(look(&watch, ends(&[(0, 42), (1, 8), (2, 0)])), None, "every partition past ours");
        let lost = look(&watch, ends(&[(0, 42), (1, 7), (2, 900)]));
        assert!(lost.is_some_and(|r| r.contains("partition 1 of stream s ends at 7, at or before offset 7")));
    }

    #[test]
    fn an_entry_appended_while_a_look_reads_the_stream_is_not_compared_with_its_end() {
        let watch = LossWatch::default();
        watch.appended([("s", "0:10"), ("s", "7-0")].into_iter());
        let before = watch.appended_so_far("s");
        // The look reads the end (11, 7-0); an append lands meanwhile (offset 11, 8-0).
        let state = StreamState { partition_ends: vec![(0, 11)], last_entry: Some(EntryId(7, 0)), ..there(11) };
        watch.appended([("s", "0:11"), ("s", "8-0")].into_iter());
        let mut reason = None;
        watch.observe("s", &before, &state, None, &mut reason);
        assert_eq!(reason, None);
        assert!(look(&watch, state).is_some(), "compared with what was appended before it, the end is short");
    }

    #[test]
    fn after_a_topic_is_made_again_its_new_offsets_are_what_a_look_compares() {
        let watch = LossWatch::default();
        watch.appended([("s", "0:900")].into_iter());
        let remade = |end: i64| StreamState { partition_ends: vec![(0, end)], ..there(end as u64) };
        assert!(look(&watch, remade(5)).is_some(), "the old offset lies past the new end");
        // Produced again to the new topic: offsets from 0.
        watch.appended([("s", "0:4"), ("s", "0:5")].into_iter());
        assert_eq!(look(&watch, remade(6)), None, "no sign at every look until the topic passes 900");
    }

    #[test]
    fn a_partition_appended_to_that_the_stream_no_longer_has_is_a_sign() {
        let watch = LossWatch::default();
        watch.appended([("s", "0:3"), ("s", "2:7")].into_iter());
        let fewer = StreamState { partition_ends: vec![(0, 10)], ..there(10) };
        assert!(look(&watch, fewer).is_some_and(|r| r.contains("no partition 2")));
    }

    #[test]
    fn a_stream_that_lost_what_it_held_is_looked_back_on_as_far_as_max_window_without_a_group_floor() {
        let since = |watch: &LossWatch, state: StreamState| {
            let before = watch.appended_so_far("s");
            watch.observe("s", &before, &state, None, &mut None)
        };
        let remade = LossWatch::default();
        remade.appended([("s", "0:900")].into_iter());
        assert_eq!(
            since(&remade, StreamState { incarnation: Some(1), partition_ends: vec![(0, 901)], ..there(901) }),
            None
        );
        let again = StreamState { incarnation: Some(2), partition_ends: vec![(0, 901)], ..there(901) };
        assert_eq!(since(&remade, again), Some(0), "a new topic id: everything it held is gone");
        let cut = LossWatch::default();
        cut.appended([("s", "0:900")].into_iter());
        assert_eq!(since(&cut, StreamState { partition_ends: vec![(0, 30)], ..there(30) }), Some(0));
        let vanished = LossWatch::default();
        vanished.appended([("s", "7-0")].into_iter());
        assert_eq!(since(&vanished, StreamState::default()), Some(0));

        // A consumer group's floor bounds it (Redis): what no group still needs is not looked up.
        let floored = LossWatch::default();
        floored.appended([("s", "7-0")].into_iter());
        let before = floored.appended_so_far("s");
        floored.observe("s", &before, &there(1), Some(EntryId(5, 0)), &mut None);
        assert_eq!(since(&floored, StreamState::default()), Some(5));
        // Fewer entries ever added (a failover to a lagging replica) is a recent loss: no widening.
        let lagging = LossWatch::default();
        lagging.appended([("s", "7-0")].into_iter());
        since(&lagging, StreamState { last_entry: Some(EntryId(7, 0)), ..there(10) });
        assert_eq!(since(&lagging, StreamState { last_entry: Some(EntryId(7, 0)), ..there(9) }), None);
    }

    #[test]
    fn a_stream_never_appended_to_is_not_watched() {
        assert_eq!(look(&LossWatch::default(), StreamState::default()), None);
    }
}
