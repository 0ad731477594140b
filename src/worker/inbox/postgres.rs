//! The worker's state machine on a Postgres inbox. Every transition is fenced by lease owner +
//! token; the handler's statements and the mark to PROCESSED share one transaction. A batch is
//! first applied pipelined (one set-based mark, every handler statement sent at once); only a
//! batch in which a row's data is refused, or the fence refuses a row, is applied again with a
//! savepoint per row. The statements are the reference schema's, or `[worker.sql]`'s.

use std::collections::HashMap;
use std::time::Duration;

use deadpool_postgres::Pool;

use super::apply::{RowTransaction, apply_row_by_row, commit_failed};
use super::bindings as binding;
use super::contract::{WorkerStatement, missing_result_columns};
use super::postgres_handlers::{run_handlers, text_rows, to_param};
use super::postgres_locked::LockedRows;
use super::postgres_locked::{self, LockedInboxSql};
use super::rows::{Applied, ApplyError, BoundStatement, InboxCounts, InboxRow};
use super::statements::statement_texts;
use crate::fault::{Faults, Point};
use crate::runtime::loop_config::ClaimMode;
use crate::sql::params::{self, NamedSql, Placeholder};
use crate::store::error::{PrepareError, StatementError, StoreError, StoreResult};
use crate::store::postgres::errors::{pool_error, prepare_refusal, query_error};
use crate::store::postgres::values::{Param, param_type_supported, refs, type_problems};
use crate::store::rows::TextRow;
use crate::worker::config::HandlerErrors;
use crate::worker::config::WorkerConfig;

pub struct PgInbox {
    pool: Pool,
    consumer: String,
    /// `worker `<name>``, for messages.
    label: String,
    faults: Faults,
    statements: HashMap<WorkerStatement, NamedSql>,
    /// With `claim = "locked"`: the locked claim's statements.
    locked: Option<LockedInboxSql>,
    /// What a handler statement's error means (`[worker.handler_errors]`).
    errors: HandlerErrors,
}

