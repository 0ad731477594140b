//! The worker's seam: the inbox rows it claims, how a batch is applied, and the statements a
//! dialect implements for it. The decisions above the SQL (what a claim row means, which
//! savepoint to keep, what a failed commit means) are here once, for every dialect; a dialect
//! ([`WorkerSql`]) runs the named statements of `[worker.sql]` and applies batches.

use std::future::Future;
use std::time::Duration;

use super::bindings::{Param, millis};
use super::outbox::TextRow;
use super::{StoreError, StoreResult};
use crate::config::consumer_sql::{CLAIM_COLUMNS, OPTIONAL_CLAIM_COLUMNS, WorkerStatement};
use crate::config::{HandlerErrors, HandlerVerdict};

/// A claimed inbox row for the worker.
#[derive(Debug, Clone)]
pub struct InboxRow {
    /// The row's id as text, whatever its type (passed back as `:id` / `:ids`).
    pub id: String,
    pub token: i64,
    pub event_id: String,
    pub event_type: String,
    pub owner: Option<String>,
    pub aggregate_type: Option<String>,
    pub aggregate_id: Option<String>,
    pub payload: serde_json::Value,
    pub headers: serde_json::Value,
    /// The entry's fields beyond the mapped ones (`:fields.<name>`): the `fields` column's keys
    /// and every claim column outside the contract.
    pub fields: serde_json::Map<String, serde_json::Value>,
    pub attempts: u32,
    pub expired_leases: u32,
    pub reclaimed: bool,
}

impl InboxRow {
    /// A claim result row, read by column name (the claim's result contract).
    pub fn from_text(row: &TextRow) -> StoreResult<Self> {
        let get = |name: &str| row.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.clone());
        let required = |name: &str| {
            get(name).ok_or_else(|| StoreError::Contract(format!("worker sql.claim returned NULL or no {name}")))
        };
        let int = |name: &str| -> StoreResult<i64> {
            let text = required(name)?;
            text.trim().parse::<i64>().map_err(|_| {
                StoreError::Contract(format!("worker sql.claim: column {name} is `{text}`, not an integer"))
            })
        };
        let count = |name: &str| int(name).map(|n| n.clamp(0, i64::from(u32::MAX)) as u32);
        // A payload that is not JSON is kept as a string: a handler that reads a field of it
        // finds none, and the row goes DEAD by itself instead of stopping the claim.
        let json =
            |text: Option<String>| text.map(|t| serde_json::from_str(&t).unwrap_or(serde_json::Value::String(t)));
        let mut fields = match json(get("fields")) {
            Some(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        for (name, value) in row {
            if !CLAIM_COLUMNS.contains(&name.as_str()) && !OPTIONAL_CLAIM_COLUMNS.contains(&name.as_str()) {
                fields.insert(name.clone(), value.clone().map_or(serde_json::Value::Null, serde_json::Value::String));
            }
        }
        Ok(Self {
            id: required("id")?,
            token: int("token")?,
            event_id: required("event_id")?,
            event_type: required("event_type")?,
            owner: get("owner"),
            aggregate_type: get("aggregate_type"),
            aggregate_id: get("aggregate_id"),
            payload: json(get("payload")).unwrap_or(serde_json::Value::Null),
            headers: json(get("headers")).filter(serde_json::Value::is_object).unwrap_or_else(|| serde_json::json!({})),
            fields,
            attempts: count("attempts")?,
            expired_leases: count("expired_leases")?,
            reclaimed: get("reclaimed").is_some_and(|v| matches!(v.as_str(), "true" | "t" | "1")),
        })
    }

    /// The row as (id, token), the way renew and release take it.
    pub fn held(&self) -> (String, i64) {
        (self.id.clone(), self.token)
    }
}

/// What each named parameter of the worker's statements is bound to.
pub mod binding {
    use super::*;

