//! The seam between the relay and the database that owns the outbox.
//!
//! The relay speaks in claimed rows and settle outcomes; a dialect turns them into statements.
//! Postgres is the first dialect; MySQL follows as a sibling module.

pub mod bindings;
pub mod claim;
pub mod database;
pub mod inbox;
pub mod migrate;
pub mod mysql;
pub mod outbox;
pub mod postgres;
pub mod worker;
pub use crate::config::statements;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

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
    pub fault: Option<String>,
    /// All claim columns as text, in the order of [`OutboxStore::columns`].
    pub values: Vec<Option<String>>,
}

impl ClaimedRow {
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

/// Why the database could not do something, when it was not the data's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutageKind {
    /// Unreachable, dropped, timed out, shutting down, out of resources.
    Connection,
    /// A table, column, type or function the statement uses is missing or different.
    Schema,
    /// The database user lacks a privilege.
    Permission,
    /// The server accepts no writes (a read-only replica, a failover in progress).
    ReadOnly,
    /// Deadlock, serialization failure, lock timeout: passes by itself.
    Conflict,
    /// Anything else refused that is not about the data.
    Other,
}

impl OutageKind {
    pub const ALL: [OutageKind; 6] = [
        OutageKind::Connection,
        OutageKind::Schema,
        OutageKind::Permission,
        OutageKind::ReadOnly,
        OutageKind::Conflict,
        OutageKind::Other,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            OutageKind::Connection => "connection",
            OutageKind::Schema => "schema",
            OutageKind::Permission => "permission",
            OutageKind::ReadOnly => "read_only",
            OutageKind::Conflict => "conflict",
            OutageKind::Other => "other",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            OutageKind::Connection => "unreachable",
            OutageKind::Schema => "schema does not fit the statement",
            OutageKind::Permission => "permission denied",
            OutageKind::ReadOnly => "read-only",
            OutageKind::Conflict => "lock conflict",
            OutageKind::Other => "refused the statement",
        }
    }
}

/// A database error, classified once per dialect (from the server's error code): either an
/// outage of the store — not the row's or entry's fault, nothing may be poisoned or counted
/// against it (invariants 6 and 10) — or a refusal of this data.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database {} during {statement}", kind.describe())]
    Unavailable {
        statement: &'static str,
        kind: OutageKind,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A constraint or data exception: the same data fails the same way every time.
    #[error("the database refused the data in {statement}")]
    Rejected {
        statement: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("claim returned a row that breaks the column contract: {0}")]
    Contract(String),
}

impl StoreError {
    /// A store without a locked claim was asked for one (configuration refuses that before).
    pub fn no_locked_claim() -> Self {
        StoreError::Contract("this store has no locked claim (claim = \"locked\")".into())
    }

    /// Whether the error is about the data the statement carried (only then may a row go DEAD
    /// or an entry to poison because of it).
    pub fn is_data_fault(&self) -> bool {
        matches!(self, StoreError::Rejected { .. })
    }

    /// Whether the database could not be reached at all (as opposed to a statement it refused).
    pub fn is_connection(&self) -> bool {
        matches!(self, StoreError::Unavailable { kind: OutageKind::Connection, .. })
    }

    /// The server's error code: the SQLSTATE on Postgres (`23503`), the error number on MySQL
    /// (`1452`); `None` for a client-side failure.
    pub fn code(&self) -> Option<String> {
        let source = match self {
            StoreError::Unavailable { source, .. } | StoreError::Rejected { source, .. } => source,
            StoreError::Contract(_) => return None,
        };
        if let Some(pg) = source.downcast_ref::<tokio_postgres::Error>() {
            return pg.code().map(|c| c.code().to_owned());
        }
        match source.downcast_ref::<mysql_async::Error>() {
            Some(mysql_async::Error::Server(server)) => Some(server.code.to_string()),
            _ => None,
        }
    }