/// The reference schema's statement for `statement` on table `t`.
fn reference(statement: WorkerStatement, t: &str) -> String {
    let text = match statement {
        // At most one lease-expired row, alone, as in the relay's claim: a row that kills its
        // worker reaches DEAD by itself without dragging its batch along.
        WorkerStatement::Claim => {
            "WITH expired AS (
                 SELECT id FROM {t} WHERE consumer = :consumer AND status = 'PROCESSING' AND lease_expires_at <= now()
                 ORDER BY lease_expires_at LIMIT 1 FOR UPDATE SKIP LOCKED
             ), due AS (
                 SELECT id FROM {t} WHERE consumer = :consumer AND status = 'PENDING' AND next_retry_at <= now()
                   AND NOT EXISTS (SELECT 1 FROM expired)
                 ORDER BY next_retry_at, id LIMIT :batch_size FOR UPDATE SKIP LOCKED
             ), picked AS (
                 SELECT id, true AS reclaimed FROM expired UNION ALL SELECT id, false FROM due
             )
             UPDATE {t} i SET status = 'PROCESSING', lease_owner = :claimant, lease_token = i.lease_token + 1,
                 lease_expires_at = now() + :lease_ms::bigint * interval '1 millisecond', claimed_at = now(),
                 expired_leases = i.expired_leases + CASE WHEN i.status = 'PROCESSING' THEN 1 ELSE 0 END
             FROM picked WHERE i.id = picked.id
             RETURNING i.id, i.lease_token AS token, i.event_id, i.event_type, i.owner, i.aggregate_type,
                       i.aggregate_id, i.payload, i.headers, i.fields, i.attempts, i.expired_leases, picked.reclaimed"
        }
        WorkerStatement::Processed => {
            "UPDATE {t} i SET status = 'PROCESSED', processed_at = now(), lease_expires_at = NULL, last_error = NULL
             FROM unnest(:ids::bigint[], :tokens::bigint[]) AS s(id, token)
             WHERE i.id = s.id AND i.lease_token = s.token AND i.lease_owner = :claimant AND i.status = 'PROCESSING'"
        }
        WorkerStatement::Retry => {
            "UPDATE {t} SET status = 'PENDING', attempts = attempts + 1, last_error = :error, failed_at = now(),
                 next_retry_at = now() + :delay_ms::bigint * interval '1 millisecond', lease_expires_at = NULL
             WHERE id = :id AND lease_owner = :claimant AND lease_token = :token AND status = 'PROCESSING'"
        }
        WorkerStatement::Dead => {
            "UPDATE {t} SET status = 'DEAD', attempts = attempts + 1, last_error = :error, failed_at = now(),
                 dead_at = now(), lease_expires_at = NULL
             WHERE id = :id AND lease_owner = :claimant AND lease_token = :token AND status = 'PROCESSING'"
        }
        // Rows our own batch transaction has locked are skipped, not waited for: that
        // transaction is about to settle them, and waiting on it deadlocks with it.
        WorkerStatement::Renew => {
            "UPDATE {t} w SET lease_expires_at = now() + :lease_ms::bigint * interval '1 millisecond'
             FROM (SELECT i.id FROM {t} i JOIN unnest(:ids::bigint[], :tokens::bigint[]) AS s(id, token) ON i.id = s.id
                   WHERE i.lease_token = s.token AND i.lease_owner = :claimant AND i.status = 'PROCESSING'
                   FOR UPDATE OF i SKIP LOCKED) AS l
             WHERE w.id = l.id"
        }
        WorkerStatement::Release => {
            "UPDATE {t} i SET status = 'PENDING', lease_expires_at = NULL
             FROM unnest(:ids::bigint[], :tokens::bigint[]) AS s(id, token)
             WHERE i.id = s.id AND i.lease_token = s.token AND i.lease_owner = :claimant AND i.status = 'PROCESSING'"
        }
        WorkerStatement::Stats => {
            "SELECT (SELECT count(*) FROM {t} WHERE consumer = :consumer AND status = 'DEAD') AS dead,
                    (SELECT count(*) FROM {t} WHERE consumer = :consumer AND status = 'PENDING') AS pending,
                    coalesce((SELECT extract(epoch FROM now() - min(claimed_at)) FROM {t}
                              WHERE consumer = :consumer AND status = 'PROCESSING'), 0)::float8
                        AS oldest_lease_age_seconds,
                    coalesce((SELECT extract(epoch FROM now() - min(failed_at)) FROM {t}
                              WHERE consumer = :consumer AND status = 'PENDING' AND attempts > 0), 0)::float8
                        AS oldest_retry_age_seconds"
        }
        // Oldest first on the processed_at partial index, in bounded batches; IGNORED rows by age of receipt.
        WorkerStatement::Purge => {
            "WITH old AS (
                 SELECT id FROM {t} WHERE consumer = :consumer AND status = 'PROCESSED'
                   AND processed_at < now() - :age_ms::bigint * interval '1 millisecond'
                 ORDER BY processed_at LIMIT :batch_size FOR UPDATE SKIP LOCKED
             ), ignored AS (
                 SELECT id FROM {t} WHERE consumer = :consumer AND status = 'IGNORED'
                   AND received_at < now() - :age_ms::bigint * interval '1 millisecond'
                 LIMIT :batch_size FOR UPDATE SKIP LOCKED
             )
             DELETE FROM {t} i USING (SELECT id FROM old UNION ALL SELECT id FROM ignored) d WHERE i.id = d.id"
        }
    };
    text.replace("{t}", t)
}

impl PgInbox {
    /// The worker's statements: its `[worker.sql]` overrides, the reference schema's otherwise.
    pub(crate) fn new(pool: Pool, worker: &WorkerConfig, faults: Faults) -> Result<Self, StatementError> {
        let mut statements = HashMap::new();
        for (statement, text) in
            statement_texts(&worker.sql, worker.retention.is_some(), |s| reference(s, &worker.table))
        {
            let named = params::rewrite(&text, Placeholder::Numbered)
                .map_err(|e| StatementError::new(format!("worker `{}` sql.{}", worker.name, statement.name()), e))?;
            statements.insert(statement, named);
        }
        let label = format!("worker `{}`", worker.name);
        let errors = worker.handler_errors.clone();
        let locked =
            (worker.claim_loop.claim == ClaimMode::Locked).then(|| LockedInboxSql::new(&worker.table, errors.clone()));
        Ok(Self { pool, consumer: worker.consumer.clone(), label, faults, statements, locked, errors })
    }