    pub fn claim<'a>(
        consumer: &'a str,
        claimant: &'a str,
        batch_size: u32,
        lease: Duration,
    ) -> impl Fn(&str) -> Param + 'a {
        move |name| match name {
            "consumer" => Param::Text(consumer.to_owned()),
            "claimant" => Param::Text(claimant.to_owned()),
            "batch_size" => Param::Int(batch_size.into()),
            "ids" => Param::Texts(Vec::new()),
            _ => Param::Int(millis(lease)),
        }
    }

    /// `processed`, `renew`, `release`: the rows with their fencing tokens (and the new lease).
    pub fn held<'a>(claimant: &'a str, rows: &[(String, i64)], lease: Duration) -> impl Fn(&str) -> Param + 'a {
        let (ids, tokens): (Vec<String>, Vec<i64>) = rows.iter().cloned().unzip();
        move |name| match name {
            "claimant" => Param::Text(claimant.to_owned()),
            "ids" => Param::Texts(ids.clone()),
            "tokens" => Param::Ints(tokens.clone()),
            _ => Param::Int(millis(lease)),
        }
    }

    /// `retry` / `dead` for one row.
    pub fn failure<'a>(
        claimant: &'a str,
        row: &'a InboxRow,
        error: &'a str,
        delay: Duration,
    ) -> impl Fn(&str) -> Param + 'a {
        move |name| match name {
            "claimant" => Param::Text(claimant.to_owned()),
            "id" => Param::Text(row.id.clone()),
            "token" => Param::Int(row.token),
            "error" => Param::Text(error.to_owned()),
            _ => Param::Int(millis(delay)),
        }
    }

    /// `stats` and `purge`.
    pub fn consumer<'a>(consumer: &'a str, age: Duration, batch_size: u32) -> impl Fn(&str) -> Param + 'a {
        move |name| match name {
            "consumer" => Param::Text(consumer.to_owned()),
            "batch_size" => Param::Int(batch_size.into()),
            _ => Param::Int(millis(age)),
        }
    }
}

/// Sampled worker gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct InboxStats {
    pub dead: i64,
    pub pending: i64,
    /// Seconds the oldest PROCESSING lease has been held; 0 if none.
    pub oldest_lease_age: f64,
    /// Seconds the oldest row waiting after a failure has waited since it failed; 0 if none.
    pub oldest_retry_age: f64,
}

/// A value bound to a handler statement's parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum BindValue {
    Null,
    Text(String),
    /// JSON text, for json / jsonb parameters (and as text elsewhere).
    Json(String),
}

/// A handler statement with its values for one row.
#[derive(Debug, Clone)]
pub struct BoundStatement<'a> {
    /// Index of the statement in the handler's list (for error messages).
    pub index: usize,
    pub sql: &'a str,
    pub values: Vec<BindValue>,
}

/// What became of an attempt to apply a row's effect.
#[derive(Debug)]
pub enum Applied {
    /// Effect and PROCESSED committed together.
    Processed,
    /// Another worker owns the row now: the effect was rolled back.
    Fenced,
}

/// Why applying failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A handler statement failed for this row: `retry` (a foreign key whose parent has not
    /// arrived, a deadlock: an attempt, then again after the backoff) or not (the row's data
    /// can never be applied: DEAD at once), as `[worker.handler_errors]` and the dialect judge.
    /// Any other failure is an outage of the store.
    #[error("handler statement {index} failed for this row: {message}")]
    Handler { index: usize, message: String, retry: bool },
    #[error(transparent)]
    Store(#[from] super::StoreError),
}

impl ApplyError {
    /// A handler statement's error: `errors` names codes to retry or to make DEAD; for the
    /// rest, the dialect's judgement (a refusal of the data: DEAD; anything else: an outage).
    pub fn from_handler(index: usize, error: super::StoreError, errors: &HandlerErrors) -> Self {
        let verdict = error.code().and_then(|code| errors.verdict(&code));
        let handler =
            |e: &super::StoreError, retry| ApplyError::Handler { index, message: crate::error::error_chain(e), retry };
        match (verdict, error) {
            (Some(verdict), e) => handler(&e, verdict == HandlerVerdict::Retry),
            (None, e @ super::StoreError::Rejected { .. }) => handler(&e, false),
            (None, e) => ApplyError::Store(e),
        }
    }
}

