//! The rows and outcomes the relay and its outbox speak in: a claimed row, how each settles,
//! the delivered rows broker-loss repair reads back, and the outbox's gauges.

use std::time::Duration;

use crate::store::error::{StoreError, StoreResult};
use crate::store::rows::{TextPages, TextRow, column};

/// One claimed outbox row.
#[derive(Debug, Clone)]
pub struct ClaimedRow {
    /// The row's key, as text whatever its SQL type.
    pub id: String,
    /// Fencing token the claim set; every settle must present it.
    pub token: i64,
    pub event_id: String,
    /// Row-attributable failures so far.
    pub attempts: u32,
    /// Claims of this row whose lease expired, including the one that just reclaimed it.
    pub expired_claims: u32,
    /// Age at claim time by the database clock (`now() - created_at`).
    pub age: Duration,
    /// Whether this claim took the row over from a claimant whose lease expired.
    pub reclaimed: bool,
    /// Ordered relaying: the key whose events must keep their order (`order_key` column).
    pub order_key: Option<String>,
    /// Why the row cannot be relayed, naming the column (a value the relay cannot read: an
    /// infinite or zero `created_at`, bytes that are not text, a count that is not a number).
    /// Such a row is made DEAD with this as its error; its batch goes on.
    pub unreadable: Option<String>,
    /// All claim columns as text, in the order of `OutboxStore::columns`.
    pub values: Vec<Option<String>>,
}

impl ClaimedRow {
    /// A row as first claimed: no failures, no expired leases, readable. For rows that are
    /// not claimed from an outbox (replay builds entries from history) and for fakes.
    pub(crate) fn first_claim(id: String, token: i64, event_id: String, values: Vec<Option<String>>) -> Self {
        Self {
            id,
            token,
            event_id,
            attempts: 0,
            expired_claims: 0,
            age: Duration::ZERO,
            reclaimed: false,
            order_key: None,
            unreadable: None,
            values,
        }
    }

    pub fn key(&self) -> RowRef {
        RowRef { id: self.id.clone(), token: self.token }
    }
}

/// A claimed row as settles name it: key plus fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowRef {
    pub id: String,
    pub token: i64,
}

/// Rows handed back untouched but due again only after `delay`: the part of the broker their
/// streams are on is down while the rest answers, and due at once they would crowd every
/// claim and hold up the streams that do flow.
#[derive(Debug, Clone, Default)]
pub struct Deferred {
    pub rows: Vec<RowRef>,
    pub delay: Duration,
}

/// A row the stream acknowledged, with the entry id it returned and the stream it went to.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub row: RowRef,
    pub entry_id: String,
    pub stream: String,
}

/// A delivered row as broker-loss repair sees it: which entry of which stream it became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveredRow {
    pub id: String,
    pub stream: String,
    pub entry_id: String,
    /// The row's event id, when the statement returns it (the reference statements do): a loss
    /// check then also asks that the entry found under `entry_id` is this event's.
    pub event_id: Option<String>,
}

/// What happens to a row whose append failed for a reason of its own.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Back to PENDING, attempts + 1, due again after `delay` (by the database clock).
    Retry { delay: Duration },
    /// Terminal: kept for inspection and re-drive.
    Dead,
}

#[derive(Debug, Clone)]
pub struct Failure {
    pub row: RowRef,
    pub error: String,
    pub verdict: Verdict,
}

/// Sampled gauges of an outbox.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutboxStats {
    pub pending: i64,
    pub in_flight: i64,
    pub dead: i64,
    /// Seconds since the oldest row not yet delivered (pending or in flight) was created; 0 if none.
    pub oldest_pending_age: f64,
}

/// `delivered_since`'s rows, page by page as the store reads them.
pub struct DeliveredPages(TextPages);

impl From<TextPages> for DeliveredPages {
    fn from(pages: TextPages) -> Self {
        Self(pages)
    }
}

impl DeliveredPages {
    /// The next page; `None` after the last. A failed read, or a row without the contract's
    /// columns, is an error.
    pub async fn next(&mut self) -> Option<StoreResult<Vec<DeliveredRow>>> {
        let page = self.0.recv().await?;
        Some(page.and_then(|rows| rows.iter().map(delivered_row).collect()))
    }
}

/// One row of `delivered_since`.
fn delivered_row(row: &TextRow) -> StoreResult<DeliveredRow> {
    let text = |name: &str| -> StoreResult<String> {
        column(row, name)
            .map(str::to_owned)
            .ok_or_else(|| StoreError::Contract(format!("delivered_since: column `{name}` is missing or NULL")))
    };
    let event_id = column(row, "event_id").map(str::to_owned);
    Ok(DeliveredRow { id: text("id")?, stream: text("stream")?, entry_id: text("entry_id")?, event_id })
}
