//! The bridge's takeover on MySQL / MariaDB. One transaction; each event is inserted only if
//! absent (`INSERT … SELECT … WHERE NOT EXISTS`), so the affected-row count says exactly whether
//! this statement inserted it — whatever the client's found-rows mode, and without `INSERT
//! IGNORE`, which would turn data errors into silent truncation. The reference statements are
//! written with named parameters, so an override from `[bridge.sql]` runs the same way.

use std::collections::HashMap;
use std::sync::Arc;

use mysql_async::prelude::Queryable;
use mysql_async::{Row, Transaction, TxOpts};

use super::outcome::{InboxEvent, PoisonRecord};
use super::statements::{Catalog, Columns, Sql, TakeoverStatements, event_param, poison_param};
use crate::bridge::config::BridgeConfig;
use crate::sql::params::{NamedSql, Placeholder};
use crate::store::error::{PrepareError, StatementError, StatementProblem, StoreError, StoreResult};
use crate::store::mysql::errors::error;
use crate::store::mysql::pool::{Pool, probe};
use crate::store::mysql::values::{bind, text};
use crate::store::param::millis;
use crate::worker::config::HandlerErrors;
use crate::worker::inbox::rows::Merged;

pub struct MyTakeover {
    pool: Pool,
    sql: Arc<Statements>,
}

/// The takeover's statements, every one with named parameters (the reference ones too).
struct Statements {
    takeover: TakeoverStatements,
    insert: NamedSql,
    existing: Option<NamedSql>,
    poison: NamedSql,
    /// handoff's own count of redeliveries (`bridge.deliveries_table`).
    deliveries: String,
}

impl MyTakeover {
    /// The bridge's statements: its `[bridge.sql]` overrides, the reference schema's otherwise.
    pub(crate) fn new(pool: Pool, bridge: &BridgeConfig) -> Result<Self, StatementError> {
        let takeover = TakeoverStatements::new(bridge, Placeholder::Positional, statements)?;
        // Every statement here has named parameters, the reference ones too.
        let named = |sql: &Sql| match sql {
            Sql::Named(named) => Ok(named.clone()),
            Sql::Reference(text) => Err(StatementError::new(text.clone(), StatementProblem::Unnamed)),
        };
        let (insert, poison) = (named(&takeover.insert)?, named(&takeover.poison)?);
        let existing = takeover.existing.as_ref().map(named).transpose()?;
        let deliveries = bridge.deliveries_table.clone();
        Ok(Self { pool, sql: Arc::new(Statements { takeover, insert, existing, poison, deliveries }) })
    }