/// A dialect's open transaction for applying a batch row by row.
pub trait RowTransaction: Send {
    /// Runs a savepoint statement (`SAVEPOINT`, `RELEASE SAVEPOINT`, `ROLLBACK TO SAVEPOINT`).
    fn savepoint(&mut self, sql: &'static str) -> impl Future<Output = super::StoreResult<()>> + Send;

    /// A row's statements, then its fenced mark to PROCESSED.
    fn apply(
        &mut self,
        owner: &str,
        row: &InboxRow,
        statements: &[BoundStatement<'_>],
    ) -> impl Future<Output = Result<Applied, ApplyError>> + Send;

    fn commit(self) -> impl Future<Output = super::StoreResult<()>> + Send;

    /// What the worker's handler errors mean (`[worker.handler_errors]`).
    fn handler_errors(&self) -> &HandlerErrors;
}

/// Applies `items` in `tx`, each row in its own savepoint, for every dialect: a row whose data
/// is refused or whose fence refuses is rolled back alone, the others commit together; an
/// outage fails the whole batch (nothing committed).
pub async fn apply_row_by_row<T: RowTransaction>(
    mut tx: T,
    owner: &str,
    items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
) -> super::StoreResult<Vec<Result<Applied, ApplyError>>> {
    let mut results = Vec::with_capacity(items.len());
    for (row, statements) in items {
        tx.savepoint("SAVEPOINT handoff_row").await?;
        let outcome = match tx.apply(owner, row, statements).await {
            Err(ApplyError::Store(e)) => return Err(e),
            other => other,
        };
        let end =
            if keep_row(&outcome) { "RELEASE SAVEPOINT handoff_row" } else { "ROLLBACK TO SAVEPOINT handoff_row" };
        tx.savepoint(end).await?;
        results.push(outcome);
    }
    let errors = tx.handler_errors().clone();
    match tx.commit().await {
        Ok(()) => Ok(results),
        Err(e) => commit_failed(items.len(), e, &errors),
    }
}

/// Whether a row's savepoint is kept (its effect and PROCESSED commit with the batch) or rolled
/// back (the fence refused, or a handler statement refused the row's data: undo this row only).
/// An outage never gets here: it fails the whole batch.
fn keep_row(outcome: &Result<Applied, ApplyError>) -> bool {
    matches!(outcome, Ok(Applied::Processed))
}

/// What a failed commit of a handler batch means, for every dialect: with one row, that row's
/// data (a deferred constraint, say), so it goes DEAD; with several the batch fails as a refusal
/// and the worker retries the rows one by one to find it; anything else is an outage.
pub fn commit_failed(
    rows: usize,
    error: super::StoreError,
    errors: &HandlerErrors,
) -> super::StoreResult<Vec<Result<Applied, ApplyError>>> {
    match ApplyError::from_handler(usize::MAX, error, errors) {
        handler @ ApplyError::Handler { .. } if rows == 1 => Ok(vec![Err(handler)]),
        ApplyError::Handler { message, .. } => {
            Err(super::StoreError::Rejected { statement: "commit", source: message.into() })
        }
        ApplyError::Store(e) => Err(e),
    }
}

/// A batch locked by an open transaction (`claim = "locked"`): the row locks are the lease and
/// the connection is the fence. Dropped without [`apply`](LockedInbox::apply), the connection is
/// closed, the server rolls the transaction back, and the rows are as they were.
pub trait LockedInbox: Send {
    /// Runs every row's statements, marks every row PROCESSED and commits: `Ok(true)`. When a
    /// handler statement (or the commit) refuses a row's data, the transaction is rolled back and
    /// nothing changed: `Ok(false)`, and the worker takes the rows again under a lease, where a
    /// savepoint per row finds the row at fault. `Err`: an outage; nothing committed.
    fn apply<'a>(
        self: Box<Self>,
        owner: &'a str,
        items: &'a [(&'a InboxRow, Vec<BoundStatement<'a>>)],
    ) -> std::pin::Pin<Box<dyn Future<Output = StoreResult<bool>> + Send + 'a>>;
}

/// The rows of a locked batch and its open transaction (`None` when no row was due: nothing held).
pub type LockedRows = (Vec<InboxRow>, Option<Box<dyn LockedInbox>>);

/// What a dialect provides: the worker's named statements, run with their bindings, and the
/// batch transaction.
pub trait WorkerSql: Send + Sync + 'static {
    /// Whose inbox rows (`:consumer`).
    fn consumer(&self) -> &str;

