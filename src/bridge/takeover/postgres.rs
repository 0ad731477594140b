//! The bridge's takeover on Postgres: the reference schema's statements take a whole batch each
//! (`unnest` of one array per column; `ON CONFLICT (consumer, event_id) DO NOTHING`); statements
//! from `[bridge.sql]` run once per event, all sent at once (pipelined on the connection). The
//! takeover's decisions are made above, in `database.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use deadpool_postgres::{Object, Pool};
use futures_util::future::try_join_all;

use super::contract::DETAIL_MAX_CHARS;
use super::contract::inbox_columns;
use super::outcome::{InboxEvent, PoisonRecord};
use super::statements::{Catalog, Columns, Sql, TakeoverStatements, event_param, poison_param, runs_by_payload};
use crate::bridge::config::BridgeConfig;
use crate::sql::params::{NamedSql, Placeholder};
use crate::store::error::{PrepareError, StatementError, StoreError, StoreResult};
use crate::store::param::millis;
use crate::store::postgres::connect::probe;
use crate::store::postgres::errors::{pool_error, prepare_refusal, query_error};
use crate::store::postgres::tx::{OpenTx, with_begin};
use crate::store::postgres::values::{Cell, Param, refs};
use crate::worker::config::HandlerErrors;
use crate::worker::inbox::postgres_handlers::run_statements;
use crate::worker::inbox::rows::{ApplyError, Merged};

/// Above this many payload bytes, a takeover's connection is closed after it, not pooled; and
/// the insert is sent in runs of at most this many payload bytes.
const LARGE_BATCH_BYTES: usize = 1 << 20;

pub struct PgTakeover {
    pool: Pool,
    sql: Arc<Statements>,
}

/// The takeover's statements and those on handoff's own count of redeliveries.
struct Statements {
    takeover: TakeoverStatements,
    deliveries: DeliveriesSql,
    /// The reference insert with PROCESSED rows stamped (apply at take-over), if configured.
    insert_processed: Option<String>,
}

impl std::ops::Deref for Statements {
    type Target = TakeoverStatements;

    fn deref(&self) -> &TakeoverStatements {
        &self.takeover
    }
}

/// The statements on handoff's own count of redeliveries (`bridge.deliveries_table`).
struct DeliveriesSql {
    read: String,
    count: String,
    forget: String,
    purge: String,
}

impl DeliveriesSql {
    fn new(table: &str) -> Self {
        Self {
            read: format!(
                "SELECT stream_entry_id, deliveries FROM {table}
                 WHERE consumer = $1 AND stream = $2 AND stream_entry_id = ANY($3::text[])"
            ),
            count: format!(
                "INSERT INTO {table} AS d (consumer, stream, stream_entry_id)
                 SELECT $1, $2, e FROM unnest($3::text[]) AS e
                 ON CONFLICT (consumer, stream, stream_entry_id)
                 DO UPDATE SET deliveries = d.deliveries + 1, last_at = now()
                 RETURNING stream_entry_id, deliveries"
            ),
            forget: format!(
                "DELETE FROM {table} d USING unnest($2::text[], $3::text[]) AS e(stream, entry_id)
                 WHERE d.consumer = $1 AND d.stream = e.stream AND d.stream_entry_id = e.entry_id"
            ),
            purge: format!(
                "DELETE FROM {table} WHERE consumer = $1 AND last_at < now() - $2::bigint * interval '1 millisecond'"
            ),
        }
    }
}

impl PgTakeover {
    /// The bridge's statements: its `[bridge.sql]` overrides, the reference schema's otherwise.
    pub(crate) fn new(pool: Pool, bridge: &BridgeConfig) -> Result<Self, StatementError> {
        let deliveries = DeliveriesSql::new(&bridge.deliveries_table);
        let takeover = TakeoverStatements::new(bridge, Placeholder::Numbered, statements)?;
        let columns = inbox_columns().join(", ");
        let insert_processed = bridge.apply.as_ref().map(|_| insert_batch_sql(&bridge.table, &columns, true));
        Ok(Self { pool, sql: Arc::new(Statements { takeover, deliveries, insert_processed }) })
    }

    /// Checks the tables' columns and prepares the takeover statements.
    pub(crate) async fn check(&self) -> Result<(), PrepareError> {
        let client = self
            .pool
            .get()
            .await
            .map_err(|e| PrepareError::Unreachable(format!("cannot connect to the database: {e}")))?;
        self.sql.check(&mut Catalog::Postgres(&client)).await?;
        if let Some(sql) = &self.sql.insert_processed
            && let Err(e) = client.prepare(sql).await
        {
            let problem = prepare_refusal("apply (the insert of rows applied at take-over, with processed_at)", e)?;
            return Err(PrepareError::Invalid(vec![problem]));
        }
        Ok(())
    }

