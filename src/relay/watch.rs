//! The broker-loss watch: when to look for appends the broker lost (a restart, a failover, a
//! reconnect, counters going backwards), and what to do with what the look-up finds.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::Relay;
use super::loss::{self, LossCheckError, StreamReport};
use crate::broker::{EventStream, ServerId};
use crate::relay::outbox::OutboxStore;

impl<S: OutboxStore, P: EventStream> Relay<S, P> {
    /// Runs until `shutdown`: every `check_interval` (and at each reconnect) looks for signs of
    /// lost appends and verifies the recent window after one. The first check runs at startup
    /// and verifies `lookback`, in case the broker lost data while this relay was not running.
    /// At once rather than after the first interval: by then the window would also hold every
    /// row this process delivered meanwhile (a relay catching up on a backlog delivers hundreds
    /// of thousands in ten seconds), which later checks cover anyway.
    pub(crate) async fn watch_broker(&self, shutdown: CancellationToken) {
        let config = self.config.broker_loss.clone();
        if !config.enabled {
            return;
        }
        let mut servers: Option<Vec<ServerId>> = None;
        let mut clean_at = Instant::now();
        let mut reason = Some("startup".to_owned());
        let mut next_check = tokio::time::Instant::now();
        loop {
            let first_looks = tokio::select! {
                _ = tokio::time::sleep_until(next_check) => false,
                _ = self.deps.stream.reconnected() => {
                    reason.get_or_insert_with(|| "reconnected to the broker".into());
                    false
                }
                // Streams appended to for the first time: looked at now, not in up to an
                // interval; the others at the next check, which stays when it was.
                _ = self.loss.new_stream.notified() => true,
                _ = shutdown.cancelled() => return,
            };
            let checked_at = Instant::now();
            let window_floor = if first_looks {
                self.look_at_streams(self.loss.take_new(), &mut reason).await
            } else {
                next_check = tokio::time::Instant::now() + config.check_interval;
                match self.look_at_everything(&mut servers, &mut reason).await {
                    Some(floor) => floor,
                    None => continue,
                }
            };
            let Some(why) = reason.take() else {
                if !first_looks {
                    clean_at = checked_at;
                }
                continue;
            };
            let mut window = clean_at.elapsed() + config.lookback;
            if let Some(needed_ms) = window_floor {
                // Entry ids carry the broker's clock, compared with this process's: only a window
                // size, and `lookback` covers a skew of that much.
                window = window.max(Duration::from_millis(loss::unix_ms().saturating_sub(needed_ms)) + config.lookback);
            }
            let window = window.min(config.max_window);
            debug!(relay = %self.config.name, reason = %why, window_s = window.as_secs_f64(), "verifying recent deliveries");
            match self.verify(window, config.repair).await {
                Ok(_) => clean_at = checked_at,
                Err(e) => {
                    warn!(relay = %self.config.name, error = %crate::error::error_chain(&e), "broker-loss verification failed; trying again");
                    reason = Some(why);
                }
            }
        }
    }

    /// A regular check: the broker's servers (one restarted or failed over is a reason), the
    /// append path's suspicion, and every stream appended to within `max_window`. `None` when
    /// the broker does not answer (the check is skipped); else what [`look_at_streams`] says.
    async fn look_at_everything(
        &self,
        servers: &mut Option<Vec<ServerId>>,
        reason: &mut Option<String>,
    ) -> Option<Option<u64>> {
        match self.deps.stream.servers().await {
            Ok(now) => {
                if servers.as_ref().is_some_and(|before| *before != now) {
                    *reason = Some("a broker server restarted or failed over".into());
                }
                *servers = Some(now);
            }
            Err(e) => {
                debug!(error = %e, "broker check skipped: broker unreachable");
                return None;
            }
        }
        if self.loss.take_suspect() {
            reason.get_or_insert_with(|| "the broker was unavailable".into());
        }
        Some(self.look_at_streams(self.loss.streams(self.config.broker_loss.max_window), reason).await)
    }

    /// Compares each of `streams`' counters with what was seen before; notes a reason when one
    /// went backwards or vanished. Returns the oldest time (ms) an entry some consumer group
    /// still needed was appended, over those streams, as it was before this look.
    async fn look_at_streams(&self, streams: Vec<String>, reason: &mut Option<String>) -> Option<u64> {
        let mut oldest_needed: Option<u64> = None;
        for stream in streams {
            let before = self.loss.appended_so_far(&stream);
            let state = match self.deps.stream.stream_state(&stream).await {
                Ok(state) => state,
                // Whatever this stream lost cannot be seen: the recent deliveries are looked up
                // instead (which says whether the broker answers them).
                Err(e) => {
                    reason.get_or_insert_with(|| format!("stream {stream} could not be looked at ({e})"));
                    continue;
                }
            };
            let floor = self.deps.stream.acknowledged_floor(&stream).await.ok().flatten();
            if let Some(needed) = self.loss.observe(&stream, &before, &state, floor, reason) {
                oldest_needed = Some(oldest_needed.map_or(needed, |o| o.min(needed)));
            }
        }
        oldest_needed
    }

    /// Verifies the rows delivered within `window` (see [`verify`]), counting and logging what
    /// is missing.
    pub(crate) async fn verify(&self, window: Duration, repair: bool) -> Result<Vec<StreamReport>, LossCheckError> {
        let metrics = &self.deps.metrics;
        let page = self.config.broker_loss.page_rows;
        let Some(reports) = loss::verify(&self.deps.store, &self.deps.stream, window, repair, page).await? else {
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
                "BROKER DATA LOSS: entries the broker had acknowledged are gone from the stream"
            );
        }
        if reports.iter().all(|r| r.missing == 0) {
            let rows: usize = reports.iter().map(|r| r.checked).sum();
            info!(relay = %self.config.name, rows, "verified recent deliveries: every entry is in its stream");
        }
        Ok(reports)
    }
}
