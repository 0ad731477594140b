//! Relay throughput (the real binary), its limits (claim + settle alone; pipelined XADD alone)
//! and the seed's per-row dispatcher as a baseline.

use std::time::{Duration, Instant};

use fred::prelude::*;

use crate::env::{BenchEnv, appended, postgres_cpu_seconds, resources, stop};
use handoff::Database;
use handoff::RedisStream;
use handoff::load_str;
use handoff::postgres_pool as pool;
use handoff::{AppendOptions, Entry, EventStream};
use handoff::{ClaimedRow, Delivered, Outbox, OutboxStore};

/// One throughput run: rows/s, peak RSS (kB) and CPU seconds of the busiest relay process.
#[derive(Debug, Clone, Copy, Default)]
pub struct Run {
    /// Delivered rows per second from the first entry on.
    pub rows_per_sec: f64,
    /// From the process's start to its first entry.
    pub startup: Duration,
    pub peak_rss_kb: u64,
    pub cpu_seconds: f64,
    /// CPU seconds of the Postgres server over the run.
    pub pg_cpu_seconds: f64,
    /// CPU seconds of the Redis server over the run.
    pub redis_cpu_seconds: f64,
    /// Autovacuum passes over the outbox that overlapped the run (finished during it or still
    /// under way at its end). Each reads the whole table or every index once: a fixed cost that
    /// the run's rows pay, more the shorter the run and the larger the table.
    pub autovacuum_passes: i64,
}

/// How long a relay took to deliver its first entry, and its rate from then on.
pub struct Timed {
    pub startup: Duration,
    pub rows_per_sec: f64,
}