    /// Runs `sql` ($1 consumer, $2 stream, $3 entry ids; rows of entry id and count).
    async fn delivery_counts(
        &self,
        label: &'static str,
        sql: &str,
        consumer: &str,
        stream: &str,
        entry_ids: &[String],
    ) -> StoreResult<HashMap<String, u32>> {
        let client = self.pool.get().await.map_err(|e| pool_error(label, e))?;
        let stmt = client.prepare_cached(sql).await.map_err(|e| query_error(label, e))?;
        let rows = client.query(&stmt, &[&consumer, &stream, &entry_ids]).await.map_err(|e| query_error(label, e))?;
        Ok(rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i32>(1).max(0) as u32)).collect())
    }
}

/// The reference schema's statements, each for a whole batch (`unnest` of one array per column).
fn statements(inbox: Columns<'_>, poison: Columns<'_>) -> [Sql; 3] {
    let table = inbox.table;
    let (poison_table, poison_columns) = (poison.table, poison.list);
    [
        Sql::Reference(insert_batch_sql(table, inbox.list, false)),
        Sql::Reference(format!(
            "SELECT event_id, content_hash FROM {table} WHERE consumer = $1 AND event_id = ANY($2)"
        )),
        Sql::Reference(format!(
            "INSERT INTO {poison_table} ({poison_columns})
             SELECT $1, p.stream, p.entry_id, p.event_id, p.reason, p.detail, p.fields::jsonb
             FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
                  AS p(stream, entry_id, event_id, reason, detail, fields)
             ON CONFLICT (consumer, stream, stream_entry_id) DO NOTHING"
        )),
    ]
}

/// The reference insert-if-absent of a batch into `table` (`columns`: the contract's, in order).
/// `stamp_processed`: for apply at take-over, rows inserted as PROCESSED also get their
/// `processed_at` (what retention and the processed index go by) in the same statement.
fn insert_batch_sql(table: &str, columns: &str, stamp_processed: bool) -> String {
    let (column, value) = if stamp_processed {
        (", processed_at", ", CASE WHEN e.status = 'PROCESSED' THEN now() END")
    } else {
        ("", "")
    };
    format!(
        "INSERT INTO {table} ({columns}{column})
         SELECT $1, e.event_id, e.event_type, e.owner, e.aggregate_type, e.aggregate_id,
                e.payload::jsonb, e.headers::jsonb, e.fields::jsonb, e.content_hash, e.stream, e.entry_id, e.status{value}
         FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[])
              AS e(event_id, event_type, owner, aggregate_type, aggregate_id, payload, headers,
                   fields, content_hash, stream, entry_id, status)
         ON CONFLICT (consumer, event_id) DO NOTHING
         RETURNING event_id"
    )
}

/// The values of a named statement's placeholders, each name's from `bind`.
fn bound(named: &NamedSql, bind: impl Fn(&str) -> Param) -> Vec<Param> {
    named.names.iter().map(|n| bind(n)).collect()
}

/// Runs a named statement once per set of `values`, all sent at once; the rows each changed.
async fn execute_each(
    tx: &Object,
    named: &NamedSql,
    label: &'static str,
    values: &[Vec<Param>],
) -> StoreResult<Vec<u64>> {
    let stmt = tx.prepare_cached(&named.sql).await.map_err(|e| query_error(label, e))?;
    try_join_all(values.iter().map(|v| {
        let stmt = &stmt;
        async move { tx.execute(stmt, &refs(v)).await }
    }))
    .await
    .map_err(|e| query_error(label, e))
}

impl PgTakeover {
    pub(super) async fn begin(&self) -> StoreResult<PgTakeoverTx> {
        // BEGIN goes with the transaction's first statement, whichever it is: one round trip
        // fewer per takeover.
        let tx = OpenTx::lazy(&self.pool, "take over").await?;
        Ok(PgTakeoverTx { tx, sql: self.sql.clone() })
    }

    pub(super) async fn count_deliveries(
        &self,
        consumer: &str,
        stream: &str,
        entry_ids: &[String],
    ) -> StoreResult<HashMap<String, u32>> {
        self.delivery_counts("count deliveries", &self.sql.deliveries.count, consumer, stream, entry_ids).await
    }

    pub(super) async fn deliveries(
        &self,
        consumer: &str,
        stream: &str,
        entry_ids: &[String],
    ) -> StoreResult<HashMap<String, u32>> {
        self.delivery_counts("read delivery counts", &self.sql.deliveries.read, consumer, stream, entry_ids).await
    }

