//! The tables `handoff dead` works on, which of their rows it selects, and how it shows them.

use std::time::Duration;

use serde::Serialize;

/// Which DEAD rows an operation touches.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeadFilter {
    pub event_id: Option<String>,
    pub older_than: Option<Duration>,
    pub error_contains: Option<String>,
    pub limit: u32,
    /// Rows skipped first (a listing's later pages; 0 for a re-drive or purge).
    pub offset: u32,
}

impl DeadFilter {
    /// `older_than` in milliseconds, as the statements take it. Past a thousand years every row
    /// is younger, so longer ages saturate there: a cast would wrap ("older than 500 million
    /// years" became 384 ms and matched rows dead a second ago) and the database's interval
    /// arithmetic overflows long before `i64::MAX` milliseconds.
    pub(crate) fn older_than_ms(&self) -> Option<i64> {
        const OLDEST: Duration = Duration::from_secs(1000 * 366 * 24 * 3600);
        self.older_than.map(|d| d.min(OLDEST).as_millis() as i64)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeadAction {
    List,
    /// Back to PENDING with the row's counters reset; its last error stays and `redrives` counts
    /// the re-drive.
    Retry,
    Purge,
}

/// A table holding DEAD rows: a relay's outbox or a worker's inbox.
#[derive(Debug, Clone)]
pub(super) struct DeadTable {
    /// `relay <name>` or `worker <name>`: what the rows are shown as.
    pub source: String,
    pub table: String,
    /// An inbox's consumer (its rows are scoped by it); `None` for an outbox.
    pub consumer: Option<String>,
}

impl DeadTable {
    pub(super) fn outbox(relay: &str, table: &str) -> Self {
        Self { source: format!("relay {relay}"), table: table.to_owned(), consumer: None }
    }

    pub(super) fn inbox(worker: &str, table: &str, consumer: &str) -> Self {
        Self { source: format!("worker {worker}"), table: table.to_owned(), consumer: Some(consumer.to_owned()) }
    }

    /// What a re-drive resets besides the status, by the database clock (`now` is the
    /// dialect's): every counter that could make the row DEAD again at once.
    pub(super) fn reset(&self, now: &str) -> String {
        match self.consumer {
            None => format!("attempts = 0, expired_claims = 0, next_attempt_at = {now}"),
            Some(_) => format!("attempts = 0, expired_leases = 0, next_retry_at = {now}"),
        }
    }
}

/// One DEAD row as shown to the operator.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DeadRow {
    /// `relay <name>` or `worker <name>`.
    pub source: String,
    pub id: String,
    pub event_id: String,
    pub event_type: String,
    pub attempts: i32,
    pub dead_for_seconds: f64,
    pub redrives: i32,
    pub last_error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_age_past_any_row_saturates_instead_of_wrapping() {
        let filter = |d| DeadFilter { older_than: Some(d), ..Default::default() };
        assert_eq!(filter(Duration::from_secs(2)).older_than_ms(), Some(2000));
        let eons = humantime::parse_duration("18446744073709552s").unwrap();
        let ms = filter(eons).older_than_ms().unwrap();
        assert!(ms > 900 * 365 * 24 * 3600 * 1000, "{ms}");
        assert_eq!(filter(Duration::MAX).older_than_ms(), Some(ms));
    }
}
