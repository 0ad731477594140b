//! The consumer side: bridge and worker throughput against their own SQL limits, and the seed's
//! whole chain (outbox → relay → stream → bridge → inbox → worker → audit_logs).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::env::{BenchEnv, postgres_cpu_seconds, resources, stop};
use crate::relay::{Run, relay_config};
use handoff::Database;
use handoff::Faults;
use handoff::HandlerErrors;
use handoff::Inbox;
use handoff::Placeholder;
use handoff::RedisStream;
use handoff::load_str;
use handoff::postgres_pool as pool;
use handoff::{AppendOptions, Entry, EventStream};
use handoff::{BindValue, BoundStatement, EventInput, HandlerSql};
use handoff::{Effects, InboxEvent, Takeover, Text};

/// The seed's handler, per event.
const HANDLER: &str = "INSERT INTO audit_logs (audit_id, source, action, actor, detail) VALUES (:event_id, :owner, :event_type, :payload.actor, :payload) ON CONFLICT (audit_id) DO NOTHING";

/// The same handler written once for a batch (what config/demo.toml ships).
pub const BATCH_HANDLER: &str = "INSERT INTO audit_logs (audit_id, source, action, actor, detail) SELECT e.id, e.owner, e.type, e.payload ->> 'actor', e.payload FROM unnest(:event_ids::text[], :owners::text[], :event_types::text[], :payloads::jsonb[]) AS e(id, owner, type, payload) ON CONFLICT (audit_id) DO NOTHING";

/// How the consumer side applies the seed's handler.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The worker, the handler per event (before apply at take-over and batch handlers).
    Worker,
    /// The bridge, applying the batch handler at take-over; the worker only sees retries.
    AtTakeover,
}

fn bridge_section(env: &BenchEnv, batch: u32, mode: Mode) -> String {
    // Off by name: in one file with the worker, the bridge would apply by default.
    let apply = if mode == Mode::AtTakeover { "apply = \"bench\"\n" } else { "apply = \"off\"\n" };
    format!(
        "[[bridge]]\nname = \"bench\"\nconsumer = \"admin\"\nstreams = [{{ key = \"{}\", owner = \"bench\" }}]\nbatch_size = {batch}\nblock = \"100ms\"\n{apply}",
        env.stream("user")
    )
}

fn worker_section(batch: u32, mode: Mode) -> String {
    let handler = if mode == Mode::AtTakeover { BATCH_HANDLER } else { HANDLER };
    let section = worker_section_with("bench", "admin", handler);
    section.replacen(
        "[[worker.handler]]",
        &format!("batch_size = {batch}\npoll_interval = \"50ms\"\n[[worker.handler]]"),
        1,
    )
}

/// A `[[worker]]` named `name` for `consumer`'s inbox, running `handler` for every event type,
/// with the defaults otherwise.
pub fn worker_section_with(name: &str, consumer: &str, handler: &str) -> String {
    format!(
        "[[worker]]\nname = \"{name}\"\nconsumer = \"{consumer}\"\n[[worker.handler]]\nevent_types = [\"*\"]\nsql = [\"{handler}\"]\n"
    )
}