    pub(super) async fn forget_deliveries(&self, consumer: &str, age: std::time::Duration) -> StoreResult<u64> {
        let label = "forget old delivery counts";
        let client = self.pool.get().await.map_err(|e| pool_error(label, e))?;
        let age_ms = millis(age);
        client.execute(&self.sql.deliveries.purge, &[&consumer, &age_ms]).await.map_err(|e| query_error(label, e))
    }

    pub(super) async fn ping(&self) -> StoreResult<()> {
        probe(&self.pool).await
    }
}

/// A takeover's transaction on Postgres.
pub(crate) struct PgTakeoverTx {
    tx: OpenTx,
    sql: Arc<Statements>,
}

impl PgTakeoverTx {
    pub(super) async fn insert(
        &mut self,
        consumer: &str,
        events: &[InboxEvent],
        processed: &[bool],
    ) -> StoreResult<Vec<bool>> {
        let applying = processed.iter().any(|p| *p);
        let insert = match (&self.sql.insert, &self.sql.insert_processed) {
            (Sql::Reference(_), Some(insert)) if applying => insert,
            _ if applying => return Err(StoreError::Contract("apply at take-over needs the reference insert".into())),
            (Sql::Reference(insert), _) => insert,
            (Sql::Named(named), _) => {
                let (tx, begin) = self.tx.client_to_begin()?;
                let values: Vec<_> = events.iter().map(|e| bound(named, event_param(consumer, e))).collect();
                let label = "insert into the inbox";
                let changed = with_begin(tx, begin, label, execute_each(tx, named, label, &values)).await??;
                return Ok(changed.into_iter().map(|n| n > 0).collect());
            }
        };
        let (tx, begin) = self.tx.client_to_begin()?;
        let inserted = insert_batch(tx, begin, insert, consumer, events, processed).await?;
        Ok(events.iter().map(|e| inserted.contains(&e.event_id)).collect())
    }

    /// The content hash of each of `events` the inbox already holds, by event id.
    pub(super) async fn existing(
        &mut self,
        consumer: &str,
        events: &[&InboxEvent],
    ) -> StoreResult<Option<HashMap<String, String>>> {
        let label = "read existing inbox rows";
        let Some(existing) = &self.sql.existing else {
            // No way to compare content: an event already there counts as the same event.
            return Ok(None);
        };
        let (tx, begin) = self.tx.client_to_begin()?;
        let found = match existing {
            Sql::Reference(sql) => {
                let ids: Vec<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
                let rows = with_begin(tx, begin, label, tx.query(sql, &[&consumer, &ids]))
                    .await?
                    .map_err(|e| query_error(label, e))?;
                rows.iter().map(|r| (r.get(0), r.get(1))).collect()
            }
            Sql::Named(named) => {
                let stmt = tx.prepare_cached(&named.sql).await.map_err(|e| query_error(label, e))?;
                let values: Vec<_> = events.iter().map(|e| bound(named, event_param(consumer, e))).collect();
                let replies = try_join_all(values.iter().map(|v| {
                    let stmt = &stmt;
                    async move { tx.query_opt(stmt, &refs(v)).await }
                }));
                let replies = with_begin(tx, begin, label, replies).await?.map_err(|e| query_error(label, e))?;
                let mut found = HashMap::new();
                for (event, row) in events.iter().zip(replies) {
                    let hash = row
                        .map(|r| r.try_get::<_, Option<Cell>>("content_hash"))
                        .transpose()
                        .map_err(|e| StoreError::Contract(format!("bridge sql.existing: {e}")))?;
                    if let Some(Some(Cell(hash))) = hash {
                        found.insert(event.event_id.clone(), hash);
                    }
                }
                found
            }
        };
        Ok(Some(found))
    }

    pub(super) async fn poison(&mut self, consumer: &str, records: &[PoisonRecord]) -> StoreResult<()> {
        let (tx, begin) = self.tx.client_to_begin()?;
        let label = "record poison entries";
        match &self.sql.poison {
            Sql::Reference(insert) => with_begin(tx, begin, label, poison_batch(tx, insert, consumer, records)).await?,
            Sql::Named(named) => {
                let values: Vec<_> = records.iter().map(|r| bound(named, poison_param(consumer, r))).collect();
                with_begin(tx, begin, label, execute_each(tx, named, label, &values)).await?.map(drop)
            }
        }
    }

