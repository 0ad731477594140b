//! `handoff migrate`: applies the reference schema, once per version, under an advisory lock so
//! replicas starting together do not race. Each version is cut into parts (`parts`): a role gets
//! only the parts it needs, and a part applied on its own is recorded on its own.

pub(crate) mod parts;

use std::collections::{BTreeSet, HashSet};

use parts::Part;

use deadpool_postgres::Pool;
use tracing::info;

use crate::store::Database;
use crate::store::error::MigrateError;
use crate::store::mysql::errors::error;
use crate::store::postgres::errors::{pool_error, query_error};

/// Applies the reference schema's `parts` (see `parts`) to `database`; returns what was
/// applied now.
pub async fn apply(
    database: &Database,
    layout: OutboxLayout,
    parts: &BTreeSet<Part>,
) -> Result<Vec<String>, MigrateError> {
    match (database, layout) {
        (Database::Postgres(pool), _) => postgres_parts(pool, layout, parts).await,
        (Database::Mysql(pool), OutboxLayout::Plain) => mysql_parts(pool, parts).await,
        (Database::Mysql(_), OutboxLayout::Partitioned) => Err(MigrateError::Layout(
            "--partitioned: a partitioned outbox needs Postgres (on MariaDB, relay.retention deletes delivered rows)"
                .into(),
        )),
    }
}

/// The Postgres reference schema, in order. Each file is idempotent on its own as well.
pub(crate) const POSTGRES: &[(&str, &str)] = &[
    ("0001_audit_outbox", include_str!("../../migrations/postgres/0001_audit_outbox.sql")),
    ("0002_consumer_inbox", include_str!("../../migrations/postgres/0002_consumer_inbox.sql")),
    ("0003_audit_logs", include_str!("../../migrations/postgres/0003_audit_logs.sql")),
    ("0004_outbox_extras", include_str!("../../migrations/postgres/0004_outbox_extras.sql")),
    ("0005_queue_vacuum", include_str!("../../migrations/postgres/0005_queue_vacuum.sql")),
    ("0006_settled_guard", include_str!("../../migrations/postgres/0006_settled_guard.sql")),
    ("0007_poison_redrive", include_str!("../../migrations/postgres/0007_poison_redrive.sql")),
    ("0008_outbox_stream_key", include_str!("../../migrations/postgres/0008_outbox_stream_key.sql")),
    ("0009_inbox_fields", include_str!("../../migrations/postgres/0009_inbox_fields.sql")),
    ("0010_inbox_deliveries", include_str!("../../migrations/postgres/0010_inbox_deliveries.sql")),
    ("0011_pauses", include_str!("../../migrations/postgres/0011_pauses.sql")),
    ("0012_replays", include_str!("../../migrations/postgres/0012_replays.sql")),
    ("0013_stream_shards", include_str!("../../migrations/postgres/0013_stream_shards.sql")),
    ("0014_outbox_notify", include_str!("../../migrations/postgres/0014_outbox_notify.sql")),
];

/// `migrate --partitioned`: the versions whose text differs for an outbox partitioned by range
/// of `created_at` (the others are the same for both layouts).
pub(crate) const POSTGRES_PARTITIONED: &[(&str, &str)] = &[
    ("0001_audit_outbox", include_str!("../../migrations/postgres/partitioned/0001_audit_outbox.sql")),
    ("0005_queue_vacuum", include_str!("../../migrations/postgres/partitioned/0005_queue_vacuum.sql")),
];

/// The outbox a migration creates: one table, or one partitioned by time (Postgres).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutboxLayout {
    #[default]
    Plain,
    Partitioned,
}

/// The Postgres versions, in order, for `layout`.
pub(crate) fn postgres_versions(layout: OutboxLayout) -> Vec<(&'static str, &'static str)> {
    POSTGRES
        .iter()
        .map(|&(version, sql)| match layout {
            OutboxLayout::Plain => (version, sql),
            OutboxLayout::Partitioned => {
                POSTGRES_PARTITIONED.iter().find(|(v, _)| *v == version).map_or((version, sql), |&(v, s)| (v, s))
            }
        })
        .collect()
}

/// The MySQL / MariaDB reference schema, in order; each file is idempotent.
pub(crate) const MYSQL: &[(&str, &str)] = &[
    ("0001_audit_outbox", include_str!("../../migrations/mysql/0001_audit_outbox.sql")),
    ("0002_consumer_inbox", include_str!("../../migrations/mysql/0002_consumer_inbox.sql")),
    ("0003_audit_logs", include_str!("../../migrations/mysql/0003_audit_logs.sql")),
    ("0004_poison_redrive", include_str!("../../migrations/mysql/0004_poison_redrive.sql")),
    ("0005_outbox_stream_key", include_str!("../../migrations/mysql/0005_outbox_stream_key.sql")),
    ("0006_inbox_fields", include_str!("../../migrations/mysql/0006_inbox_fields.sql")),
    ("0007_inbox_deliveries", include_str!("../../migrations/mysql/0007_inbox_deliveries.sql")),
    ("0008_pauses", include_str!("../../migrations/mysql/0008_pauses.sql")),
    ("0009_replays", include_str!("../../migrations/mysql/0009_replays.sql")),
    ("0010_stream_shards", include_str!("../../migrations/mysql/0010_stream_shards.sql")),
];

