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

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::Relay;
use crate::error::error_chain;
use crate::store::outbox::{DeliveredRow, OutboxStore};
use crate::stream::{EntryId, EventStream, ServerId};

/// Streams a relay appended to, and what it last saw of them.
#[derive(Default)]
pub struct LossWatch {
    streams: Mutex<HashMap<String, StreamMark>>,
    /// Set by the append path when the broker misbehaved (an outage: maybe a restart).
    suspect: AtomicBool,
}

#[derive(Debug, Clone, Copy)]
struct StreamMark {
    last_appended: Instant,
    entries_added: Option<u64>,
    /// When the oldest entry some consumer group still needed was appended (ms, stream clock).
    needed_since_ms: Option<u64>,
}

/// What one verification found for one stream.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StreamReport {
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
    /// Records the streams a batch appended to.
    pub fn appended<'a>(&self, streams: impl Iterator<Item = &'a str>) {
        let now = Instant::now();
        let mut map = self.streams.lock().expect("loss watch lock");
        for stream in streams {
            match map.get_mut(stream) {
                Some(mark) => mark.last_appended = now,
                None => {
                    let mark = StreamMark { last_appended: now, entries_added: None, needed_since_ms: None };
                    map.insert(stream.to_owned(), mark);
                }
            }
        }
    }

    /// The broker misbehaved: verify at the next check.
    pub fn suspect(&self) {
        self.suspect.store(true, Ordering::Relaxed);
    }

    /// Streams appended to within `within`, for checks and acknowledged trimming.
    pub fn streams(&self, within: Duration) -> Vec<String> {
        let mut map = self.streams.lock().expect("loss watch lock");
        map.retain(|_, mark| mark.last_appended.elapsed() <= within);
        map.keys().cloned().collect()
    }
}

impl<S: OutboxStore, P: EventStream> Relay<S, P> {
    /// Runs until `shutdown`: every `check_interval` (and at each reconnect) looks for signs of
    /// lost appends and verifies the recent window after one. The first check after startup
    /// verifies `lookback`, in case the broker lost data while this relay was not running.
    pub async fn watch_broker(&self, shutdown: CancellationToken) {
        let config = self.config.broker_loss.clone();
        if !config.enabled {
            return;
        }
        let mut servers: Option<Vec<ServerId>> = None;
        let mut clean_at = Instant::now();
        let mut reason = Some("startup".to_owned());
        loop {
            tokio::select! {
                _ = tokio::time::sleep(config.check_interval) => {}
                _ = self.deps.stream.reconnected() => { reason.get_or_insert_with(|| "reconnected to redis".into()); }
                _ = shutdown.cancelled() => return,
            }
            let checked_at = Instant::now();
            match self.deps.stream.servers().await {
                Ok(now) => {
                    if servers.as_ref().is_some_and(|before| *before != now) {
                        reason = Some("a redis server restarted or failed over".into());
                    }
                    servers = Some(now);
                }
                Err(e) => {
                    debug!(error = %e, "broker check skipped: redis unreachable");
                    continue;
                }
            }
            if self.loss.suspect.swap(false, Ordering::Relaxed) {
                reason.get_or_insert_with(|| "redis was unavailable".into());
            }
            let window_floor = self.look_at_streams(&mut reason).await;
            let Some(why) = reason.take() else {
                clean_at = checked_at;
                continue;
            };
            let mut window = clean_at.elapsed() + config.lookback;
            if let Some(needed_ms) = window_floor {
                // Entry ids carry the broker's clock, compared with this process's: only a window
                // size, and `lookback` covers a skew of that much.
                window = window.max(Duration::from_millis(unix_ms().saturating_sub(needed_ms)) + config.lookback);
            }
            let window = window.min(config.max_window);
            debug!(relay = %self.config.name, reason = %why, window_s = window.as_secs_f64(), "verifying recent deliveries");
            match self.verify(window, config.repair).await {
                Ok(_) => clean_at = checked_at,
                Err(e) => {
                    warn!(relay = %self.config.name, error = %e, "broker-loss verification failed; trying again");
                    reason = Some(why);
                }
            }
        }
    }