    pub(super) async fn forget(&mut self, consumer: &str, entries: &[(&str, &str)]) -> StoreResult<()> {
        let (streams, entries): (Vec<&str>, Vec<&str>) = entries.iter().copied().unzip();
        let (tx, begin) = self.tx.client_to_begin()?;
        let label = "forget delivery counts";
        with_begin(tx, begin, label, tx.execute(&self.sql.deliveries.forget, &[&consumer, &streams, &entries]))
            .await?
            .map_err(|e| query_error(label, e))?;
        Ok(())
    }

    pub(super) async fn apply(&mut self, statements: &Merged<'_>, errors: &HandlerErrors) -> StoreResult<()> {
        let (tx, begin) = self.tx.client_to_begin()?;
        let run = run_statements(tx, statements, std::future::ready(()), errors);
        with_begin(tx, begin, "apply at take-over", run).await?.map_err(|e| match e {
            ApplyError::Handler { message, .. } => {
                StoreError::Rejected { statement: "apply at take-over", source: message.into() }
            }
            ApplyError::Store(e) => e,
        })
    }

    pub(super) async fn commit(self, carried: usize) -> StoreResult<()> {
        // A connection that carried a large batch keeps buffers of that size for its whole life:
        // close it rather than pool it, so the memory goes back.
        self.tx.commit("commit the takeover", carried > LARGE_BATCH_BYTES).await
    }

    pub(super) async fn roll_back(self) {
        self.tx.roll_back().await
    }
}

/// The reference insert of a batch, in runs of bounded payload bytes, each event PROCESSED where
/// `processed` says so (else its own status); the ids it inserted.
async fn insert_batch(
    tx: &Object,
    mut begin: bool,
    sql: &str,
    consumer: &str,
    events: &[InboxEvent],
    processed: &[bool],
) -> StoreResult<HashSet<String>> {
    let mut inserted = HashSet::new();
    if events.is_empty() {
        return Ok(inserted);
    }
    let insert = tx.prepare_cached(sql).await.map_err(|e| query_error("insert into the inbox", e))?;
    let mut offset = 0;
    for run in runs_by_payload(events, LARGE_BATCH_BYTES) {
        let statuses: Vec<&str> = run
            .iter()
            .zip(&processed[offset..])
            .map(|(e, applied)| if *applied { "PROCESSED" } else { e.status() })
            .collect();
        offset += run.len();
        // Borrowed, not cloned: a payload is copied once, into the message to the server.
        let text = |f: fn(&InboxEvent) -> &str| run.iter().map(f).collect::<Vec<&str>>();
        let maybe = |f: fn(&InboxEvent) -> Option<&str>| run.iter().map(f).collect::<Vec<Option<&str>>>();
        // The first run carries the transaction's BEGIN, if it is still to go; the parameters
        // live until the end of the statement, past the query's reply.
        let (label, begin_now) = ("insert into the inbox", std::mem::take(&mut begin));
        let rows = with_begin(
            tx,
            begin_now,
            label,
            tx.query(
                &insert,
                &[
                    &consumer,
                    &text(|e| &e.event_id),
                    &text(|e| &e.event_type),
                    &maybe(|e| e.owner.as_deref()),
                    &maybe(|e| e.aggregate_type.as_deref()),
                    &maybe(|e| e.aggregate_id.as_deref()),
                    &text(|e| e.payload.as_str()),
                    &text(|e| e.headers.as_str()),
                    &text(|e| e.fields.as_str()),
                    &text(|e| &e.content_hash),
                    &text(|e| &e.stream),
                    &text(|e| &e.entry_id),
                    &statuses,
                ],
            ),
        )
        .await?
        .map_err(|e| query_error(label, e))?;
        inserted.extend(rows.iter().map(|r| r.get::<_, String>(0)));
    }
    Ok(inserted)
}

/// The reference poison insert of every record at once.
async fn poison_batch(tx: &Object, sql: &str, consumer: &str, records: &[PoisonRecord]) -> StoreResult<()> {
    let get = |f: fn(&PoisonRecord) -> Option<String>| records.iter().map(f).collect::<Vec<_>>();
    tx.execute(
        sql,
        &[
            &consumer,
            &get(|p| Some(p.stream.clone())),
            &get(|p| Some(p.entry_id.clone())),
            &get(|p| p.event_id.clone()),
            &get(|p| Some(p.reason.as_str().to_owned())),
            &get(|p| Some(crate::error::storable(&p.detail, DETAIL_MAX_CHARS))),
            &get(|p| Some(p.fields.to_string())),
        ],
    )
    .await
    .map_err(|e| query_error("record poison entries", e))?;
    Ok(())
}