fn event(i: usize) -> (String, String) {
    let id = format!("c-{i}");
    (id.clone(), format!(r#"{{"auditId":"{id}","actor":"admin@example.com","reason":"{}"}}"#, "x".repeat(180)))
}

/// The `i`th valid event for a bridge run, as an entry of `stream`.
pub fn valid_entry(i: usize, stream: &str) -> Entry {
    let (id, payload) = event(i);
    Entry {
        stream: stream.to_owned(),
        fields: vec![
            ("event_id".into(), id.clone().into()),
            ("event_type".into(), "auth.mfa_policy_changed".into()),
            ("payload".into(), payload.into()),
            ("owner".into(), "bench".into()),
        ],
        event_id: id,
        run: None,
        trace: None,
    }
}

/// Bridge: `n` valid entries already in the stream, one bridge process, from its first takeover
/// until all are in the inbox (with `Mode::AtTakeover`: applied to audit_logs): the rate, the
/// process's peak RSS and CPU, and the Postgres and Redis servers' CPU over the run.
pub async fn bridge(env: &BenchEnv, n: usize, batch: u32, mode: Mode) -> anyhow::Result<Run> {
    env.reset().await?;
    let config = load_str(&env.base_config())?;
    let (stream, _) = RedisStream::connect(&config.redis).await?;
    for start in (0..n).step_by(1000) {
        let entries: Vec<Entry> = (start..(start + 1000).min(n)).map(|i| valid_entry(i, &env.stream("user"))).collect();
        stream.append(&entries, &AppendOptions::default()).await;
    }
    let (pg_cpu, redis_cpu) = (postgres_cpu_seconds(), env.redis_cpu_seconds().await?);
    let mut config = format!("{}{}", env.base_config(), bridge_section(env, batch, mode));
    if mode == Mode::AtTakeover {
        // The worker whose handler the bridge applies (it finds nothing to do).
        config.push_str(&worker_section(100, mode));
    }
    let mut child = env.spawn("bridge", &config)?;
    // Entries are taken over in stream order, one transaction at a time: the last is last.
    let (table, column, last) = match mode {
        Mode::Worker => ("consumer_inbox", "received_at", format!("consumer = 'admin' AND event_id = 'c-{}'", n - 1)),
        Mode::AtTakeover => ("audit_logs", "recorded_at", format!("audit_id = 'c-{}'", n - 1)),
    };
    let rate = env.written_rate(Duration::from_secs(600), n as i64, table, column, &last).await;
    let (peak_rss_kb, cpu_seconds) = resources(child.id());
    let (pg_cpu_seconds, redis_cpu_seconds) =
        (postgres_cpu_seconds() - pg_cpu, env.redis_cpu_seconds().await? - redis_cpu);
    stop(&mut child);
    Ok(Run { rows_per_sec: rate?, peak_rss_kb, cpu_seconds, pg_cpu_seconds, redis_cpu_seconds, ..Run::default() })
}

/// The bridge's SQL limit: its batched insert-if-absent transaction alone (with
/// `Mode::AtTakeover`: and the batch handler in the same transaction).
pub async fn bridge_limit(env: &BenchEnv, n: usize, batch: u32, mode: Mode) -> anyhow::Result<f64> {
    env.reset().await?;
    let apply = if mode == Mode::AtTakeover { "apply = \"bench\"\n" } else { "apply = \"off\"\n" };
    let config = handoff::load_str(&format!(
        "[database]\nurl = \"postgres://bench@localhost/bench\"\n[[bridge]]\nname = \"bench\"\nconsumer = \"admin\"\nstreams = [{{ key = \"s\" }}]\n{apply}{}",
        worker_section(100, Mode::AtTakeover)
    ))?;
    let inbox = Takeover::new(&Database::Postgres(pool(&env.database_config(), "handoff-bench")?), &config.bridges[0])
        .map_err(|e| anyhow::anyhow!(e))?;
    let handler = HandlerSql::parse(BATCH_HANDLER, Placeholder::Numbered)?;
    let errors = HandlerErrors::default();
    let started = Instant::now();
    for start in (0..n).step_by(batch as usize) {
        let events: Vec<InboxEvent> = (start..(start + batch as usize).min(n))
            .map(|i| {
                let (event_id, payload) = event(i);
                InboxEvent {
                    event_id,
                    event_type: "auth.mfa_policy_changed".into(),
                    owner: Some("bench".into()),
                    aggregate_type: None,
                    aggregate_id: None,
                    payload: Text::new(payload.into()).expect("UTF-8"),
                    headers: Text::from_static("{}"),
                    fields: Text::from_static("{}"),
                    content_hash: format!("{i:064x}"),
                    stream: env.stream("user"),
                    entry_id: format!("{i}-0"),
                    ignored: false,
                }
            })
            .collect();
        match mode {
            Mode::Worker => inbox.take_over("admin", &events, &[], false).await?,
            Mode::AtTakeover => {
                let statements =
                    events.iter().map(|e| handler.bind(0, &EventInput::new(e)).ok().map(|s| vec![s])).collect();
                let effects = Effects { statements, errors: &errors };
                let taken = inbox.take_over_applying("admin", &events, &effects, &[], false).await?;
                anyhow::ensure!(taken.left_to_worker.is_none(), "not applied: {:?}", taken.left_to_worker);
                taken.outcomes
            }
        };
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

async fn fill_inbox(env: &BenchEnv, n: usize) -> anyhow::Result<()> {
    env.db
        .execute(
            "INSERT INTO consumer_inbox (consumer, event_id, event_type, owner, payload, content_hash, stream, stream_entry_id)
             SELECT 'admin', 'w-' || g, 'auth.mfa_policy_changed', 'bench',
                    jsonb_build_object('auditId', 'w-' || g, 'actor', 'admin@example.com', 'reason', repeat('x', 180)),
                    md5(g::text), 's', g || '-0'
             FROM generate_series(1, $1::bigint) g",
            &[&(n as i64)],
        )
        .await?;
    env.db.batch_execute("ANALYZE consumer_inbox").await?;
    Ok(())
}

/// Worker: `n` inbox rows, one worker process with the seed's handler, from its first commit
/// until all are applied. The rate, and the process's peak RSS in KiB.
/// `claim`: the worker's `claim` setting.
pub async fn worker(env: &BenchEnv, n: usize, batch: u32, concurrency: u32, claim: &str) -> anyhow::Result<(f64, u64)> {
    env.reset().await?;
    fill_inbox(env, n).await?;
    let section = worker_section(batch, Mode::Worker)
        .replace("poll_interval", &format!("concurrency = {concurrency}\nclaim = \"{claim}\"\npoll_interval"));
    let mut child = env.spawn("worker", &format!("{}{}", env.base_config(), section))?;
    // Rows are claimed in id order: the last one's effect comes with the last batches.
    let last = format!("audit_id = 'w-{n}'");
    let rate = env.written_rate(Duration::from_secs(600), n as i64, "audit_logs", "recorded_at", &last).await;
    let (peak_rss_kb, _) = resources(child.id());
    stop(&mut child);
    Ok((rate?, peak_rss_kb))
}

/// `n` inbox rows, a worker store with `claim`, and the seed's handler statement, for the
/// worker's SQL limits.
async fn limit_setup(env: &BenchEnv, n: usize, claim: &str) -> anyhow::Result<(Inbox, String)> {
    env.reset().await?;
    fill_inbox(env, n).await?;
    let config = handoff::load_str(&format!(
        "[database]\nurl = \"postgres://bench@localhost/bench\"\n[[worker]]\nname = \"bench\"\nconsumer = \"admin\"\nclaim = \"{claim}\"\n"
    ))?;
    let store = Inbox::new(
        &Database::Postgres(pool(&env.database_config(), "handoff-bench")?),
        &config.workers[0],
        Faults::default(),
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    Ok((store, handoff::rewrite_placeholders(HANDLER, handoff::Placeholder::Numbered)?.sql))
}

/// The leased worker's SQL limit: claim, then the handler and the fenced mark of every row of the
/// batch in one transaction (a savepoint per row), without the worker around it.
pub async fn worker_limit(env: &BenchEnv, n: usize, batch: u32) -> anyhow::Result<f64> {
    let (store, sql) = limit_setup(env, n, "leased").await?;
    let started = Instant::now();
    let mut done = 0;
    loop {
        let rows = store.claim("bench", batch, Duration::from_secs(30)).await?;
        if rows.is_empty() {
            break;
        }
        let items: Vec<_> = rows.iter().map(|row| (row, vec![seed_statement(&sql, row)])).collect();
        done += store.apply_batch("bench", &items).await?.len();
    }
    anyhow::ensure!(done == n, "applied {done} of {n}");
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// The locked worker's SQL limit: lock a batch, run the handler for every row and mark the
/// batch PROCESSED in one transaction, without the worker around it.
pub async fn worker_locked_limit(env: &BenchEnv, n: usize, batch: u32) -> anyhow::Result<f64> {
    let (store, sql) = limit_setup(env, n, "locked").await?;
    let started = Instant::now();
    let mut done = 0;
    loop {
        let (rows, Some(locked)) = store.lock(batch, Duration::from_secs(30)).await? else { break };
        let items: Vec<_> = rows.iter().map(|row| (row, vec![seed_statement(&sql, row)])).collect();
        anyhow::ensure!(locked.apply("bench", &items).await?, "the locked batch was refused");
        done += items.len();
    }
    anyhow::ensure!(done == n, "applied {done} of {n}");
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// The seed's handler statement bound for `row`, as the worker binds it.
fn seed_statement<'a>(sql: &'a str, row: &handoff::InboxRow) -> BoundStatement<'a> {
    let values = vec![
        BindValue::Text(row.event_id.clone()),
        BindValue::Text(row.owner.clone().unwrap_or_default()),
        BindValue::Text(row.event_type.clone()),
        BindValue::Text(row.payload["actor"].as_str().unwrap_or_default().to_owned()),
        BindValue::Json(row.payload.to_string()),
    ];
    BoundStatement { index: 0, sql, values, batch: false }
}

/// The whole chain in one process: relay, bridge and worker, until audit_logs holds every event:
/// the rate from its start and from its first effect on, the process's CPU, and the Postgres and
/// Redis servers' CPU over the run, the bridge
/// running `bridge_loops` takeover loops. With `earlier`, another build of handoff runs it, the worker applying (a build from before
/// apply at take-over, which knows no `apply` key).
pub async fn end_to_end(
    env: &BenchEnv,
    n: usize,
    (mode, bridge_loops): (Mode, u32),
    earlier: Option<&Path>,
) -> anyhow::Result<(Run, f64)> {
    env.reset().await?;
    env.fill(n, "e").await?;
    // An earlier build knows no bridge `concurrency`: named only when it is not 1.
    let loops = if bridge_loops == 1 { String::new() } else { format!("concurrency = {bridge_loops}\n") };
    let mut config = format!(
        "{}{}{loops}{}",
        relay_config(env, 500, "owner = \"bench\""),
        bridge_section(env, 500, mode),
        worker_section(100, mode).replace("poll_interval", "concurrency = 2\npoll_interval")
    );
    if earlier.is_some() {
        anyhow::ensure!(mode == Mode::Worker, "an earlier build runs the chain with the worker applying");
        config = config.replace("apply = \"off\"\n", "");
    }
    let (pg_cpu, redis_cpu) = (postgres_cpu_seconds(), env.redis_cpu_seconds().await?);
    let mut child = match earlier {
        Some(binary) => env.spawn_binary(binary, "end-to-end-earlier", &config)?,
        None => env.spawn("end-to-end", &config)?,
    };
    let last = format!("audit_id = 'e-{n}'");
    let elapsed = env.until_written(Duration::from_secs(900), n as i64, "audit_logs", &last).await;
    let (peak_rss_kb, cpu_seconds) = resources(child.id());
    let (pg_cpu_seconds, redis_cpu_seconds) =
        (postgres_cpu_seconds() - pg_cpu, env.redis_cpu_seconds().await? - redis_cpu);
    stop(&mut child);
    let rows_per_sec = n as f64 / elapsed?.as_secs_f64();
    // From the first effect's transaction to the last, as the components are timed: the
    // start-up and the first batch's way through relay and bridge left out.
    let from_first = env.written_rate(Duration::from_secs(1), n as i64, "audit_logs", "recorded_at", &last).await?;
    let run = Run { rows_per_sec, peak_rss_kb, cpu_seconds, pg_cpu_seconds, redis_cpu_seconds, ..Run::default() };
    Ok((run, from_first))
}
