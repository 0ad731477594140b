//! The bridge's takeover on MySQL / MariaDB. One transaction; each event is inserted only if
//! absent (`INSERT … SELECT … WHERE NOT EXISTS`), so the affected-row count says exactly whether
//! this statement inserted it — whatever the client's found-rows mode, and without `INSERT
//! IGNORE`, which would turn data errors into silent truncation. The reference statements are
//! written with named parameters, so an override from `[bridge.sql]` runs the same way.

use mysql_async::prelude::Queryable;
use mysql_async::{Row, TxOpts};

use super::Pool;

use super::error;
use super::values::{bind, text};
use crate::config::BridgeConfig;
use crate::sql::params::{NamedSql, Placeholder};
use crate::store::inbox::{
    Catalog, Columns, InboxEvent, InboxStore, PoisonRecord, Sql, Takeover, TakeoverSql, event_param, poison_param,
};
use crate::store::{PrepareError, StoreResult};

pub struct MyInbox {
    pool: Pool,
    sql: TakeoverSql,
    insert: NamedSql,
    existing: Option<NamedSql>,
    poison: NamedSql,
}

impl MyInbox {
    /// The bridge's statements: its `[bridge.sql]` overrides, the reference schema's otherwise.
    pub fn new(pool: Pool, bridge: &BridgeConfig) -> Result<Self, String> {
        let sql = TakeoverSql::new(bridge, Placeholder::Positional, statements)?;
        // Every statement here has named parameters, the reference ones too.
        let named = |sql: &Sql| match sql {
            Sql::Named(named) => Ok(named.clone()),
            Sql::Reference(text) => Err(format!("statement without named parameters: {text}")),
        };
        let (insert, poison) = (named(&sql.insert)?, named(&sql.poison)?);
        let existing = sql.existing.as_ref().map(named).transpose()?;
        Ok(Self { pool, sql, insert, existing, poison })
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

/// The reference schema's statements, per event, written with named parameters like an override.
fn statements(inbox: Columns<'_>, poison: Columns<'_>) -> [Sql; 3] {
    let (table, columns) = (inbox.table, inbox.list);
    let (poison_table, poison_columns) = (poison.table, poison.list);
    let named = |text: String| Sql::named(&text, Placeholder::Positional).expect("the reference statements scan");
    [
        named(format!(
            "INSERT INTO {table} ({columns})
             SELECT :consumer, :event_id, :event_type, :owner, :aggregate_type, :aggregate_id, :payload, :headers,
                    :fields, :content_hash, :stream, :entry_id, :status FROM DUAL
             WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE consumer = :consumer AND event_id = :event_id)"
        )),
        named(format!("SELECT content_hash FROM {table} WHERE consumer = :consumer AND event_id = :event_id")),
        named(format!(
            "INSERT INTO {poison_table} ({poison_columns})
             SELECT :consumer, :stream, :entry_id, :event_id, :reason, :detail, :fields FROM DUAL
             WHERE NOT EXISTS (SELECT 1 FROM {poison_table}
                               WHERE consumer = :consumer AND stream = :stream AND stream_entry_id = :entry_id)"
        )),
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

    async fn prepare(&mut self, context: &str, sql: &str) -> Result<Result<Vec<String>, String>, PrepareError> {
        match self.0.prep(sql).await {
            Ok(stmt) => Ok(Ok(stmt.columns().iter().map(|c| c.name_str().into_owned()).collect())),
            Err(e) => super::prepare_refusal(context, e).map(Err),
        }
    }
}

impl InboxStore for MyInbox {
    async fn take_over(
        &self,
        consumer: &str,
        events: &[InboxEvent],
        poison: &[PoisonRecord],
    ) -> StoreResult<Vec<Takeover>> {
        let mut tx = self.pool.start_transaction(TxOpts::default()).await.map_err(|e| error("take over", e))?;
        let insert = &self.insert;
        let prepared = tx.prep(insert.sql.as_str()).await.map_err(|e| error("take over", e))?;
        let mut outcomes = Vec::with_capacity(events.len());
        let mut records: Vec<PoisonRecord> = poison.to_vec();
        for e in events {
            tx.exec_drop(&prepared, bind(insert, event_param(consumer, e)))
                .await
                .map_err(|e| error("insert into the inbox", e))?;
            let inserted = tx.affected_rows() > 0;
            let existing: Option<String> = match (&self.existing, inserted) {
                (_, true) => None,
                // No way to compare content: an event already there counts as the same event.
                (None, false) => Some(e.content_hash.clone()),
                (Some(existing), false) => {
                    let row: Option<Row> = tx
                        .exec_first(existing.sql.as_str(), bind(existing, event_param(consumer, e)))
                        .await
                        .map_err(|e| error("read an existing inbox row", e))?;
                    row.and_then(|r| r.get_opt::<mysql_async::Value, _>("content_hash").and_then(Result::ok))
                        .as_ref()
                        .and_then(text)
                }
            };
            outcomes.push(Takeover::judge(e, inserted, existing.as_deref(), &mut records));
        }
        let poison = &self.poison;
        for p in &records {
            tx.exec_drop(poison.sql.as_str(), bind(poison, poison_param(consumer, p)))
                .await
                .map_err(|e| error("record poison entries", e))?;
        }
        tx.commit().await.map_err(|e| error("commit the takeover", e))?;
        Ok(outcomes)
    }

    async fn ping(&self) -> StoreResult<()> {
        super::probe(&self.pool).await
    }
}
