//! A Postgres outbox partitioned by range of `created_at` as housekeeping sees it
//! (`PartitionedOutbox`): creating, dropping and inspecting its partitions. Every change runs in
//! one transaction that first takes the outbox's own lock (ACCESS EXCLUSIVE, for at most
//! `LOCK_TIMEOUT`): claims take the outbox before its partitions, so taking a partition first
//! and the outbox second could deadlock with them. The relay's claims wait that long at most,
//! once per created or dropped partition.

use std::time::Duration;

use deadpool_postgres::Pool;

use super::plan::Span;
use crate::store::database::Database;
use crate::store::error::StoreResult;
use crate::store::param::millis;
use crate::store::postgres::errors::{pool_error, query_error};
use crate::store::postgres::tx::OpenTx;

const LABEL: &str = "partitions";

/// How long a change waits for the outbox's lock before it gives up until the next pass.
const LOCK_TIMEOUT: &str = "3s";

/// The queue-vacuum settings of the reference schema (0005_queue_vacuum.sql), which a
/// partitioned table cannot hold itself: each partition gets them.
const VACUUM: &str = "autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000, \
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 20000, \
    autovacuum_analyze_scale_factor = 0.02";

/// One partition of the outbox as the catalog describes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Existing {
    /// As Postgres names it in SQL (schema-qualified when outside the search path).
    pub name: String,
    /// The default partition, which holds rows no other partition covers.
    pub default: bool,
    /// The end of its span, seconds since the epoch (none for the default partition).
    pub to: Option<f64>,
}

/// Why a partition past `drop_after` is kept: rows in it that are not settled, or were
/// delivered too recently.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Held {
    pub pending: i64,
    pub in_flight: i64,
    pub dead: i64,
    pub recently_delivered: i64,
}

impl Held {
    pub(crate) fn any(&self) -> bool {
        self.pending + self.in_flight + self.dead + self.recently_delivered > 0
    }
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} PENDING, {} IN_FLIGHT, {} DEAD, {} delivered within drop_after",
            self.pending, self.in_flight, self.dead, self.recently_delivered
        )
    }
}

/// What became of a partition past `drop_after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Dropped,
    Held(Held),
}

/// Why `table` cannot be kept as a partitioned outbox (not partitioned, or not by a range of
/// `created_at`); `None` when it can.
pub(super) async fn unfit(pool: &Pool, table: &str) -> StoreResult<Option<String>> {
    let client = pool.get().await.map_err(|e| pool_error(LABEL, e))?;
    let sql = "SELECT p.partstrat::text, p.partnatts::int, a.attname::text
               FROM pg_partitioned_table p
               JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
               WHERE p.partrelid = to_regclass($1)";
    let row = client.query_opt(sql, &[&table]).await.map_err(|e| query_error(LABEL, e))?;
    Ok(match row {
        None => Some(format!(
            "table `{table}` is not partitioned: relay.partitions needs an outbox created by `handoff migrate --partitioned` (docs/explanation/scaling.md, \"Partitioned outbox\")"
        )),
        Some(row)
            if row.get::<_, String>(0) != "r"
                || row.get::<_, i32>(1) != 1
                || row.get::<_, String>(2) != "created_at" =>
        {
            Some(format!(
                "table `{table}` is partitioned, but not by a range of created_at alone, which relay.partitions keeps"
            ))
        }
        Some(_) => None,
    })
}

/// What in `partition` keeps it from being dropped.
async fn holding(client: &tokio_postgres::Client, partition: &str, drop_after: Duration) -> StoreResult<Held> {
    // Each count reads one partial index of the reference schema, never the delivered rows.
    let sql = format!(
        "SELECT (SELECT count(*) FROM {partition} WHERE status = 'PENDING'),
                (SELECT count(*) FROM {partition} WHERE status = 'IN_FLIGHT'),
                (SELECT count(*) FROM {partition} WHERE status = 'DEAD'),
                (SELECT count(*) FROM {partition}
                 WHERE status = 'DELIVERED' AND delivered_at > now() - $1::bigint * interval '1 millisecond')"
    );
    let row = client.query_one(&sql, &[&millis(drop_after)]).await.map_err(|e| query_error(LABEL, e))?;
    Ok(Held { pending: row.get(0), in_flight: row.get(1), dead: row.get(2), recently_delivered: row.get(3) })
}

/// A partitioned outbox on Postgres, as housekeeping sees it.
pub struct PartitionedOutbox {
    pool: Pool,
    table: String,
}