    fn values(&self, statement: WorkerStatement, bind: impl Fn(&str) -> Param) -> StoreResult<(&NamedSql, Vec<Param>)> {
        let named = self.statements.get(&statement).ok_or_else(|| missing(statement))?;
        Ok((named, named.names.iter().map(|n| bind(n)).collect()))
    }

    /// The fast path: one transaction marks the batch PROCESSED (fenced, set-based) and runs the
    /// handler statements, all sent at once — tokio-postgres pipelines queries polled together
    /// on one connection — so a batch costs a few round trips instead of four per row. `None`
    /// when the fence refused a row or a handler statement refused a row's data: the
    /// transaction is rolled back and the caller isolates the row with a savepoint per row.
    async fn apply_pipelined(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> StoreResult<Option<Vec<Result<Applied, ApplyError>>>> {
        self.faults.reach(Point::WorkerInHandler).await;
        let mut client = self.pool.get().await.map_err(|e| pool_error("apply", e))?;
        let tx = client.transaction().await.map_err(|e| query_error("apply", e))?;
        let held: Vec<(String, i64)> = items.iter().map(|(r, _)| r.held()).collect();
        let (named, values) =
            self.values(WorkerStatement::Processed, binding::held(owner, &held, Default::default()))?;
        let mark = tx.prepare_cached(&named.sql).await.map_err(|e| query_error("mark processed", e))?;
        let marked = tx.execute(&mark, &refs(&values)).await.map_err(|e| query_error("mark processed", e))?;
        // The row locks the mark took keep every marked row ours until the commit; a row it
        // did not mark belongs to another worker now: find it row by row.
        if marked != items.len() as u64 {
            return Ok(None);
        }
        if run_handlers(&tx, items, std::future::ready(()), &self.errors).await?.is_none() {
            return Ok(None);
        }
        match tx.commit().await {
            Ok(()) => Ok(Some(items.iter().map(|_| Ok(Applied::Processed)).collect())),
            // A deferred constraint may refuse one row's data at commit: isolate it.
            Err(e) => match commit_failed(items.len(), query_error("handler", e), &self.errors) {
                Ok(results) => Ok(Some(results)),
                Err(e) if e.is_about_the_data() => Ok(None),
                Err(e) => Err(e),
            },
        }
    }
}

/// A statement this worker was built without (`purge` without retention).
fn missing(statement: WorkerStatement) -> StoreError {
    StoreError::Contract(format!("the worker has no {} statement", statement.name()))
}

/// A batch's transaction on Postgres, for applying it row by row.
struct PgRows<'a> {
    tx: deadpool_postgres::Transaction<'a>,
    worker: &'a PgInbox,
}

impl RowTransaction for PgRows<'_> {
    async fn savepoint(&mut self, sql: &'static str) -> StoreResult<()> {
        self.tx.batch_execute(sql).await.map_err(|e| query_error("apply", e))
    }

    async fn execute(&mut self, statement: &BoundStatement<'_>) -> StoreResult<u64> {
        let handler = |e| query_error("handler", e);
        let stmt = self.tx.prepare_cached(statement.sql).await.map_err(handler)?;
        let values: Vec<Param> = statement.values.iter().map(to_param).collect();
        self.tx.execute(&stmt, &refs(&values)).await.map_err(handler)
    }

    async fn mark_processed(&mut self, owner: &str, row: &InboxRow) -> StoreResult<u64> {
        let held = [row.held()];
        let (named, values) =
            self.worker.values(WorkerStatement::Processed, binding::held(owner, &held, Default::default()))?;
        let mark = |e| query_error("mark processed", e);
        // Cached: this runs once per row, and an unprepared statement costs a second round trip.
        let processed = self.tx.prepare_cached(&named.sql).await.map_err(mark)?;
        self.tx.execute(&processed, &refs(&values)).await.map_err(mark)
    }

    fn handler_errors(&self) -> &HandlerErrors {
        &self.worker.errors
    }

    fn faults(&self) -> &Faults {
        &self.worker.faults
    }

    async fn commit(self) -> StoreResult<()> {
        self.tx.commit().await.map_err(|e| query_error("handler", e))
    }
}

