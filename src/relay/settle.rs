//! Writing a turn's decisions: each settle statement retried through database outages under
//! the rows' leases until the drain time is spent, fenced by claimant + token (a settle after a
//! takeover changes nothing and is counted), and given up after the database refuses its data
//! a few times (reported; the leases lapse and the rows are claimed again).

use std::future::Future;

use tracing::{debug, warn};

use super::Relay;
use super::batch::Settlement;
use crate::broker::EventStream;
use crate::error::error_chain;
use crate::relay::outbox::{Failure, OutboxStore, RowRef};
use crate::runtime::lease;
use crate::runtime::outage::{Failed, retry_through};
use crate::store::{StoreError, StoreResult};
use crate::telemetry::throttle::Throttle;

/// Times a settle the database refuses for its data is tried before it is given up.
const SETTLE_REFUSALS: u32 = 3;

/// How a settle ended.
enum Persisted<T> {
    Done(T),
    /// The drain time ran out first.
    Abandoned,
    /// The database refused the settle's data, again and again.
    Refused(StoreError),
}

impl<S: OutboxStore, P: EventStream> Relay<S, P> {
    /// Writes every decision, retrying through database outages until the drain time after a
    /// shutdown request is spent (then the leases lapse and another claimant takes over). A
    /// settle the database refuses for its data is given up after a few tries (failures once
    /// more with a minimal error text first): reported and counted, never retried for ever.
    pub(super) async fn settle(&self, claimant: &str, held: &[RowRef], s: Settlement) {
        let metrics = &self.deps.metrics;
        let store = &self.deps.store;
        if !s.delivered.is_empty() {
            let expected = s.delivered.len() as u64;
            let persisted = self.persist(claimant, held, || store.settle_delivered(claimant, &s.delivered)).await;
            if let Some(n) = self.persisted("mark delivered", persisted) {
                metrics.published.inc_by(n);
                self.count_fenced("mark delivered", expected, n);
            }
        }
        if !s.failed.is_empty() {
            let expected = s.failed.len() as u64;
            let mut persisted = self.persist(claimant, held, || store.settle_failed(claimant, &s.failed)).await;
            if let Persisted::Refused(_) = persisted {
                let minimal: Vec<Failure> = s
                    .failed
                    .iter()
                    .map(|f| Failure { error: "the row failed (its error text was refused)".into(), ..f.clone() })
                    .collect();
                persisted = self.persist(claimant, held, || store.settle_failed(claimant, &minimal)).await;
            }
            if let Some(n) = self.persisted("record failure", persisted) {
                self.count_fenced("record failure", expected, n);
            }
        }
        let releases = [(&s.released, std::time::Duration::ZERO), (&s.deferred.rows, s.deferred.delay)];
        for (rows, delay) in releases.into_iter().filter(|(rows, _)| !rows.is_empty()) {
            let expected = rows.len() as u64;
            let persisted = self.persist(claimant, held, || store.release(claimant, rows, delay)).await;
            if let Some(n) = self.persisted("release", persisted) {
                metrics.released.inc_by(n);
                self.count_fenced("release", expected, n);
            }
        }
    }

    /// What a settle came to; a refused one is reported (its rows' leases will lapse).
    fn persisted<T>(&self, step: &'static str, persisted: Persisted<T>) -> Option<T> {
        match persisted {
            Persisted::Done(value) => Some(value),
            Persisted::Abandoned => None,
            Persisted::Refused(error) => {
                self.deps.metrics.settle_refused.inc();
                tracing::error!(step, error = %error_chain(&error), "the database refuses this settle's data; its rows' leases will lapse and they are claimed again");
                None
            }
        }
    }

    fn count_fenced(&self, step: &str, expected: u64, changed: u64) {
        if changed < expected {
            let refused = expected - changed;
            self.deps.metrics.fenced.inc_by(refused);
            warn!(step, refused, "settle refused by the fence: another claimant took these rows over");
        }
    }

    /// Runs a settle statement until it succeeds, through outages; `Abandoned` if the drain
    /// time ran out first, `Refused` once the database refused its data [`SETTLE_REFUSALS`] times.
    async fn persist<T, F, Fut>(&self, claimant: &str, held: &[RowRef], op: F) -> Persisted<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = StoreResult<T>>,
    {
        let attempt = async {
            let mut errors = Throttle::new(std::time::Duration::from_secs(30));
            let mut refusals = 0;
            let settled = || async { op().await.map(Persisted::Done) };
            let failed = |error: StoreError| {
                self.source_down(&error, errors.allow());
                refusals += u32::from(error.is_about_the_data());
                if refusals >= SETTLE_REFUSALS { Failed::GiveUp(Persisted::Refused(error)) } else { Failed::Retry }
            };
            let (health, abandon) = (&self.deps.health, &self.deps.abandon);
            let outcome = retry_through(health, abandon, &self.config.claim_loop.outage_backoff, settled, failed).await;
            if let Some(Persisted::Done(_)) = outcome {
                self.source_up();
            }
            outcome.unwrap_or(Persisted::Abandoned)
        };
        self.under_lease(claimant, held, attempt).await.unwrap_or(Persisted::Abandoned)
    }

    /// One bounded attempt to hand rows back when the drain time is over; if it fails, their
    /// leases lapse and another claimant takes them over.
    pub(super) async fn release_now(&self, claimant: &str, rows: &[RowRef]) {
        if rows.is_empty() {
            return;
        }
        let attempt = self.deps.store.release(claimant, rows, std::time::Duration::ZERO);
        match tokio::time::timeout(self.deps.release_timeout, attempt).await {
            Ok(Ok(n)) => self.deps.metrics.released.inc_by(n),
            Ok(Err(error)) => warn!(error = %error_chain(&error), "could not release rows; their leases will lapse"),
            Err(_) => warn!("releasing rows timed out; their leases will lapse"),
        }
    }

    /// Runs `work` while renewing the leases of `rows`; `None` if in-flight work was abandoned
    /// (shutdown drain time over) before it finished.
    pub(super) async fn under_lease<F: Future>(&self, claimant: &str, rows: &[RowRef], work: F) -> Option<F::Output> {
        let renew = || async move {
            if rows.is_empty() {
                return;
            }
            match self.deps.store.renew(claimant, rows, self.config.claim_loop.lease).await {
                Ok(n) => debug!(renewed = n, "lease renewed"),
                Err(error) => debug!(error = %error_chain(&error), "lease renewal failed"),
            }
        };
        lease::under_lease(self.config.claim_loop.lease, &self.deps.abandon, renew, work).await
    }
}