    /// Checks the tables' columns and prepares the takeover statements.
    pub(crate) async fn check(&self) -> Result<(), PrepareError> {
        let mut conn = self
            .pool
            .get_conn()
            .await
            .map_err(|e| PrepareError::Unreachable(format!("cannot connect to the database: {e}")))?;
        self.sql.takeover.check(&mut Catalog::Mysql(&mut conn)).await
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

impl MyTakeover {
    pub(super) async fn begin(&self) -> StoreResult<MyTakeoverTx> {
        let tx = self.pool.start_transaction(TxOpts::default()).await.map_err(|e| error("take over", e))?;
        Ok(MyTakeoverTx { tx, sql: self.sql.clone() })
    }

    /// An upsert per entry, then the counts read back, in one transaction.
    pub(super) async fn count_deliveries(
        &self,
        consumer: &str,
        stream: &str,
        entry_ids: &[String],
    ) -> StoreResult<HashMap<String, u32>> {
        let label = "count deliveries";
        let table = &self.sql.deliveries;
        let mut tx = self.pool.start_transaction(TxOpts::default()).await.map_err(|e| error(label, e))?;
        let upsert = format!(
            "INSERT INTO {table} (consumer, stream, stream_entry_id) VALUES (?, ?, ?)
             ON DUPLICATE KEY UPDATE deliveries = deliveries + 1, last_at = NOW(3)"
        );
        let read = format!("SELECT deliveries FROM {table} WHERE consumer = ? AND stream = ? AND stream_entry_id = ?");
        let mut counts = HashMap::with_capacity(entry_ids.len());
        for entry_id in entry_ids {
            tx.exec_drop(upsert.as_str(), (consumer, stream, entry_id)).await.map_err(|e| error(label, e))?;
            let n: Option<i64> =
                tx.exec_first(read.as_str(), (consumer, stream, entry_id)).await.map_err(|e| error(label, e))?;
            counts.insert(entry_id.clone(), n.unwrap_or(1).clamp(0, i64::from(u32::MAX)) as u32);
        }
        tx.commit().await.map_err(|e| error(label, e))?;
        Ok(counts)
    }

    pub(super) async fn deliveries(
        &self,
        consumer: &str,
        stream: &str,
        entry_ids: &[String],
    ) -> StoreResult<HashMap<String, u32>> {
        let label = "read delivery counts";
        let mut conn = self.pool.get_conn().await.map_err(|e| error(label, e))?;
        let read = format!(
            "SELECT stream_entry_id, deliveries FROM {} WHERE consumer = ? AND stream = ? AND stream_entry_id IN
             (SELECT j.e FROM JSON_TABLE(?, '$[*]' COLUMNS (e VARCHAR(64) PATH '$')) AS j)",
            self.sql.deliveries
        );
        let ids = serde_json::to_string(entry_ids).unwrap_or_default();
        let rows: Vec<(String, i64)> =
            conn.exec(read.as_str(), (consumer, stream, ids)).await.map_err(|e| error(label, e))?;
        Ok(rows.into_iter().map(|(id, n)| (id, n.clamp(0, i64::from(u32::MAX)) as u32)).collect())
    }

    pub(super) async fn forget_deliveries(&self, consumer: &str, age: std::time::Duration) -> StoreResult<u64> {
        let label = "forget old delivery counts";
        let mut conn = self.pool.get_conn().await.map_err(|e| error(label, e))?;
        let purge = format!(
            "DELETE FROM {} WHERE consumer = ? AND last_at < NOW(3) - INTERVAL ? * 1000 MICROSECOND",
            self.sql.deliveries
        );
        let age_ms = millis(age);
        conn.exec_drop(purge.as_str(), (consumer, age_ms)).await.map_err(|e| error(label, e))?;
        Ok(conn.affected_rows())
    }

    pub(super) async fn ping(&self) -> StoreResult<()> {
        probe(&self.pool).await
    }
}

/// A takeover's transaction on MySQL / MariaDB: each statement once per event (no arrays here),
/// an insert-if-absent whose affected-row count says whether it inserted.
pub(crate) struct MyTakeoverTx {
    tx: Transaction<'static>,
    sql: Arc<Statements>,
}

impl MyTakeoverTx {
    pub(super) async fn insert(
        &mut self,
        consumer: &str,
        events: &[InboxEvent],
        processed: &[bool],
    ) -> StoreResult<Vec<bool>> {
        if processed.iter().any(|p| *p) {
            return Err(no_apply());
        }
        let insert = &self.sql.insert;
        let prepared = self.tx.prep(insert.sql.as_str()).await.map_err(|e| error("take over", e))?;
        let mut inserted = Vec::with_capacity(events.len());
        for event in events {
            self.tx
                .exec_drop(&prepared, bind(insert, event_param(consumer, event)))
                .await
                .map_err(|e| error("insert into the inbox", e))?;
            inserted.push(self.tx.affected_rows() > 0);
        }
        Ok(inserted)
    }

    pub(super) async fn existing(
        &mut self,
        consumer: &str,
        events: &[&InboxEvent],
    ) -> StoreResult<Option<HashMap<String, String>>> {
        // No way to compare content: an event already there counts as the same event.
        let Some(existing) = &self.sql.existing else { return Ok(None) };
        let mut found = HashMap::new();
        for event in events {
            let row: Option<Row> = self
                .tx
                .exec_first(existing.sql.as_str(), bind(existing, event_param(consumer, event)))
                .await
                .map_err(|e| error("read an existing inbox row", e))?;
            let hash = row.and_then(|r| r.get_opt::<mysql_async::Value, _>("content_hash").and_then(Result::ok));
            if let Some(hash) = hash.as_ref().and_then(text) {
                found.insert(event.event_id.clone(), hash);
            }
        }
        Ok(Some(found))
    }

    pub(super) async fn poison(&mut self, consumer: &str, records: &[PoisonRecord]) -> StoreResult<()> {
        let poison = &self.sql.poison;
        for record in records {
            self.tx
                .exec_drop(poison.sql.as_str(), bind(poison, poison_param(consumer, record)))
                .await
                .map_err(|e| error("record poison entries", e))?;
        }
        Ok(())
    }

    pub(super) async fn forget(&mut self, consumer: &str, entries: &[(&str, &str)]) -> StoreResult<()> {
        let forget =
            format!("DELETE FROM {} WHERE consumer = ? AND stream = ? AND stream_entry_id = ?", self.sql.deliveries);
        for (stream, entry_id) in entries {
            self.tx
                .exec_drop(forget.as_str(), (consumer, stream, entry_id))
                .await
                .map_err(|e| error("forget delivery counts", e))?;
        }
        Ok(())
    }

    pub(super) async fn apply(&mut self, _statements: &Merged<'_>, _errors: &HandlerErrors) -> StoreResult<()> {
        Err(no_apply())
    }

    pub(super) async fn commit(self, _carried: usize) -> StoreResult<()> {
        self.tx.commit().await.map_err(|e| error("commit the takeover", e))
    }

    pub(super) async fn roll_back(self) {
        let _ = self.tx.rollback().await;
    }
}

/// Apply at take-over is Postgres-only; the configuration never asks MySQL for it.
fn no_apply() -> StoreError {
    StoreError::Contract("apply at take-over needs Postgres".into())
}