/// Applies the MySQL versions' `parts` not yet recorded. DDL commits implicitly in MySQL, so
/// each file is idempotent and a named lock (not a transaction) keeps replicas from running it
/// together.
pub(crate) async fn mysql_parts(
    pool: &crate::store::mysql::pool::Pool,
    wanted: &BTreeSet<Part>,
) -> Result<Vec<String>, MigrateError> {
    use mysql_async::prelude::Queryable;
    let e = |e| error("migrate", e);
    let mut conn = pool.get_conn().await.map_err(e)?;
    let locked: Option<i64> = conn.query_first("SELECT GET_LOCK('handoff_migrate', 60)").await.map_err(e)?;
    if locked != Some(1) {
        return Err(MigrateError::Locked);
    }
    conn.query_drop(
        "CREATE TABLE IF NOT EXISTS handoff_schema_migrations (
             version    VARCHAR(64) NOT NULL PRIMARY KEY,
             applied_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
         ) ENGINE = InnoDB",
    )
    .await
    .map_err(e)?;
    let done: Vec<String> = conn.query("SELECT version FROM handoff_schema_migrations").await.map_err(e)?;
    let done: HashSet<String> = done.into_iter().collect();
    let mut applied = Vec::new();
    for (version, sql) in MYSQL {
        for (part, record, text) in to_apply(version, sql, wanted, &done) {
            let statements = crate::sql::params::split_statements(&text, crate::sql::params::Placeholder::Positional)
                .map_err(|source| MigrateError::Scan { version, source })?;
            for statement in statements {
                let run = conn.query_drop(statement).await;
                run.map_err(|source| MigrateError::Version { version, source: e(source) })?;
            }
            conn.exec_drop("INSERT INTO handoff_schema_migrations (version) VALUES (?)", (&record,))
                .await
                .map_err(e)?;
            info!(version, part = part.name(), "migration applied");
            applied.push(record);
        }
    }
    conn.query_drop("DO RELEASE_LOCK('handoff_migrate')").await.map_err(e)?;
    Ok(applied)
}

/// The parts of `version` to apply now, each with what records it: the version's name when
/// the whole version is then applied (every part wanted, none applied on its own before), else
/// `version#part`. Nothing once the version, or the part, is recorded.
fn to_apply(version: &str, sql: &str, wanted: &BTreeSet<Part>, done: &HashSet<String>) -> Vec<(Part, String, String)> {
    if done.contains(version) {
        return Vec::new();
    }
    let cut = parts::split(sql);
    let pending: Vec<&(Part, String)> =
        cut.iter().filter(|(p, _)| !done.contains(&parts::recorded(version, *p))).collect();
    let whole = pending.len() == cut.len() && cut.iter().all(|(p, _)| wanted.contains(p));
    if whole {
        let text: String = cut.iter().map(|(_, t)| t.as_str()).collect();
        let first = cut.first().map_or(Part::Demo, |(p, _)| *p);
        return vec![(first, version.to_owned(), text)];
    }
    pending
        .into_iter()
        .filter(|(p, _)| wanted.contains(p))
        .map(|(p, text)| (*p, parts::recorded(version, *p), text.clone()))
        .collect()
}

/// Arbitrary constant identifying handoff's migration lock.
const LOCK_KEY: i64 = 0x68616e646f6666;

/// Applies every part not yet recorded but the NOTIFY trigger, as `migrate --role all` does;
/// returns what was applied now.
pub async fn postgres(pool: &Pool) -> Result<Vec<String>, MigrateError> {
    postgres_with(pool, OutboxLayout::Plain).await
}

/// Like `postgres_parts`, every part but the NOTIFY trigger (`Part::Notify`: only
/// `handoff migrate` with a relay that listens makes it).
pub async fn postgres_with(pool: &Pool, layout: OutboxLayout) -> Result<Vec<String>, MigrateError> {
    postgres_parts(pool, layout, &Part::ALL.into_iter().filter(|p| *p != Part::Notify).collect()).await
}

/// Applies the versions of `layout` not yet recorded; returns the ones applied now. A table
/// cannot become partitioned in place: asking for a partitioned outbox where a plain one
/// exists is refused, naming the way (docs/explanation/scaling.md).
pub(crate) async fn postgres_parts(
    pool: &Pool,
    layout: OutboxLayout,
    wanted: &BTreeSet<Part>,
) -> Result<Vec<String>, MigrateError> {
    let e = |e| query_error("migrate", e);
    let mut client = pool.get().await.map_err(|e| pool_error("migrate", e))?;
    let tx = client.transaction().await.map_err(e)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY]).await.map_err(e)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS handoff_schema_migrations (
             version    text PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(e)?;
    if layout == OutboxLayout::Partitioned {
        let plain: bool = tx
            .query_one(
                "SELECT to_regclass('audit_outbox') IS NOT NULL
                        AND NOT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass('audit_outbox'))",
                &[],
            )
            .await
            .map_err(e)?
            .get(0);
        if plain {
            return Err(MigrateError::Layout(
                "--partitioned: audit_outbox exists and is not partitioned; a table cannot be partitioned in place \
                 (docs/explanation/scaling.md, \"Partitioned outbox\"): create it where no outbox exists yet"
                    .into(),
            ));
        }
    }
    let rows = tx.query("SELECT version FROM handoff_schema_migrations", &[]).await.map_err(e)?;
    let done: HashSet<String> = rows.iter().map(|r| r.get(0)).collect();
    let mut applied = Vec::new();
    for (version, sql) in postgres_versions(layout) {
        for (part, record, text) in to_apply(version, sql, wanted, &done) {
            tx.batch_execute(&text).await.map_err(|source| MigrateError::Version { version, source: e(source) })?;
            tx.execute("INSERT INTO handoff_schema_migrations (version) VALUES ($1)", &[&record]).await.map_err(e)?;
            info!(version, part = part.name(), "migration applied");
            applied.push(record);
        }
    }
    tx.commit().await.map_err(e)?;
    Ok(applied)
}
