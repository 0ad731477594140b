//! The bridge's takeover on Postgres: one transaction inserts the new events of a batch
//! (`ON CONFLICT (consumer, event_id) DO NOTHING`), detects conflicting replays by content
//! hash, and records poison entries. The caller acknowledges only after it commits.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::Pool;

use super::{pool_error, query_error};
use crate::store::inbox::{
    Catalog, Columns, InboxEvent, InboxStore, PoisonRecord, Takeover, TakeoverSql, runs_by_payload,
};
use crate::store::{PrepareError, StoreResult};

/// Above this many payload bytes, a takeover's connection is closed after it, not pooled; and
/// the insert is sent in runs of at most this many payload bytes.
const LARGE_BATCH_BYTES: usize = 1 << 20;

pub struct PgInbox {
    pool: Pool,
    sql: TakeoverSql,
}

impl PgInbox {
    pub fn new(pool: Pool, table: &str, poison_table: &str) -> Self {
        Self { pool, sql: TakeoverSql::new(table, poison_table, statements) }
    }

    /// Checks the tables' columns and prepares the takeover statements.
    pub async fn check(&self) -> Result<(), PrepareError> {
        let client = self
            .pool
            .get()
            .await
            .map_err(|e| PrepareError::Unreachable(format!("cannot connect to the database: {e}")))?;
        self.sql.check(&mut PgCatalog(&client)).await
    }
}

/// Insert-if-absent of a whole batch in one statement (`unnest` of one array per column).
fn statements(inbox: Columns<'_>, poison: Columns<'_>) -> [String; 3] {
    let (table, columns) = (inbox.table, inbox.list);
    let (poison_table, poison_columns) = (poison.table, poison.list);
    [
        format!(
            "INSERT INTO {table} ({columns})
             SELECT $1, e.event_id, e.event_type, e.owner, e.aggregate_type, e.aggregate_id,
                    e.payload::jsonb, e.headers::jsonb, e.content_hash, e.stream, e.entry_id, e.status
             FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                         $8::text[], $9::text[], $10::text[], $11::text[], $12::text[])
                  AS e(event_id, event_type, owner, aggregate_type, aggregate_id, payload, headers,
                       content_hash, stream, entry_id, status)
             ON CONFLICT (consumer, event_id) DO NOTHING
             RETURNING event_id"
        ),
        format!("SELECT event_id, content_hash FROM {table} WHERE consumer = $1 AND event_id = ANY($2)"),
        format!(
            "INSERT INTO {poison_table} ({poison_columns})
             SELECT $1, p.stream, p.entry_id, p.event_id, p.reason, p.detail, p.fields::jsonb
             FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
                  AS p(stream, entry_id, event_id, reason, detail, fields)
             ON CONFLICT (consumer, stream, stream_entry_id) DO NOTHING"
        ),
    ]
}

struct PgCatalog<'a>(&'a deadpool_postgres::Client);

impl Catalog for PgCatalog<'_> {
    async fn columns(&mut self, table: &str) -> Result<Vec<String>, PrepareError> {
        let rows = self
            .0
            .query(
                "SELECT attname::text FROM pg_attribute
                 WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped",
                &[&table],
            )
            .await
            .map_err(|e| PrepareError::Unreachable(format!("reading the catalog: {}", super::describe(&e))))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn refusal(&mut self, context: &str, sql: &str) -> Result<Option<String>, PrepareError> {
        match self.0.prepare(sql).await {
            Ok(_) => Ok(None),
            Err(e) => super::prepare_refusal(context, e).map(Some),
        }
    }
}

impl InboxStore for PgInbox {
    async fn take_over(
        &self,
        consumer: &str,
        events: &[InboxEvent],
        poison: &[PoisonRecord],
    ) -> StoreResult<Vec<Takeover>> {
        let mut client = self.pool.get().await.map_err(|e| pool_error("take over", e))?;
        let tx = client.transaction().await.map_err(|e| query_error("take over", e))?;
        let mut inserted = HashSet::new();
        if !events.is_empty() {
            let insert =
                tx.prepare_cached(&self.sql.insert).await.map_err(|e| query_error("insert into the inbox", e))?;
            for run in runs_by_payload(events, LARGE_BATCH_BYTES) {
                // Borrowed, not cloned: a payload is copied once, into the message to the server.
                let text = |f: fn(&InboxEvent) -> &str| run.iter().map(f).collect::<Vec<&str>>();
                let maybe = |f: fn(&InboxEvent) -> Option<&str>| run.iter().map(f).collect::<Vec<Option<&str>>>();
                let rows = tx
                    .query(
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
                            &text(|e| &e.content_hash),
                            &text(|e| &e.stream),
                            &text(|e| &e.entry_id),
                            &text(|e| if e.ignored { "IGNORED" } else { "PENDING" }),
                        ],
                    )
                    .await
                    .map_err(|e| query_error("insert into the inbox", e))?;
                inserted.extend(rows.iter().map(|r| r.get::<_, String>(0)));
            }
        }
        let others: Vec<String> =
            events.iter().filter(|e| !inserted.contains(&e.event_id)).map(|e| e.event_id.clone()).collect();
        let existing: HashMap<String, String> = if others.is_empty() {
            HashMap::new()
        } else {
            tx.query(&self.sql.existing, &[&consumer, &others])
                .await
                .map_err(|e| query_error("read existing inbox rows", e))?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect()
        };
        let mut outcomes = Vec::with_capacity(events.len());
        let mut records: Vec<PoisonRecord> = poison.to_vec();
        for event in events {
            let existing_hash = existing.get(&event.event_id).map(String::as_str);
            outcomes.push(Takeover::judge(event, inserted.contains(&event.event_id), existing_hash, &mut records));
        }
        if !records.is_empty() {
            let get = |f: fn(&PoisonRecord) -> Option<String>| records.iter().map(f).collect::<Vec<_>>();
            tx.execute(
                &self.sql.poison,
                &[
                    &consumer,
                    &get(|p| Some(p.stream.clone())),
                    &get(|p| Some(p.entry_id.clone())),
                    &get(|p| p.event_id.clone()),
                    &get(|p| Some(p.reason.to_owned())),
                    &get(|p| Some(p.detail.clone())),
                    &get(|p| Some(p.fields.to_string())),
                ],
            )
            .await
            .map_err(|e| query_error("record poison entries", e))?;
        }
        tx.commit().await.map_err(|e| query_error("commit the takeover", e))?;
        // A connection that carried a large batch keeps buffers of that size for its whole life:
        // close it rather than pool it, so the memory goes back.
        let carried: usize = events.iter().map(|e| e.payload.as_bytes().len()).sum();
        if carried > LARGE_BATCH_BYTES {
            drop(deadpool_postgres::Object::take(client));
        }
        Ok(outcomes)
    }

    async fn ping(&self) -> StoreResult<()> {
        super::probe(&self.pool).await
    }
}
