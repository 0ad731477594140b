//! Retention over a long history (`--only retention`): `--retention-history` delivered rows
//! spread over seven past days, then the relay delivering `--events` new ones, first with no
//! retention and then while retention removes the history: `[relay.retention]` deleting rows
//! on a plain outbox, `[relay.partitions]` dropping partitions on one partitioned by day.

use std::time::{Duration, Instant, SystemTime};

use crate::env::{BenchEnv, postgres_cpu_seconds, stop};
use crate::relay::{relay_config, until_settled};
use handoff::Database;
use handoff::OutboxLayout;
use handoff::{PartitionedOutbox, Span};

const DAY: Duration = Duration::from_secs(86_400);

/// One relay run over the history.
#[derive(Debug, Clone, Copy, Default)]
pub struct RetentionRun {
    pub rows_per_sec: f64,
    /// Postgres CPU per delivered row over the relay's run (retention's work included).
    pub pg_cpu_per_row_us: f64,
    /// From the relay's start until no delivered row older than a day is left (retention runs).
    pub cleared_seconds: Option<f64>,
    /// WAL written from the relay's start until then (or the end of the run).
    pub wal_bytes: i64,
}

/// The figures of one layout: the relay without retention, then with it.
pub struct Layout {
    pub without: RetentionRun,
    pub with: RetentionRun,
}

/// Builds a schema of `layout` holding `history` delivered rows (about 150-byte payloads,
/// created and delivered over days 2 to 8 back), vacuumed and checkpointed as a long-lived
/// table is, and runs the relay twice over it.
pub async fn layout(
    args: (&str, &str, std::path::PathBuf, std::path::PathBuf),
    layout: OutboxLayout,
    history: usize,
    n: usize,
) -> anyhow::Result<Layout> {
    let (base_url, redis_url, binary, dir) = args;
    let env = BenchEnv::with_layout(base_url, redis_url, binary, dir, layout).await?;
    if layout == OutboxLayout::Partitioned {
        let db = Database::connect(&env.database_config(), "handoff-bench")?;
        let outbox = PartitionedOutbox::new(&db, "audit_outbox").expect("Postgres");
        for days in 0..=9 {
            outbox.create(Span::holding(SystemTime::now() - DAY * days, DAY)).await?;
        }
        outbox.create(Span::holding(SystemTime::now() + DAY, DAY)).await?;
    }
    let started = Instant::now();
    let mut done = 0;
    while done < history {
        let chunk = (history - done).min(1_000_000);
        env.db
            .execute(
                "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at,
                                           status, delivered_at, stream_entry_id, stream_key)
                 SELECT 'h-' || ($1 + g), 'user', 'user-' || (g % 1000), 'auth.mfa_policy_changed',
                        jsonb_build_object('actor', 'admin@example.com', 'reason', repeat(md5(g::text), 3)),
                        now() - (2 + g % 7) * interval '1 day', 'DELIVERED',
                        now() - (2 + g % 7) * interval '1 day' + interval '1 minute', '0-1', 'audit:user'
                 FROM generate_series(1, $2::bigint) g",
                &[&(done as i64), &(chunk as i64)],
            )
            .await?;
        done += chunk;
    }
    env.db.batch_execute("VACUUM ANALYZE audit_outbox").await?;
    env.db.batch_execute("CHECKPOINT").await?;
    eprintln!("  retention  {layout:?}: {history} delivered rows written in {:.0} s", started.elapsed().as_secs_f64());
    // A partitioned outbox's relay always has `[relay.partitions]` (its settles depend on it);
    // "without retention" keeps every partition.
    let keep = match layout {
        OutboxLayout::Plain => "",
        OutboxLayout::Partitioned => "[relay.partitions]\ndrop_after = \"30d\"\nahead = 1\ninterval = \"1s\"\n",
    };
    let without = run(&env, n, "t", keep, false).await?;
    let retention = match layout {
        OutboxLayout::Plain => "[relay.retention]\ndelivered_after = \"1d\"\ninterval = \"1s\"\n",
        OutboxLayout::Partitioned => "[relay.partitions]\ndrop_after = \"1d\"\nahead = 1\ninterval = \"1s\"\n",
    };
    let with = run(&env, n, "r", retention, true).await?;
    env.drop_schema().await?;
    Ok(Layout { without, with })
}

/// Fills `n` events, runs one relay (`extra` in its `[[relay]]`) until they are delivered and,
/// with `retention`, until the history is gone.
async fn run(env: &BenchEnv, n: usize, prefix: &str, extra: &str, retention: bool) -> anyhow::Result<RetentionRun> {
    // Each run to a stream of its own: deleting the last run's would be, to the relay's
    // broker-loss watch, a broker losing what it had acknowledged.
    let kind = format!("user_{prefix}");
    let stream = env.stream(&kind);
    env.fill_as(n, prefix, &kind).await?;
    let (pg_cpu, wal) = (postgres_cpu_seconds(), env.wal_bytes().await?);
    let started = Instant::now();
    let mut child = env.spawn(&format!("relay-retention-{prefix}"), &relay_config(env, 500, extra))?;
    let timed = until_settled(env, &stream, n).await;
    let pg_cpu_per_row_us = (postgres_cpu_seconds() - pg_cpu) / n as f64 * 1e6;
    let mut cleared_seconds = None;
    if retention {
        let limit = Duration::from_secs(3600);
        loop {
            let old = "SELECT count(*) FROM (SELECT 1 FROM audit_outbox
                       WHERE status = 'DELIVERED' AND delivered_at < now() - interval '1 day' LIMIT 1) o";
            if env.scalar(old).await? == 0 {
                cleared_seconds = Some(started.elapsed().as_secs_f64());
                break;
            }
            if started.elapsed() > limit {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    stop(&mut child);
    let timed = timed?;
    env.ensure_none_dead().await?;
    Ok(RetentionRun {
        rows_per_sec: timed.rows_per_sec,
        pg_cpu_per_row_us,
        cleared_seconds,
        wal_bytes: env.wal_bytes().await? - wal,
    })
}