impl PgInbox {
    pub(super) fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Prepares the worker's own statements and each handler statement: parameter and column
    /// types, the claim's and the stats' result columns; every problem, each naming its statement.
    pub(super) async fn check(&self, handler_sql: &[(String, String)]) -> Result<(), PrepareError> {
        let client = self
            .pool
            .get()
            .await
            .map_err(|e| PrepareError::Unreachable(format!("cannot connect to the database: {e}")))?;
        let mut errors = Vec::new();
        for statement in WorkerStatement::ALL {
            let Some(named) = self.statements.get(&statement) else { continue };
            let context = format!("{} sql.{}", self.label, statement.name());
            let stmt = match client.prepare(&named.sql).await {
                Ok(stmt) => stmt,
                Err(e) => {
                    errors.push(prepare_refusal(&context, e)?);
                    continue;
                }
            };
            errors.extend(type_problems(&context, &named.names, &stmt, true));
            let names: Vec<&str> = stmt.columns().iter().map(|c| c.name()).collect();
            errors.extend(missing_result_columns(statement, &names).map(|m| format!("{context}: {m}")));
        }
        for (name, sql) in self.locked.iter().flat_map(LockedInboxSql::statements) {
            if let Err(e) = client.prepare(sql).await {
                errors.push(prepare_refusal(&format!("{} (claim = \"locked\") {name}", self.label), e)?);
            }
        }
        for (context, sql) in handler_sql {
            match client.prepare(sql).await {
                Err(e) => errors.push(prepare_refusal(context, e)?),
                Ok(stmt) => {
                    for ty in stmt.params() {
                        if !param_type_supported(ty) {
                            errors.push(format!(
                                "{context}: a parameter has type {ty}; cast it via text, e.g. :payload.x::text::{ty}"
                            ));
                        }
                    }
                }
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(PrepareError::Invalid(errors)) }
    }

    pub(super) async fn run(
        &self,
        statement: WorkerStatement,
        bind: impl Fn(&str) -> Param + Send + Sync,
    ) -> StoreResult<(Vec<TextRow>, u64)> {
        let label = statement.name();
        let (named, values) = self.values(statement, bind)?;
        let client = self.pool.get().await.map_err(|e| pool_error(label, e))?;
        let stmt = client.prepare_cached(&named.sql).await.map_err(|e| query_error(label, e))?;
        if stmt.columns().is_empty() {
            let changed = client.execute(&stmt, &refs(&values)).await.map_err(|e| query_error(label, e))?;
            return Ok((Vec::new(), changed));
        }
        let rows = client.query(&stmt, &refs(&values)).await.map_err(|e| query_error(label, e))?;
        let texts = text_rows(&stmt, &rows, label)?;
        let changed = texts.len() as u64;
        Ok((texts, changed))
    }

    pub(super) async fn apply_batch(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> StoreResult<Vec<Result<Applied, ApplyError>>> {
        if let Some(results) = self.apply_pipelined(owner, items).await? {
            return Ok(results);
        }
        let mut client = self.pool.get().await.map_err(|e| pool_error("apply", e))?;
        let tx = client.transaction().await.map_err(|e| query_error("apply", e))?;
        apply_row_by_row(PgRows { tx, worker: self }, owner, items).await
    }

    pub(super) async fn lock(&self, batch_size: u32, lease: Duration) -> StoreResult<LockedRows> {
        let Some(sql) = &self.locked else {
            return Err(StoreError::Contract(format!("{} is not configured for the locked claim", self.label)));
        };
        postgres_locked::lock(&self.pool, sql, &self.consumer, batch_size, lease, &self.faults).await
    }
}

/// `consumer`'s rows of `table`: pending, processing, DEAD, and the age of the oldest not yet done.
pub(crate) async fn counts(pool: &Pool, table: &str, consumer: &str) -> StoreResult<InboxCounts> {
    let sql = format!(
                "SELECT count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER (WHERE status = 'PROCESSING'),
                        count(*) FILTER (WHERE status = 'DEAD'),
                        coalesce(extract(epoch FROM now() - min(received_at) FILTER (WHERE status IN ('PENDING', 'PROCESSING'))), 0)::float8
                 FROM {table} WHERE consumer = $1 AND status IN ('PENDING', 'PROCESSING', 'DEAD')"
            );
    let label = "count inbox rows";
    let client = pool.get().await.map_err(|e| pool_error(label, e))?;
    let r = client.query_one(&sql, &[&consumer]).await.map_err(|e| query_error(label, e))?;
    Ok(InboxCounts { pending: r.get(0), processing: r.get(1), dead: r.get(2), oldest_age_seconds: r.get(3) })
}
