//! The worker's state machine on a MySQL / MariaDB inbox: a batch's effects commit together, a
//! savepoint per row. No `UPDATE … RETURNING` here, so the claim is a script run in one
//! transaction (lock, update, read back), and so is the renewal (lock what is not locked by the
//! batch's own transaction, then extend those): statements after the first see the ids the
//! statements before them returned as `:ids`. The statements are the reference schema's, or
//! `[worker.sql]`'s.

use std::collections::HashMap;

use mysql_async::prelude::Queryable;
use mysql_async::{Row, TxOpts, Value};

use super::apply::{RowTransaction, apply_row_by_row};
use super::bindings as binding;
use super::contract::{WorkerStatement, missing_result_columns};
use super::rows::{Applied, ApplyError, BindValue, BoundStatement, InboxCounts, InboxRow};
use super::statements::statement_texts;
use crate::fault::Faults;
use crate::sql::params::{self, NamedSql, Placeholder};
use crate::store::error::{PrepareError, StatementError, StatementProblem, StoreResult};
use crate::store::mysql::errors::{error, prepare_refusal};
use crate::store::mysql::pool::{Pool, claim_tx};
use crate::store::mysql::values::{Param, bind, row_columns, row_texts};
use crate::store::rows::TextRow;
use crate::worker::config::{HandlerErrors, WorkerConfig};

pub struct MyInbox {
    pool: Pool,
    consumer: String,
    /// `worker `<name>``, for messages.
    label: String,
    faults: Faults,
    /// Each statement's parts (more than one only for a claim or renew script).
    statements: HashMap<WorkerStatement, Vec<NamedSql>>,
    /// What a handler statement's error means (`[worker.handler_errors]`).
    errors: HandlerErrors,
}

/// The inbox rows named by the `:ids` array, with `:tokens` zipped on by position: the ids
/// first, each row then fetched by primary key, whatever the table's statistics say (as the
/// relay's statements, see `defaults::ROWS`: a table MariaDB thinks small is otherwise scanned,
/// and an UPDATE's scan locks every row it passes).
const ROWS: &str = "JSON_TABLE(:ids, '$[*]' COLUMNS (n FOR ORDINALITY, id BIGINT PATH '$')) AS i
     STRAIGHT_JOIN {t} w FORCE INDEX (PRIMARY) ON w.id = i.id
     JOIN JSON_TABLE(:tokens, '$[*]' COLUMNS (n FOR ORDINALITY, token BIGINT PATH '$')) AS t ON t.n = i.n";

/// The inbox rows named by the `:ids` array, by primary key.
const IDS: &str = "JSON_TABLE(:ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
     STRAIGHT_JOIN {t} w FORCE INDEX (PRIMARY) ON w.id = j.id";

const FENCE: &str = "w.lease_token = t.token AND w.lease_owner = :claimant AND w.status = 'PROCESSING'";

