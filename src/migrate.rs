//! `handoff migrate`: applies the reference schema, once per version, under an advisory lock so
//! replicas starting together do not race.

use anyhow::Context;
use deadpool_postgres::Pool;
use tracing::info;

/// The Postgres reference schema, in order. Each file is idempotent on its own as well.
pub const POSTGRES: &[(&str, &str)] = &[
    ("0001_audit_outbox", include_str!("../migrations/postgres/0001_audit_outbox.sql")),
    ("0002_consumer_inbox", include_str!("../migrations/postgres/0002_consumer_inbox.sql")),
    ("0003_audit_logs", include_str!("../migrations/postgres/0003_audit_logs.sql")),
    ("0004_outbox_extras", include_str!("../migrations/postgres/0004_outbox_extras.sql")),
    ("0005_queue_vacuum", include_str!("../migrations/postgres/0005_queue_vacuum.sql")),
];

/// Arbitrary constant identifying handoff's migration lock.
const LOCK_KEY: i64 = 0x68616e646f6666;

/// Applies the versions not yet recorded; returns the ones applied now.
pub async fn postgres(pool: &Pool) -> anyhow::Result<Vec<&'static str>> {
    let mut client = pool.get().await.context("connecting to the database")?;
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY]).await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS handoff_schema_migrations (
             version    text PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await?;
    let mut applied = Vec::new();
    for (version, sql) in POSTGRES {
        let done = tx.query_opt("SELECT 1 FROM handoff_schema_migrations WHERE version = $1", &[version]).await?;
        if done.is_some() {
            continue;
        }
        tx.batch_execute(sql).await.with_context(|| format!("applying migration {version}"))?;
        tx.execute("INSERT INTO handoff_schema_migrations (version) VALUES ($1)", &[version]).await?;
        info!(version, "migration applied");
        applied.push(*version);
    }
    tx.commit().await?;
    Ok(applied)
}
