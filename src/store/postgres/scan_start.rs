//! Where a locked claim starts reading its due index: the relay's on the outbox
//! (`next_attempt_at`), the worker's on the inbox (`next_retry_at`; the same reasoning, with
//! the bridge's takeover as the inserting transaction).
//!
//! Every row the relay settles leaves its entry in the due index (`status = 'PENDING'`, ordered
//! by `next_attempt_at, id`) until a vacuum removes it, and those entries sit at the index's
//! start, where a claim begins. A claim that reads from the start walks every row delivered since
//! the last vacuum, and autovacuum visits a database about once a minute and takes minutes over a
//! table that keeps its delivered history: two million such entries cost a claim 8,000 index pages
//! and 30 ms, and in a 10-minute run the relay fell from 36k to 8k rows/s.
//!
//! So a claim starts a little before the first row the previous claim took ([`LAG`]): the rows
//! before that were delivered, or are held by another claim. What can still be due before it is a
//! straggler — a row whose inserting transaction began before the previous claim's first row but
//! committed after the claim (its `next_attempt_at` is its transaction's start), or a row another
//! claim held and then released by rolling back. Stragglers are found by a claim that reads from
//! the start, which runs at least every [`RESCAN`], after a claim that found nothing, and first.
//! The bound comes from the rows' own `next_attempt_at` (the database's clock); the process's
//! clock only spaces the full scans.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The lock's last result column: the row's due time (`next_attempt_at` / `next_retry_at`), in
/// seconds since the epoch.
pub(crate) const SCAN_DUE: &str = "scan_due";

/// How far before the previous claim's first row the next claim starts.
pub(crate) const LAG: Duration = Duration::from_secs(1);

/// The longest time between two claims that read the due index from its start.
pub(crate) const RESCAN: Duration = Duration::from_secs(1);

/// The shared start of one relay's or one worker's locked claims (its loops take turns reading it).
#[derive(Debug, Default)]
pub(crate) struct ScanStart {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// `next_attempt_at` (seconds since the epoch) of the first row the last claim took, minus
    /// [`LAG`]; `None` when the next claim must read from the start.
    from: Option<f64>,
    /// When a claim last read from the start.
    full_at: Option<Instant>,
}

impl ScanStart {
    /// The lower bound on `next_attempt_at` for the next claim, in seconds since the epoch:
    /// negative infinity for a claim that reads from the start.
    pub(crate) fn bound(&self, now: Instant) -> f64 {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match (state.from, state.full_at) {
            (Some(from), Some(at)) if now.duration_since(at) < RESCAN => from,
            _ => {
                state.full_at = Some(now);
                f64::NEG_INFINITY
            }
        }
    }

    /// What a lock returned: its first row's [`SCAN_DUE`] (the smallest, as the lock orders by
    /// it), or nothing.
    pub(crate) fn took_rows(&self, rows: &[tokio_postgres::Row]) -> Result<(), tokio_postgres::Error> {
        let first_due = rows.first().map(|row| row.try_get::<_, f64>(SCAN_DUE)).transpose()?;
        self.took(first_due);
        Ok(())
    }

    /// What a claim took: the `next_attempt_at` of its first row (the smallest, as the claim
    /// orders by it), or `None` when it took nothing.
    pub(crate) fn took(&self, first_due: Option<f64>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.from = first_due.map(|due| due - LAG.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_first_claim_reads_from_the_start_and_the_next_from_before_its_first_row() {
        let scan = ScanStart::default();
        let t0 = Instant::now();
        assert_eq!(scan.bound(t0), f64::NEG_INFINITY);
        scan.took(Some(1000.0));
        assert_eq!(scan.bound(t0 + Duration::from_millis(10)), 1000.0 - LAG.as_secs_f64());
    }

    #[test]
    fn a_claim_that_took_nothing_makes_the_next_read_from_the_start() {
        let scan = ScanStart::default();
        let t0 = Instant::now();
        scan.bound(t0);
        scan.took(Some(1000.0));
        scan.took(None);
        assert_eq!(scan.bound(t0 + Duration::from_millis(10)), f64::NEG_INFINITY);
    }

    proptest! {
        /// Whatever the claims take and however they are spaced, no two claims that read from the
        /// start are more than RESCAN apart, and a bounded claim starts LAG before the first row
        /// of the claim before it.
        #[test]
        fn full_scans_are_never_further_apart_than_rescan(
            claims in proptest::collection::vec((0u64..400, proptest::option::of(0.0f64..1e6)), 1..200)
        ) {
            let scan = ScanStart::default();
            let start = Instant::now();
            let mut now = start;
            let mut last_full = None;
            let mut last_took: Option<Option<f64>> = None;
            for (gap_ms, first_due) in claims {
                now += Duration::from_millis(gap_ms);
                let bound = scan.bound(now);
                if bound == f64::NEG_INFINITY {
                    last_full = Some(now);
                } else {
                    let at: Instant = last_full.expect("a bounded claim follows a full one");
                    prop_assert!(now.duration_since(at) < RESCAN);
                    let previous = last_took.flatten().expect("a bounded claim follows one that took rows");
                    prop_assert_eq!(bound, previous - LAG.as_secs_f64());
                }
                scan.took(first_due);
                last_took = Some(first_due);
            }
        }
    }
}