impl PartitionedOutbox {
    /// `None` on a database that has no partitioned outboxes (MariaDB).
    pub fn new(db: &Database, table: &str) -> Option<Self> {
        match db {
            Database::Postgres(pool) => Some(Self { pool: pool.clone(), table: table.to_owned() }),
            Database::Mysql(_) => None,
        }
    }

    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// The partitions of the outbox, with where each span ends.
    pub(crate) async fn existing(&self) -> StoreResult<Vec<Existing>> {
        let (pool, table) = (&self.pool, &self.table);
        let client = pool.get().await.map_err(|e| pool_error(LABEL, e))?;
        // The catalog keeps each partition's bounds only as an expression; its upper bound is the
        // literal after TO, which the server reads back as a timestamp (in its own time zone).
        let sql = "SELECT c.oid::regclass::text,
                      pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT',
                      extract(epoch FROM substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \\(''([^'']+)''\\)')::timestamptz)::float8
               FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               WHERE i.inhparent = to_regclass($1)
               ORDER BY 3 NULLS LAST";
        let rows = client.query(sql, &[&table]).await.map_err(|e| query_error(LABEL, e))?;
        Ok(rows.iter().map(|r| Existing { name: r.get(0), default: r.get(1), to: r.get(2) }).collect())
    }

    /// Opens a transaction holding the outbox's lock, after any other housekeeping of the same
    /// outbox (another relay replica's) is done.
    async fn locked(&self) -> StoreResult<OpenTx> {
        let (pool, table) = (&self.pool, &self.table);
        let tx = OpenTx::begin(pool, LABEL, &format!("BEGIN; SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")).await?;
        let client = tx.client()?;
        client
            .execute("SELECT pg_advisory_xact_lock(hashtext('handoff partitions'), hashtext($1))", &[&table])
            .await
            .map_err(|e| query_error(LABEL, e))?;
        client
            .batch_execute(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
            .await
            .map_err(|e| query_error(LABEL, e))?;
        Ok(tx)
    }

    /// Creates the partition for `span` unless it exists. Rows the default partition holds in that
    /// span (inserted before the partition existed) move into it in the same transaction, ids and
    /// states unchanged. Returns whether it was created and how many rows moved.
    pub async fn create(&self, span: Span) -> StoreResult<Option<u64>> {
        let (pool, table) = (&self.pool, &self.table);
        let name = span.name(table);
        // Looked up first without a lock: a pass that finds every partition in place takes none.
        {
            let client = pool.get().await.map_err(|e| pool_error(LABEL, e))?;
            let sql = "SELECT to_regclass($1) IS NOT NULL";
            let exists: bool = client.query_one(sql, &[&name]).await.map_err(|e| query_error(LABEL, e))?.get(0);
            if exists {
                return Ok(None);
            }
        }
        let tx = self.locked().await?;
        let client = tx.client()?;
        let e = |e| query_error(LABEL, e);
        let exists: bool = client.query_one("SELECT to_regclass($1) IS NOT NULL", &[&name]).await.map_err(e)?.get(0);
        if exists {
            tx.commit(LABEL, false).await?;
            return Ok(None);
        }
        let (from, to) = span.bounds();
        let default: Option<String> = client
            .query_opt(
                "SELECT d.oid::regclass::text FROM pg_partitioned_table p JOIN pg_class d ON d.oid = p.partdefid
             WHERE p.partrelid = to_regclass($1)",
                &[&table],
            )
            .await
            .map_err(e)?
            .map(|r| r.get(0));
        // Creating a partition over rows the default partition holds fails; they move in instead.
        let mut moved = 0;
        if let Some(default) = &default {
            let within = format!("created_at >= {from} AND created_at < {to}");
            moved = client
                .execute(
                    &format!(
                        "CREATE TEMP TABLE handoff_moving ON COMMIT DROP AS SELECT * FROM {default} WHERE {within}"
                    ),
                    &[],
                )
                .await
                .map_err(e)?;
            if moved > 0 {
                client.batch_execute(&format!("DELETE FROM {default} WHERE {within}")).await.map_err(e)?;
            }
        }
        client
            .batch_execute(&format!(
                "CREATE TABLE {name} PARTITION OF {table} FOR VALUES FROM ({from}) TO ({to}) WITH ({VACUUM})"
            ))
            .await
            .map_err(e)?;
        if moved > 0 {
            client
                .batch_execute(&format!("INSERT INTO {table} OVERRIDING SYSTEM VALUE SELECT * FROM handoff_moving"))
                .await
                .map_err(e)?;
        }
        tx.commit(LABEL, false).await?;
        Ok(Some(moved))
    }

    /// Drops `partition` if every row in it is delivered, none within `drop_after`; otherwise says
    /// what holds it. Looked at once without locks (a held partition costs no lock), and again under
    /// the outbox's lock, which keeps any row from changing between the look and the drop.
    pub(crate) async fn drop_if_settled(&self, partition: &str, drop_after: Duration) -> StoreResult<Outcome> {
        {
            let client = self.pool.get().await.map_err(|e| pool_error(LABEL, e))?;
            let held = holding(&client, partition, drop_after).await?;
            if held.any() {
                return Ok(Outcome::Held(held));
            }
        }
        let tx = self.locked().await?;
        let client = tx.client()?;
        let held = holding(client, partition, drop_after).await?;
        if held.any() {
            tx.commit(LABEL, false).await?;
            return Ok(Outcome::Held(held));
        }
        client.batch_execute(&format!("DROP TABLE {partition}")).await.map_err(|e| query_error(LABEL, e))?;
        tx.commit(LABEL, false).await?;
        Ok(Outcome::Dropped)
    }

    /// Deletes up to `batch` rows of the default partition delivered more than `drop_after` ago:
    /// rows no partition covered are not dropped with one, so they are retained row by row.
    pub(crate) async fn purge_default(&self, default: &str, drop_after: Duration, batch: u32) -> StoreResult<u64> {
        let client = self.pool.get().await.map_err(|e| pool_error(LABEL, e))?;
        let sql = format!(
            "WITH old AS (
             SELECT id, created_at FROM {default}
             WHERE status = 'DELIVERED' AND delivered_at < now() - $1::bigint * interval '1 millisecond'
             ORDER BY delivered_at LIMIT $2 FOR UPDATE SKIP LOCKED)
         DELETE FROM {default} o USING old WHERE o.id = old.id AND o.created_at = old.created_at"
        );
        client.execute(&sql, &[&millis(drop_after), &i64::from(batch)]).await.map_err(|e| query_error(LABEL, e))
    }
}