    /// Prepares the store's statements and the handlers' (`(label, sql)`), naming what fails.
    fn check(&self, handler_sql: &[(String, String)]) -> impl Future<Output = Result<(), super::PrepareError>> + Send;

    /// Runs `statement` (on MySQL a claim or renew may be a script): the rows its last
    /// statement returned, as text, and the rows it changed.
    fn run(
        &self,
        statement: WorkerStatement,
        bind: impl Fn(&str) -> Param + Send + Sync,
    ) -> impl Future<Output = StoreResult<(Vec<TextRow>, u64)>> + Send;

    /// See [`WorkerStore::apply_batch`].
    fn apply_batch(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> impl Future<Output = StoreResult<Vec<Result<Applied, ApplyError>>>> + Send;

    /// See [`WorkerStore::lock`]. Only Postgres with the reference statements has it; the
    /// configuration never asks another store for it.
    fn lock(&self, _batch_size: u32, _lease: Duration) -> impl Future<Output = StoreResult<LockedRows>> + Send {
        async { Err(StoreError::Contract("this inbox store has no locked claim".into())) }
    }
}

/// The worker's statements; every transition is fenced by lease owner + token.
pub trait WorkerStore: Send + Sync + 'static {
    /// Prepares the store's statements and the handlers' (`(label, sql)`), naming what fails.
    fn check(&self, handler_sql: &[(String, String)]) -> impl Future<Output = Result<(), super::PrepareError>> + Send;

    fn claim(
        &self,
        owner: &str,
        batch_size: u32,
        lease: Duration,
    ) -> impl Future<Output = StoreResult<Vec<InboxRow>>> + Send;