/// The reference schema's statement for `statement` on table `t`.
pub fn reference(statement: WorkerStatement, t: &str) -> String {
    let text = match statement {
        // At most one lease-expired row, else a batch of due rows; claimed by primary key
        // ([`IDS`]); `expired_leases` is assigned first so it reads the old status.
        WorkerStatement::Claim => "\
SELECT id FROM {t} WHERE consumer = :consumer AND status = 'PROCESSING' AND lease_expires_at <= NOW(3)
ORDER BY lease_expires_at LIMIT 1 FOR UPDATE SKIP LOCKED;
SELECT id FROM {t} WHERE consumer = :consumer AND status = 'PENDING' AND next_retry_at <= NOW(3)
  AND JSON_LENGTH(:ids) = 0
ORDER BY next_retry_at, id LIMIT :batch_size FOR UPDATE SKIP LOCKED;
UPDATE {IDS}
SET w.expired_leases = w.expired_leases + IF(w.status = 'PROCESSING', 1, 0),
    w.status = 'PROCESSING', w.lease_owner = :claimant, w.lease_token = w.lease_token + 1,
    w.lease_expires_at = NOW(3) + INTERVAL :lease_ms * 1000 MICROSECOND, w.claimed_at = NOW(3)
WHERE w.status = 'PENDING' OR (w.status = 'PROCESSING' AND w.lease_expires_at <= NOW(3));
SELECT id, lease_token AS token, event_id, event_type, owner, aggregate_type, aggregate_id,
       CAST(payload AS CHAR) AS payload, CAST(COALESCE(headers, '{}') AS CHAR) AS headers,
       CAST(COALESCE(fields, '{}') AS CHAR) AS fields, attempts, expired_leases
FROM {t}
WHERE id IN (SELECT j.id FROM JSON_TABLE(:ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j)
  AND status = 'PROCESSING' AND lease_owner = :claimant"
            .replace("{IDS}", IDS),
        WorkerStatement::Processed => format!(
            "UPDATE {ROWS}
             SET w.status = 'PROCESSED', w.processed_at = NOW(3), w.lease_expires_at = NULL, w.last_error = NULL
             WHERE {FENCE}"
        ),
        WorkerStatement::Retry => "\
UPDATE {t} SET status = 'PENDING', attempts = attempts + 1, last_error = :error, failed_at = NOW(3),
    next_retry_at = NOW(3) + INTERVAL :delay_ms * 1000 MICROSECOND, lease_expires_at = NULL
WHERE id = :id AND lease_owner = :claimant AND lease_token = :token AND status = 'PROCESSING'"
            .to_owned(),
        WorkerStatement::Dead => "\
UPDATE {t} SET status = 'DEAD', attempts = attempts + 1, last_error = :error, failed_at = NOW(3),
    dead_at = NOW(3), lease_expires_at = NULL
WHERE id = :id AND lease_owner = :claimant AND lease_token = :token AND status = 'PROCESSING'"
            .to_owned(),
        // Locks what it can without waiting (the batch transaction holds the rest and is about
        // to settle them; waiting on it would deadlock with it), then extends those.
        WorkerStatement::Renew => format!(
            "SELECT w.id FROM {ROWS} WHERE {FENCE} FOR UPDATE SKIP LOCKED;
             UPDATE {IDS}
             SET w.lease_expires_at = NOW(3) + INTERVAL :lease_ms * 1000 MICROSECOND"
        ),
        WorkerStatement::Release => {
            format!("UPDATE {ROWS} SET w.status = 'PENDING', w.lease_expires_at = NULL WHERE {FENCE}")
        }
        WorkerStatement::Stats => "\
SELECT (SELECT COUNT(*) FROM {t} WHERE consumer = :consumer AND status = 'DEAD') AS dead,
       (SELECT COUNT(*) FROM {t} WHERE consumer = :consumer AND status = 'PENDING') AS pending,
       COALESCE(TIMESTAMPDIFF(MICROSECOND, (SELECT MIN(claimed_at) FROM {t}
                WHERE consumer = :consumer AND status = 'PROCESSING'), NOW(3)) / 1000000, 0) AS oldest_lease_age_seconds,
       COALESCE(TIMESTAMPDIFF(MICROSECOND, (SELECT MIN(failed_at) FROM {t}
                WHERE consumer = :consumer AND status = 'PENDING' AND attempts > 0), NOW(3)) / 1000000, 0)
           AS oldest_retry_age_seconds"
            .to_owned(),
        WorkerStatement::Purge => "\
DELETE FROM {t} WHERE consumer = :consumer AND status IN ('PROCESSED', 'IGNORED')
  AND COALESCE(processed_at, received_at) < NOW(3) - INTERVAL :age_ms * 1000 MICROSECOND
ORDER BY id LIMIT :batch_size"
            .to_owned(),
    };
    text.replace("{t}", t)
}

impl MyInbox {
    /// The worker's statements: its `[worker.sql]` overrides, the reference schema's otherwise.
    pub(crate) fn new(pool: Pool, worker: &WorkerConfig, faults: Faults) -> Result<Self, StatementError> {
        let mut statements = HashMap::new();
        for (statement, text) in
            statement_texts(&worker.sql, worker.retention.is_some(), |s| reference(s, &worker.table))
        {
            let context = format!("worker `{}` sql.{}", worker.name, statement.name());
            let parts = params::split_statements(&text, Placeholder::Positional)
                .map_err(|e| StatementError::new(&context, e))?;
            if parts.len() != 1 && !matches!(statement, WorkerStatement::Claim | WorkerStatement::Renew) {
                return Err(StatementError::new(context, StatementProblem::NotOneStatement("claim and renew")));
            }
            let named = parts
                .iter()
                .map(|part| {
                    params::rewrite(part, Placeholder::Positional).map_err(|e| StatementError::new(&context, e))
                })
                .collect::<Result<Vec<_>, _>>()?;
            statements.insert(statement, named);
        }
        let label = format!("worker `{}`", worker.name);
        let errors = worker.handler_errors.clone();
        Ok(Self { pool, consumer: worker.consumer.clone(), label, faults, statements, errors })
    }

    /// Runs a statement's parts in `conn`: each part after the first sees the ids the parts
    /// before it returned as `:ids`. The last part's rows and the rows it changed.
    async fn script(
        &self,
        conn: &mut impl Queryable,
        statement: WorkerStatement,
        value: &(impl Fn(&str) -> Param + Send + Sync),
    ) -> Result<(Vec<TextRow>, u64), mysql_async::Error> {
        let Some(parts) = self.statements.get(&statement) else {
            return Err(mysql_async::Error::Other(format!("the worker has no {} statement", statement.name()).into()));
        };
        let mut ids: Vec<String> = Vec::new();
        for (i, named) in parts.iter().enumerate() {
            let values = if i == 0 {
                bind(named, value)
            } else {
                bind(named, |name| if name == "ids" { Param::Texts(ids.clone()) } else { value(name) })
            };
            let result = conn.exec_iter(named.sql.as_str(), values).await?;
            let changed = result.affected_rows();
            let rows: Vec<Row> = result.collect_and_drop().await?;
            if i + 1 == parts.len() {
                let texts = rows.iter().map(|row| row_columns(row).into_iter().zip(row_texts(row)).collect()).collect();
                return Ok((texts, changed));
            }
            ids.extend(rows.iter().filter_map(|r| row_texts(r).into_iter().next().flatten()));
        }
        Ok((Vec::new(), 0))
    }
}

fn to_value(v: &BindValue) -> Value {
    match v {
        BindValue::Null => Value::NULL,
        BindValue::Text(s) | BindValue::Json(s) => Value::Bytes(s.clone().into_bytes()),
        // Batch statements are refused on MySQL when the handler is built; as JSON if ever bound.
        BindValue::Texts(v) => Value::Bytes(serde_json::to_vec(v).unwrap_or_default()),
        BindValue::Jsons(v) => Value::Bytes(format!("[{}]", v.join(",")).into_bytes()),
    }
}

/// A batch's transaction on MySQL / MariaDB.
struct MyRows<'a> {
    tx: mysql_async::Transaction<'a>,
    worker: &'a MyInbox,
}