    /// The statement that failed (a fixed name: a metric label).
    pub fn statement(&self) -> &'static str {
        match self {
            StoreError::Unavailable { statement, .. } | StoreError::Rejected { statement, .. } => statement,
            StoreError::Contract(_) => "contract",
        }
    }

    /// Every value of [`kind_label`](Self::kind_label).
    pub const KIND_LABELS: [&'static str; 8] =
        ["connection", "schema", "permission", "read_only", "conflict", "other", "data", "contract"];

    /// What kind of failure this is, as a metric label: an outage kind, `data` or `contract`.
    pub fn kind_label(&self) -> &'static str {
        match self {
            StoreError::Unavailable { kind, .. } => kind.label(),
            StoreError::Rejected { .. } => "data",
            StoreError::Contract(_) => "contract",
        }
    }

    /// Whether the failure passes by itself (the server comes back, a lock conflict clears),
    /// as opposed to a statement or row the database refuses until someone changes one: only
    /// the latter is worth an alert of its own when it repeats.
    pub fn passes_by_itself(&self) -> bool {
        matches!(self, StoreError::Unavailable { kind: OutageKind::Connection | OutageKind::Conflict, .. })
    }

    /// The outage's kind, for metrics; `None` for a data fault.
    pub fn outage_kind(&self) -> Option<OutageKind> {
        match self {
            StoreError::Unavailable { kind, .. } => Some(*kind),
            StoreError::Contract(_) => Some(OutageKind::Other),
            StoreError::Rejected { .. } => None,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Why statements could not be prepared.
#[derive(Debug)]
pub enum PrepareError {
    /// The database did not answer; worth retrying.
    Unreachable(String),
    /// Statements or their results break the contract; every problem, each naming its statement.
    Invalid(Vec<String>),
}

impl std::fmt::Display for PrepareError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrepareError::Unreachable(e) => f.write_str(e),
            PrepareError::Invalid(errors) => f.write_str(&errors.join("\n")),
        }
    }
}

impl std::error::Error for PrepareError {}

/// The statements a relay runs against its outbox. Settles return how many rows they changed;
/// fewer than given means the fence refused the rest (another claimant owns them now).
/// A batch whose rows an open transaction has locked (`claim = "locked"`): the row locks are the
/// lease and the connection is the fence. Dropped without [`commit`](LockedBatch::commit), the
/// connection is closed, the server rolls the transaction back, and the rows are as they were.
pub trait LockedBatch: Send {
    /// Settles in the transaction and commits: `delivered` rows are marked (or deleted, per the
    /// relay's settle mode), `failed` ones retried or DEAD, `deferred` ones due again only after
    /// their delay (their part of the broker is down); every other row stays as it was.
    fn commit<'a>(
        self: Box<Self>,
        claimant: &'a str,
        delivered: &'a [Delivered],
        failed: &'a [Failure],
        deferred: &'a Deferred,
    ) -> std::pin::Pin<Box<dyn Future<Output = StoreResult<()>> + Send + 'a>>;
}

/// What a locked claim found: the rows, and the transaction holding them (`None` when there were
/// none; the transaction is over then).
pub type Locked = (Vec<ClaimedRow>, Option<Box<dyn LockedBatch>>);

pub use outbox::DeliveredPages;

pub trait OutboxStore: Send + Sync + 'static {
    /// Names of the claim statement's result columns.
    fn columns(&self) -> Arc<[String]>;

    /// Locks up to `batch_size` due rows in a transaction that the server ends if it sits idle
    /// longer than `idle_timeout` (a relay hung mid-batch). Only stores that support
    /// `claim = "locked"` implement it; configuration refuses the others.
    fn lock(&self, batch_size: u32, idle_timeout: Duration) -> impl Future<Output = StoreResult<Locked>> + Send {
        let _ = (batch_size, idle_timeout);
        async { Err(StoreError::no_locked_claim()) }
    }

    fn claim(
        &self,
        claimant: &str,
        batch_size: u32,
        lease: Duration,
    ) -> impl Future<Output = StoreResult<Vec<ClaimedRow>>> + Send;

    /// Marks delivered (or deletes, per the relay's settle mode).
    fn settle_delivered(&self, claimant: &str, rows: &[Delivered]) -> impl Future<Output = StoreResult<u64>> + Send;

    fn settle_failed(&self, claimant: &str, failures: &[Failure]) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Hands rows back untouched, due again after `delay` (zero: at once).
    fn release(
        &self,
        claimant: &str,
        rows: &[RowRef],
        delay: Duration,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    fn renew(&self, claimant: &str, rows: &[RowRef], lease: Duration) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Samples the gauges; `None` when no stats statement is configured.
    fn stats(&self) -> impl Future<Output = StoreResult<Option<OutboxStats>>> + Send;

    /// Retention: deletes up to `batch` delivered rows older than `age`; returns how many.
    fn purge(&self, age: Duration, batch: u32) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Rows delivered within `age`, with their streams and entry ids, in pages of `page` rows
    /// sent as they are read (the reader holds its connection until the last page, so memory
    /// stays at a few pages whatever the window); `None` when the store has no such statement
    /// (rows deleted on settle, or an adopted table without one).
    fn delivered_since(
        &self,
        age: Duration,
        page: usize,
    ) -> impl Future<Output = StoreResult<Option<DeliveredPages>>> + Send;

    /// Moves delivered rows back to PENDING (their entries were lost by the broker), each only
    /// while it still points at that entry; returns how many moved.
    fn redrive(&self, rows: &[DeliveredRow]) -> impl Future<Output = StoreResult<u64>> + Send;
}