    /// In one transaction: each item's statements and its fenced mark to PROCESSED. An item
    /// whose statements refuse its data or whose fence refuses is not applied (rolled back to
    /// its savepoint); the others commit together (one commit for the batch). A dialect may
    /// first try the batch without savepoints and isolate rows only when one fails. `Err` when
    /// the transaction as a whole failed: nothing committed.
    fn apply_batch(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> impl Future<Output = StoreResult<Vec<Result<Applied, ApplyError>>>> + Send;

    /// Records a failure: back to PENDING after `retry_in`, or DEAD when `None`. False if fenced.
    fn fail(
        &self,
        owner: &str,
        row: &InboxRow,
        error: &str,
        retry_in: Option<Duration>,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    fn renew(
        &self,
        owner: &str,
        rows: &[(String, i64)],
        lease: Duration,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Hands rows (id, token) back to PENDING without counting an attempt (shutdown).
    fn release(&self, owner: &str, rows: &[(String, i64)]) -> impl Future<Output = StoreResult<u64>> + Send;

    /// `claim = "locked"`: locks up to `batch_size` PENDING due rows in a transaction the server
    /// ends if it sits idle longer than `lease`, and changes none of them.
    fn lock(&self, batch_size: u32, lease: Duration) -> impl Future<Output = StoreResult<LockedRows>> + Send;

    fn stats(&self) -> impl Future<Output = StoreResult<InboxStats>> + Send;

    /// Retention: deletes up to `batch` PROCESSED / IGNORED rows older than `age`; returns how many.
    fn purge(&self, age: Duration, batch: u32) -> impl Future<Output = StoreResult<u64>> + Send;
}

impl<S: WorkerSql> WorkerStore for S {
    async fn check(&self, handler_sql: &[(String, String)]) -> Result<(), super::PrepareError> {
        WorkerSql::check(self, handler_sql).await
    }

    async fn claim(&self, owner: &str, batch_size: u32, lease: Duration) -> StoreResult<Vec<InboxRow>> {
        let (rows, _) =
            self.run(WorkerStatement::Claim, binding::claim(self.consumer(), owner, batch_size, lease)).await?;
        rows.iter().map(InboxRow::from_text).collect()
    }

    async fn apply_batch(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> StoreResult<Vec<Result<Applied, ApplyError>>> {
        WorkerSql::apply_batch(self, owner, items).await
    }

    async fn fail(&self, owner: &str, row: &InboxRow, error: &str, retry_in: Option<Duration>) -> StoreResult<bool> {
        let (statement, delay) = match retry_in {
            Some(delay) => (WorkerStatement::Retry, delay),
            None => (WorkerStatement::Dead, Duration::ZERO),
        };
        let (_, changed) = self.run(statement, binding::failure(owner, row, error, delay)).await?;
        Ok(changed == 1)
    }

    async fn renew(&self, owner: &str, rows: &[(String, i64)], lease: Duration) -> StoreResult<u64> {
        Ok(self.run(WorkerStatement::Renew, binding::held(owner, rows, lease)).await?.1)
    }

    async fn release(&self, owner: &str, rows: &[(String, i64)]) -> StoreResult<u64> {
        Ok(self.run(WorkerStatement::Release, binding::held(owner, rows, Duration::ZERO)).await?.1)
    }

    async fn lock(&self, batch_size: u32, lease: Duration) -> StoreResult<LockedRows> {
        WorkerSql::lock(self, batch_size, lease).await
    }

    async fn stats(&self) -> StoreResult<InboxStats> {
        let (rows, _) = self.run(WorkerStatement::Stats, binding::consumer(self.consumer(), Duration::ZERO, 0)).await?;
        let row = rows.first().ok_or_else(|| StoreError::Contract("worker sql.stats returned no row".into()))?;
        let number = |name: &str| -> f64 {
            let value = row.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.as_deref());
            value.and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0)
        };
        Ok(InboxStats {
            dead: number("dead") as i64,
            pending: number("pending") as i64,
            oldest_lease_age: number("oldest_lease_age_seconds"),
            oldest_retry_age: number("oldest_retry_age_seconds"),
        })
    }

    async fn purge(&self, age: Duration, batch: u32) -> StoreResult<u64> {
        Ok(self.run(WorkerStatement::Purge, binding::consumer(self.consumer(), age, batch)).await?.1)
    }
}

/// What a claim or stats result lacks of the columns `statement` must return, as the message
/// to report; `None` when nothing is missing.
pub fn missing_result_columns(statement: WorkerStatement, names: &[&str]) -> Option<String> {
    let missing: Vec<&str> = statement.columns().iter().copied().filter(|c| !names.contains(c)).collect();
    (!missing.is_empty()).then(|| format!("result lacks required column(s): {}", missing.join(", ")))
}

/// The texts of the statements `worker` runs: each `[worker.sql]` override, else
/// `reference(statement)`; `purge` only with retention.
pub fn statement_texts(
    worker: &crate::config::WorkerConfig,
    reference: impl Fn(WorkerStatement) -> String,
) -> Vec<(WorkerStatement, String)> {
    WorkerStatement::ALL
        .iter()
        .filter(|s| **s != WorkerStatement::Purge || worker.retention.is_some())
        .map(|s| (*s, worker.sql.get(*s).map(str::to_owned).unwrap_or_else(|| reference(*s))))
        .collect()
}
