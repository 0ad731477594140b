//! The bridge's takeover on MySQL / MariaDB. One transaction; each event is inserted only if
//! absent (`INSERT … SELECT … WHERE NOT EXISTS`), so the affected-row count says exactly whether
//! this statement inserted it — whatever the client's found-rows mode, and without `INSERT
//! IGNORE`, which would turn data errors into silent truncation.

use mysql_async::prelude::Queryable;
use mysql_async::{Row, TxOpts, Value};

use super::Pool;

use super::error;
use crate::store::inbox::{Catalog, Columns, InboxEvent, InboxStore, PoisonRecord, Takeover, TakeoverSql};
use crate::store::{PrepareError, StoreResult};

pub struct MyInbox {
    pool: Pool,
    sql: TakeoverSql,
}

impl MyInbox {
    pub fn new(pool: Pool, table: &str, poison_table: &str) -> Self {
        Self { pool, sql: TakeoverSql::new(table, poison_table, statements) }
    }

    /// Checks the tables' columns and prepares the takeover statements.
    pub async fn check(&self) -> Result<(), PrepareError> {
        let mut conn = self
            .pool
            .get_conn()
            .await
            .map_err(|e| PrepareError::Unreachable(format!("cannot connect to the database: {e}")))?;
        self.sql.check(&mut MyCatalog(&mut conn)).await
    }
}

/// Insert-if-absent of one event (`INSERT … SELECT … WHERE NOT EXISTS`), run once per event.
fn statements(inbox: Columns<'_>, poison: Columns<'_>) -> [String; 3] {
    let (table, columns) = (inbox.table, inbox.list);
    let (poison_table, poison_columns) = (poison.table, poison.list);
    [
        format!(
            "INSERT INTO {table} ({columns})
             SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM DUAL
             WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE consumer = ? AND event_id = ?)"
        ),
        format!("SELECT content_hash FROM {table} WHERE consumer = ? AND event_id = ?"),
        format!(
            "INSERT INTO {poison_table} ({poison_columns})
             SELECT ?, ?, ?, ?, ?, ?, ? FROM DUAL
             WHERE NOT EXISTS (SELECT 1 FROM {poison_table} WHERE consumer = ? AND stream = ? AND stream_entry_id = ?)"
        ),
    ]
}

struct MyCatalog<'a>(&'a mut mysql_async::Conn);

impl Catalog for MyCatalog<'_> {
    async fn columns(&mut self, table: &str) -> Result<Vec<String>, PrepareError> {
        let (schema, name) = table.split_once('.').map_or((None, table), |(s, n)| (Some(s), n));
        self.0
            .exec(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS
                 WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
                (schema, name),
            )
            .await
            .map_err(|e| PrepareError::Unreachable(format!("reading the catalog: {}", super::describe(&e))))
    }

    async fn refusal(&mut self, context: &str, sql: &str) -> Result<Option<String>, PrepareError> {
        match self.0.prep(sql).await {
            Ok(_) => Ok(None),
            Err(e) => super::prepare_refusal(context, e).map(Some),
        }
    }
}

fn text(s: &Option<String>) -> Value {
    s.as_ref().map_or(Value::NULL, |s| Value::Bytes(s.clone().into_bytes()))
}

fn bytes(s: &str) -> Value {
    Value::Bytes(s.as_bytes().to_vec())
}

impl InboxStore for MyInbox {
    async fn take_over(
        &self,
        consumer: &str,
        events: &[InboxEvent],
        poison: &[PoisonRecord],
    ) -> StoreResult<Vec<Takeover>> {
        let mut tx = self.pool.start_transaction(TxOpts::default()).await.map_err(|e| error("take over", e))?;
        let insert = tx.prep(self.sql.insert.as_str()).await.map_err(|e| error("take over", e))?;
        let mut outcomes = Vec::with_capacity(events.len());
        let mut records: Vec<PoisonRecord> = poison.to_vec();
        for e in events {
            let status = if e.ignored { "IGNORED" } else { "PENDING" };
            let values = vec![
                bytes(consumer),
                bytes(&e.event_id),
                bytes(&e.event_type),
                text(&e.owner),
                text(&e.aggregate_type),
                text(&e.aggregate_id),
                Value::Bytes(e.payload.as_bytes().to_vec()),
                Value::Bytes(e.headers.as_bytes().to_vec()),
                bytes(&e.content_hash),
                bytes(&e.stream),
                bytes(&e.entry_id),
                bytes(status),
                bytes(consumer),
                bytes(&e.event_id),
            ];
            tx.exec_drop(&insert, values).await.map_err(|e| error("insert into the inbox", e))?;
            let inserted = tx.affected_rows() == 1;
            let existing: Option<String> = if inserted {
                None
            } else {
                let row: Option<Row> = tx
                    .exec_first(self.sql.existing.as_str(), (consumer, e.event_id.as_str()))
                    .await
                    .map_err(|e| error("read an existing inbox row", e))?;
                row.and_then(|r| r.get(0))
            };
            outcomes.push(Takeover::judge(e, inserted, existing.as_deref(), &mut records));
        }
        for p in &records {
            let values = vec![
                bytes(consumer),
                bytes(&p.stream),
                bytes(&p.entry_id),
                text(&p.event_id),
                bytes(p.reason),
                bytes(&p.detail),
                bytes(&p.fields.to_string()),
                bytes(consumer),
                bytes(&p.stream),
                bytes(&p.entry_id),
            ];
            tx.exec_drop(self.sql.poison.as_str(), values).await.map_err(|e| error("record poison entries", e))?;
        }
        tx.commit().await.map_err(|e| error("commit the takeover", e))?;
        Ok(outcomes)
    }

    async fn ping(&self) -> StoreResult<()> {
        super::probe(&self.pool).await
    }
}