impl RowTransaction for MyRows<'_> {
    fn handler_errors(&self) -> &HandlerErrors {
        &self.worker.errors
    }

    async fn savepoint(&mut self, sql: &'static str) -> StoreResult<()> {
        self.tx.query_drop(sql).await.map_err(|e| error("apply", e))
    }

    async fn execute(&mut self, statement: &BoundStatement<'_>) -> StoreResult<u64> {
        let values: Vec<Value> = statement.values.iter().map(to_value).collect();
        self.tx.exec_drop(statement.sql, values).await.map_err(|e| error("handler", e))?;
        Ok(self.tx.affected_rows())
    }

    async fn mark_processed(&mut self, owner: &str, row: &InboxRow) -> StoreResult<u64> {
        let held = [row.held()];
        let mark = binding::held(owner, &held, Default::default());
        let (_, changed) = self
            .worker
            .script(&mut self.tx, WorkerStatement::Processed, &mark)
            .await
            .map_err(|e| error("mark processed", e))?;
        Ok(changed)
    }

    fn faults(&self) -> &Faults {
        &self.worker.faults
    }

    async fn commit(self) -> StoreResult<()> {
        self.tx.commit().await.map_err(|e| error("handler", e))
    }
}

impl MyInbox {
    pub(super) fn consumer(&self) -> &str {
        &self.consumer
    }