/// Waits until the stream holds `n` entries and no row is open. The rate is timed from the
/// first entry seen in the stream (entries appended by then are not counted), as the SQL limits,
/// the bridge and the worker are: the process's start (connecting, preparing, the first leased
/// turn) is reported as its own figure instead of being spread over the events.
pub async fn until_settled(env: &BenchEnv, stream: &str, n: usize) -> anyhow::Result<Timed> {
    let started = Instant::now();
    let limit = Duration::from_secs(600);
    let mut first: Option<(Instant, u64)> = None;
    loop {
        let appended = env.xlen(stream).await?;
        let now = Instant::now();
        if first.is_none() && appended > 0 {
            anyhow::ensure!(
                appended < n as u64,
                "all {n} entries appended before a first observation; use more events"
            );
            first = Some((now, appended));
        }
        if let Some((at, from)) = first
            && appended >= n as u64
            && env.open_rows().await? == 0
        {
            let elapsed = Instant::now() - at;
            return Ok(Timed { startup: at - started, rows_per_sec: (n as u64 - from) as f64 / elapsed.as_secs_f64() });
        }
        anyhow::ensure!(started.elapsed() < limit, "not done within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn relay_config(env: &BenchEnv, batch: u32, extra: &str) -> String {
    format!(
        "{}[[relay]]\nname = \"bench\"\nstream = \"{}\"\nbatch_size = {batch}\npoll_interval = \"50ms\"\n{extra}\n",
        env.base_config(),
        env.stream("{aggregate_type}")
    )
}

/// Fills `n` events and times `instances` relay processes until all are in the stream and settled.
pub async fn throughput(env: &BenchEnv, n: usize, batch: u32, instances: usize, extra: &str) -> anyhow::Result<Run> {
    env.reset().await?;
    env.fill(n, "t").await?;
    let stream = env.stream("user");
    let config = relay_config(env, batch, extra);
    let pg_cpu = postgres_cpu_seconds();
    let redis_cpu = env.redis_cpu_seconds().await?;
    let mut children: Vec<_> =
        (0..instances).map(|i| env.spawn(&format!("relay-{batch}-{i}"), &config)).collect::<Result<_, _>>()?;
    let timed = until_settled(env, &stream, n).await?;
    let pg_cpu_seconds = postgres_cpu_seconds() - pg_cpu;
    let redis_cpu_seconds = env.redis_cpu_seconds().await? - redis_cpu;
    let usage: Vec<(u64, f64)> = children.iter().map(|c| resources(c.id())).collect();
    children.iter_mut().for_each(stop);
    env.ensure_none_dead().await?;
    Ok(Run {
        rows_per_sec: timed.rows_per_sec,
        startup: timed.startup,
        peak_rss_kb: usage.iter().map(|u| u.0).max().unwrap_or(0),
        cpu_seconds: usage.iter().map(|u| u.1).sum(),
        pg_cpu_seconds,
        redis_cpu_seconds,
        ..Run::default()
    })
}

/// The SQL limit: the relay's own claim and mark-delivered statements back to back, no Redis,
/// in `loops` concurrent loops (as a relay with that concurrency runs them), in rows/s, and the
/// CPU it used per row: Postgres's and the benchmark's own (the client running the statements),
/// in µs — beside a relay's CPU per row in all its processes, how far a machine whose cores both
/// run is from letting the relay reach the limit. `locked`: the locked claim's transaction (lock,
/// mark, commit) instead of claim + mark; `extra`: more of the relay's settings (`settle =
/// "delete"`: the settle deletes instead of marking).
pub async fn sql_limit(
    env: &BenchEnv,
    n: usize,
    batch: u32,
    loops: usize,
    locked: bool,
    extra: &str,
) -> anyhow::Result<(f64, f64)> {
    env.reset().await?;
    env.fill(n, "s").await?;
    let claim = if locked { "claim = \"locked\"" } else { "" };
    let config = load_str(&relay_config(env, batch, &format!("{claim}\n{extra}")))?;
    let pool = pool(&config.database, "handoff-bench")?;
    let store =
        Outbox::prepare(&Database::Postgres(pool), &config.relays[0]).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let (pg_cpu, own_cpu) = (postgres_cpu_seconds(), resources(std::process::id()).1);
    let started = Instant::now();
    let delivered = |rows: &[ClaimedRow]| -> Vec<Delivered> {
        rows.iter().map(|r| Delivered { row: r.key(), entry_id: "0-1".into(), stream: "bench:limit".into() }).collect()
    };
    let one_loop = |name: String| {
        let store = &store;
        async move {
            let mut done = 0;
            loop {
                if locked {
                    let (rows, batch) = store.lock(batch, Duration::from_secs(30)).await?;
                    let Some(batch) = batch else { return anyhow::Ok(done) };
                    batch.commit(&name, &delivered(&rows), &[], &Default::default()).await?;
                    done += rows.len();
                } else {
                    let rows = store.claim(&name, batch, Duration::from_secs(30)).await?;
                    if rows.is_empty() {
                        return anyhow::Ok(done);
                    }
                    done += store.settle_delivered(&name, &delivered(&rows)).await? as usize;
                }
            }
        }
    };
    let counts = futures_util::future::join_all((0..loops).map(|i| one_loop(format!("bench-limit#{i}")))).await;
    let done: usize = counts.into_iter().collect::<anyhow::Result<Vec<_>>>()?.into_iter().sum();
    anyhow::ensure!(done == n, "settled {done} of {n}");
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let cpu = postgres_cpu_seconds() - pg_cpu + resources(std::process::id()).1 - own_cpu;
    Ok((rate, cpu / n as f64 * 1e6))
}

/// The Redis limit: the relay's pipelined XADD of batches of `batch` entries, no database.
pub async fn redis_limit(env: &BenchEnv, n: usize, batch: u32) -> anyhow::Result<f64> {
    env.reset().await?;
    let config = load_str(&relay_config(env, batch, ""))?;
    let (stream, _) = RedisStream::connect(&config.redis).await?;
    let payload = format!(r#"{{"actor":"admin@example.com","reason":"{}"}}"#, "x".repeat(160));
    let entry = |i: usize| Entry {
        stream: env.stream("user"),
        fields: vec![
            ("event_id".into(), format!("r-{i}").into()),
            ("event_type".into(), "auth.mfa_policy_changed".into()),
            ("aggregate_type".into(), "user".into()),
            ("aggregate_id".into(), format!("user-{}", i % 1000).into()),
            ("payload".into(), payload.clone().into()),
            ("headers".into(), r#"{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}"#.into()),
            ("owner".into(), "bench".into()),
        ],
        event_id: format!("r-{i}"),
        run: None,
        trace: None,
    };
    let started = Instant::now();
    let mut i = 0;
    while i < n {
        let entries: Vec<Entry> = (i..(i + batch as usize).min(n)).map(entry).collect();
        stream.append(&entries, &AppendOptions::default()).await;
        i += entries.len();
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// The seed's dispatcher: select 50 pending, then per row claim, XADD, mark delivered.
pub async fn per_row_baseline(env: &BenchEnv, n: usize) -> anyhow::Result<f64> {
    env.reset().await?;
    env.fill(n, "b").await?;
    let stream = env.stream("user");
    let started = Instant::now();
    let mut done = 0;
    loop {
        let rows = env
            .db
            .query(
                "SELECT id, event_id, event_type, payload::text FROM audit_outbox
                 WHERE status = 'PENDING' AND next_attempt_at <= now() ORDER BY id LIMIT 50",
                &[],
            )
            .await?;
        if rows.is_empty() {
            break;
        }
        for row in rows {
            let id: i64 = row.get(0);
            let claimed = env
                .db
                .execute(
                    "UPDATE audit_outbox SET status = 'IN_FLIGHT', claimed_by = 'baseline',
                         lease_expires_at = now() + interval '30 seconds' WHERE id = $1 AND status = 'PENDING'",
                    &[&id],
                )
                .await?;
            if claimed == 0 {
                continue;
            }
            let fields: Vec<(&str, String)> =
                vec![("event_id", row.get(1)), ("event_type", row.get(2)), ("payload", row.get(3))];
            let entry_id: String = env.redis.xadd(stream.as_str(), false, None::<()>, "*", fields).await?;
            env.db
                .execute(
                    "UPDATE audit_outbox SET status = 'DELIVERED', delivered_at = now(), stream_entry_id = $2 WHERE id = $1",
                    &[&id, &entry_id],
                )
                .await?;
            done += 1;
        }
    }
    anyhow::ensure!(done == n, "baseline delivered {done} of {n}");
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// Throughput with the outbox already holding `history` delivered rows and the dead tuples
/// their delivery left, under the server's own vacuum settings (printed with the results: on a
/// server without autovacuum the dead tuples stay for the whole run; with production defaults
/// autovacuum works on the table meanwhile, as it would in production).
///
/// With `vacuumed`, a `VACUUM ANALYZE` and a `CHECKPOINT` run before the relay starts: the
/// steady state of a table whose history grew over days, that autovacuum has visited and whose
/// pages were written back long ago, rather than the moment right after a bulk change (whose
/// gigabyte of WAL would otherwise force checkpoints, and full-page writes, into the run). The
/// clean-table reference is this with `history` 0, so both pay for the same steps.
pub async fn bloated(env: &BenchEnv, n: usize, history: usize, batch: u32, vacuumed: bool) -> anyhow::Result<Run> {
    env.reset().await?;
    env.fill(history, "h").await?;
    env.db
        .batch_execute("UPDATE audit_outbox SET status = 'DELIVERED', delivered_at = now(), stream_entry_id = '0-1'")
        .await?;
    if vacuumed {
        env.db.batch_execute("VACUUM ANALYZE audit_outbox").await?;
    }
    env.fill(n, "t").await?;
    if vacuumed && let Err(e) = env.db.batch_execute("CHECKPOINT").await {
        eprintln!(
            "bench: CHECKPOINT before the vacuumed history run failed ({e}); the run may pay for the setup's writes"
        );
    }
    let stream = env.stream("user");
    let (finished_before, _) = env.autovacuum_passes().await?;
    let pg_cpu = postgres_cpu_seconds();
    let mut child = env.spawn("relay-bloat", &relay_config(env, batch, "concurrency = 2"))?;
    let timed = until_settled(env, &stream, n).await;
    let (peak_rss_kb, cpu_seconds) = resources(child.id());
    stop(&mut child);
    let pg_cpu_seconds = postgres_cpu_seconds() - pg_cpu;
    let timed = timed?;
    let (finished_after, running) = env.autovacuum_passes().await?;
    env.ensure_none_dead().await?;
    Ok(Run {
        rows_per_sec: timed.rows_per_sec,
        startup: timed.startup,
        peak_rss_kb,
        cpu_seconds,
        pg_cpu_seconds,
        autovacuum_passes: finished_after - finished_before + running,
        ..Run::default()
    })
}

/// One sustained run: the delivered rate of each 30-second window, in order.
pub struct Sustained {
    pub windows: Vec<f64>,
}

/// A relay (the default config, streams trimmed to 100,000 entries so Redis stays small) keeps
/// up with an outbox a producer refills for `duration`, the delivered history growing all the
/// while. The producer keeps about 100,000 rows pending, so the relay never waits for work. Both
/// count from the stream (entries ever appended), not from the outbox: the producer's count of
/// PENDING rows walked every entry delivered rows had left in the partial index since the last
/// vacuum, five times a second, and took a growing share of the cores from the relay it measured.
pub async fn sustained(env: &BenchEnv, duration: Duration, extra: &str) -> anyhow::Result<Sustained> {
    const WINDOW: Duration = Duration::from_secs(30);
    env.reset().await?;
    let stream = env.stream("user");
    let inserted = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let done = tokio_util::sync::CancellationToken::new();
    let (producer_db, conn) = tokio_postgres::connect(&env.database_url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    let producer = {
        let (inserted, done, broker, stream) = (inserted.clone(), done.clone(), env.broker.clone(), stream.clone());
        tokio::spawn(async move {
            let mut next = 0_i64;
            while !done.is_cancelled() {
                if next - appended(&broker, &stream).await? > 100_000 {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                let n = producer_db
                    .execute(
                        "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers)
                         SELECT 's-' || ($1::bigint + g), 'user', 'user-' || (($1::bigint + g) % 1000),
                                'auth.mfa_policy_changed',
                                jsonb_build_object('auditId', 's-' || ($1::bigint + g), 'actor', 'admin@example.com',
                                                   'reason', repeat(md5(g::text), 5)),
                                '{\"traceparent\": \"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\"}'
                         FROM generate_series(1, 20000) g",
                        &[&next],
                    )
                    .await?;
                next += n as i64;
                inserted.store(next, std::sync::atomic::Ordering::Relaxed);
            }
            anyhow::Ok(())
        })
    };
    // A backlog before the relay starts, so its first window is not spent waiting.
    while inserted.load(std::sync::atomic::Ordering::Relaxed) < 100_000 {
        if producer.is_finished() {
            return producer.await?.and(Err(anyhow::anyhow!("the producer stopped")));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let config = relay_config(env, 500, &format!("{extra}\n[relay.trim]\nmaxlen = 100000"));
    let mut child = env.spawn("relay-sustained", &config)?;
    // (delivered so far, rows not yet appended)
    let progress = || async {
        let appended = env.appended(&stream).await?;
        anyhow::Ok((appended, inserted.load(std::sync::atomic::Ordering::Relaxed) - appended))
    };
    let started = Instant::now();
    let mut windows = Vec::new();
    let (mut before, _) = progress().await?;
    let mut server = env.server_activity().await?;
    while started.elapsed() < duration {
        // The smallest backlog seen in the window, once a second: a window whose backlog ran
        // dry measured the producer, not the relay.
        let mut backlog = i64::MAX;
        let window = Instant::now();
        while window.elapsed() < WINDOW {
            tokio::time::sleep(Duration::from_secs(1)).await;
            backlog = backlog.min(progress().await?.1);
        }
        anyhow::ensure!(!producer.is_finished(), "the producer stopped");
        let (now, _) = progress().await?;
        windows.push((now - before) as f64 / window.elapsed().as_secs_f64());
        let activity = env.server_activity().await?;
        let spent = activity.since(&server);
        let rows = (now - before).max(1) as f64;
        eprintln!(
            "  sustained  window {:>2}: {:>8.0} rows/s, smallest backlog {backlog}, {now} delivered so far; Postgres {:.1} µs CPU, {:.0} B WAL, {:.2} full-page images per row; {} checkpoints, {} autovacuum passes",
            windows.len(),
            windows[windows.len() - 1],
            spent.cpu_seconds * 1e6 / rows,
            spent.wal_bytes as f64 / rows,
            spent.wal_fpi as f64 / rows,
            spent.checkpoints,
            spent.autovacuum_passes,
        );
        (before, server) = (now, activity);
    }
    stop(&mut child);
    stop_producer(done, producer).await?;
    Ok(Sustained { windows })
}

async fn stop_producer(
    done: tokio_util::sync::CancellationToken,
    producer: tokio::task::JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<()> {
    done.cancel();
    producer.await?
}