    /// Compares each stream's counters with what was seen before; notes a reason when one went
    /// backwards or vanished. Returns the oldest time (ms) an entry some consumer group still
    /// needed was appended, over all streams, as it was before this check.
    async fn look_at_streams(&self, reason: &mut Option<String>) -> Option<u64> {
        let within = self.config.broker_loss.max_window;
        let mut oldest_needed: Option<u64> = None;
        for stream in self.loss.streams(within) {
            let Ok(state) = self.deps.stream.stream_state(&stream).await else { continue };
            let floor = self.deps.stream.acknowledged_floor(&stream).await.ok().flatten();
            let mut map = self.loss.streams.lock().expect("loss watch lock");
            let Some(mark) = map.get_mut(&stream) else { continue };
            if let Some(needed) = mark.needed_since_ms {
                oldest_needed = Some(oldest_needed.map_or(needed, |o| o.min(needed)));
            }
            if !state.exists && mark.entries_added.is_some() {
                reason.get_or_insert_with(|| format!("stream {stream} vanished"));
            }
            if let (Some(before), Some(now)) = (mark.entries_added, state.entries_added)
                && now < before
            {
                reason.get_or_insert_with(|| {
                    format!("stream {stream} counts fewer entries ever added ({now} < {before})")
                });
            }
            if state.exists {
                mark.entries_added = state.entries_added;
            }
            if let Some(EntryId(ms, _)) = floor {
                mark.needed_since_ms = Some(ms);
            }
        }
        oldest_needed
    }

    /// Verifies the rows delivered within `window` (see [`verify`]), counting and logging what
    /// is missing.
    pub async fn verify(&self, window: Duration, repair: bool) -> Result<Vec<StreamReport>, String> {
        let metrics = &self.deps.metrics;
        let page = self.config.broker_loss.page_rows;
        let Some(reports) = verify(&self.deps.store, &self.deps.stream, window, repair, page).await? else {
            warn!(relay = %self.config.name, "signs of broker data loss, but delivered rows are not kept (settle = \"delete\" or no delivered_since statement): lost entries cannot be found or re-driven");
            return Ok(Vec::new());
        };
        for report in reports.iter().filter(|r| r.missing > 0) {
            metrics.loss_events.inc();
            metrics.lost_entries.inc_by(report.missing as u64);
            metrics.redriven.inc_by(report.redriven);
            warn!(
                relay = %self.config.name,
                stream = %report.stream,
                missing = report.missing,
                first = report.first_missing.as_deref().unwrap_or(""),
                last = report.last_missing.as_deref().unwrap_or(""),
                redriven = report.redriven,
                "BROKER DATA LOSS: entries redis had acknowledged are gone from the stream"
            );
        }
        if reports.iter().all(|r| r.missing == 0) {
            let rows: usize = reports.iter().map(|r| r.checked).sum();
            info!(relay = %self.config.name, rows, "verified recent deliveries: every entry is in its stream");
        }
        Ok(reports)
    }
}

/// Looks up the entries of the rows delivered within `window` in their streams, `page` rows
/// at a time; those missing (and not trimmed) are reported and, with `repair`, re-driven once
/// every page is read. `None` when the store keeps no delivered rows to look at.
pub async fn verify<S: OutboxStore, P: EventStream>(
    store: &S,
    stream: &P,
    window: Duration,
    repair: bool,
    page: usize,
) -> Result<Option<Vec<StreamReport>>, String> {
    let Some(mut pages) = store.delivered_since(window, page).await.map_err(|e| error_chain(&e))? else {
        return Ok(None);
    };
    let mut seen: HashMap<String, Seen> = HashMap::new();
    while let Some(rows) = pages.next().await {
        let rows = rows.map_err(|e| error_chain(&e))?;
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
        let redriven = if repair && !found.missing.is_empty() {
            store.redrive(&found.missing).await.map_err(|e| error_chain(&e))?
        } else {
            0
        };
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
) -> Result<(), String> {
    let state = broker.stream_state(stream).await.map_err(|e| e.to_string())?;
    let ids: Vec<String> = rows.iter().map(|r| r.entry_id.clone()).collect();
    let present = if state.exists {
        broker.entries_exist(stream, &ids).await.map_err(|e| e.to_string())?
    } else {
        vec![false; ids.len()]
    };
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

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