    pub(super) async fn check(&self, handler_sql: &[(String, String)]) -> Result<(), PrepareError> {
        let mut conn = self
            .pool
            .get_conn()
            .await
            .map_err(|e| PrepareError::Unreachable(format!("cannot connect to the database: {e}")))?;
        let mut errors = Vec::new();
        for statement in WorkerStatement::ALL {
            let Some(parts) = self.statements.get(&statement) else { continue };
            let context = format!("{} sql.{}", self.label, statement.name());
            for (i, named) in parts.iter().enumerate() {
                match conn.prep(named.sql.as_str()).await {
                    Err(e) => errors.push(prepare_refusal(&context, e)?),
                    Ok(stmt) if i + 1 == parts.len() => {
                        let names: Vec<String> = stmt.columns().iter().map(|c| c.name_str().into_owned()).collect();
                        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                        errors.extend(missing_result_columns(statement, &refs).map(|m| format!("{context}: {m}")));
                    }
                    Ok(_) => {}
                }
            }
        }
        for (context, sql) in handler_sql {
            if let Err(e) = conn.prep(sql.as_str()).await {
                errors.push(prepare_refusal(context, e)?);
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(PrepareError::Invalid(errors)) }
    }

    pub(super) async fn run(
        &self,
        statement: WorkerStatement,
        value: impl Fn(&str) -> Param + Send + Sync,
    ) -> StoreResult<(Vec<TextRow>, u64)> {
        let label = statement.name();
        if self.statements.get(&statement).is_none_or(|parts| parts.len() == 1) {
            let mut conn = self.pool.get_conn().await.map_err(|e| error(label, e))?;
            return self.script(&mut conn, statement, &value).await.map_err(|e| error(label, e));
        }
        let mut tx = self.pool.start_transaction(claim_tx()).await.map_err(|e| error(label, e))?;
        let result = self.script(&mut tx, statement, &value).await.map_err(|e| error(label, e))?;
        tx.commit().await.map_err(|e| error(label, e))?;
        Ok(result)
    }

    pub(super) async fn apply_batch(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> StoreResult<Vec<Result<Applied, ApplyError>>> {
        let tx = self.pool.start_transaction(TxOpts::default()).await.map_err(|e| error("apply", e))?;
        apply_row_by_row(MyRows { tx, worker: self }, owner, items).await
    }
}

/// `consumer`'s rows of `table`: pending, processing, DEAD, and the age of the oldest not yet done.
pub(crate) async fn counts(pool: &Pool, table: &str, consumer: &str) -> StoreResult<InboxCounts> {
    let sql = format!(
                "SELECT CAST(COALESCE(SUM(status = 'PENDING'), 0) AS SIGNED),
                        CAST(COALESCE(SUM(status = 'PROCESSING'), 0) AS SIGNED),
                        CAST(COALESCE(SUM(status = 'DEAD'), 0) AS SIGNED),
                        CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND,
                            MIN(CASE WHEN status IN ('PENDING', 'PROCESSING') THEN received_at END), NOW(3)) / 1e6, 0) AS DOUBLE)
                 FROM {table} WHERE consumer = ? AND status IN ('PENDING', 'PROCESSING', 'DEAD')"
            );
    let label = "count inbox rows";
    let mut conn = pool.get_conn().await.map_err(|e| error(label, e))?;
    let row: Option<(i64, i64, i64, f64)> = conn.exec_first(sql, (consumer,)).await.map_err(|e| error(label, e))?;
    let (pending, processing, dead, oldest_age_seconds) = row.unwrap_or((0, 0, 0, 0.0));
    Ok(InboxCounts { pending, processing, dead, oldest_age_seconds })
}
