//! A long outage of the consumer's database under a supervisor that restarts handoff whenever
//! its liveness probe fails (as Kubernetes does): waiting out an outage is alive, so nothing is
//! restarted for it; and a delivery that never reached the inbox counts against no entry, so
//! even restarts for other reasons during the outage poison nothing (invariant 12).

use crate::common;

use std::time::{Duration, Instant};

use common::process::Handoff;
use common::proxy::Proxy;
use common::{TestEnv, eventually};

/// How long the consumer's database is away.
const OUTAGE: Duration = Duration::from_secs(180);

/// Restarts on top of the failed-probe ones during the outage, as node drains and rollouts do.
const RESTART_EVERY: Duration = Duration::from_secs(30);

/// A port nothing listens on: while the proxy points there, the database refuses connections.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The port of the tests' Postgres.
fn database_port() -> u16 {
    let base = common::base_database_url();
    base.rsplit_once(':').and_then(|(_, rest)| rest.split('/').next()?.parse().ok()).unwrap_or(5432)
}

/// `env`'s database URL through `proxy`.
fn through(env: &TestEnv, proxy: &Proxy) -> String {
    env.database_url.replacen(&format!(":{}/", database_port()), &format!(":{}/", proxy.port), 1)
}

/// What the supervisor did.
#[derive(Debug, Default)]
struct Restarts {
    failed_probes: u32,
    scheduled: u32,
}

/// Probes `/healthz` every second until `until`, as the kubelet does (a 1 s timeout, a restart
/// after 3 failures in a row), and restarts the process every [`RESTART_EVERY`] regardless.
async fn supervise(config: &str, handoff: &mut Handoff, until: Instant) -> Restarts {
    let mut restarts = Restarts::default();
    let mut address = handoff.telemetry_address().await;
    let mut started = Instant::now();
    let mut failures = 0;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let probe = address.clone();
        let alive = tokio::task::spawn_blocking(move || common::http::try_get(&probe, "/healthz"))
            .await
            .unwrap()
            .is_some_and(|(status, _)| status == 200);
        failures = if alive { 0 } else { failures + 1 };
        let scheduled = started.elapsed() >= RESTART_EVERY;
        if failures < 3 && !scheduled {
            continue;
        }
        if failures >= 3 {
            restarts.failed_probes += 1;
            eprintln!("supervisor: /healthz failed three times; restarting");
        } else {
            restarts.scheduled += 1;
        }
        failures = 0;
        handoff.kill();
        *handoff = Handoff::run(config);
        address = handoff.telemetry_address().await;
        started = Instant::now();
    }
    restarts
}

#[tokio::test]
async fn a_three_minute_inbox_outage_under_a_restarting_supervisor_poisons_nothing() {
    let env = TestEnv::new().await;
    let pg_port = database_port();
    let proxy = Proxy::start(pg_port).await;
    for i in 1..=200 {
        env.xadd_event("user", &format!("o-{i}"), &format!(r#"{{"auditId": "o-{i}", "actor": "admin"}}"#)).await;
    }
    // A tight configuration: probes would fail after about 2 × (block + claim_idle) +
    // 2 × command_timeout ≈ 13 s of a loop that does not beat, and three counted deliveries
    // would poison an entry.
    let config = env
        .bridge_config("b1", &["user"], "max_deliveries = 3\nbatch_size = 50")
        .replace("claim_idle = \"1s\"", "claim_idle = \"5s\"")
        .replace(&env.database_url, &through(&env, &proxy))
        .replace("pool_size = 4", "pool_size = 4\nconnect_timeout = \"1s\"");
    // The outage begins before the bridge has taken anything over: every entry it reads, it
    // reads during the outage.
    proxy.switch(dead_port());
    let mut handoff = Handoff::run(&config);
    let restarts = supervise(&config, &mut handoff, Instant::now() + OUTAGE).await;
    proxy.switch(pg_port);
    eventually("every event in the inbox", || async { (env.inbox_count("PENDING").await == 200).then_some(()) }).await;
    eventually("every entry acknowledged", || async { env.group_caught_up("user").await.then_some(()) }).await;
    eprintln!("supervisor: {restarts:?}");
    assert!(env.poison().await.is_empty(), "valid entries, never looked at, are not poison: {:?}", env.poison().await);
    assert_eq!(restarts.failed_probes, 0, "waiting out the outage is alive: {restarts:?}");
    assert!(restarts.scheduled >= 5, "the outage saw restarts all the same: {restarts:?}");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM consumer_inbox_deliveries").await, 0, "counts forgotten");
}

/// The worker's side: rows it holds when the database goes away are handed back, not left to
/// lapse and count an expired lease, and waiting to hand them back is alive.
#[tokio::test]
async fn a_worker_holding_rows_through_an_outage_stays_alive_and_counts_no_expired_lease() {
    let env = TestEnv::new().await;
    let pg_port = database_port();
    let proxy = Proxy::start(pg_port).await;
    env.db
        .execute(
            "INSERT INTO consumer_inbox (consumer, event_id, event_type, owner, payload, content_hash, stream, stream_entry_id)
             SELECT 'admin', 'w-' || g, 'auth.changed', 'auth', '{\"actor\": \"admin\"}', 'hash', 's', '0-' || g
             FROM generate_series(1, 30) g",
            &[],
        )
        .await
        .unwrap();
    // Leased, slow handlers: the worker is inside a batch when the database goes away; without
    // beats it would look stalled after 2 × (lease + outage_backoff.max + poll_interval) ≈ 6 s.
    let worker = "\n[[worker]]\nname = \"worker\"\nconsumer = \"admin\"\nclaim = \"leased\"\nbatch_size = 10\nlease = \"2s\"\n\
         poll_interval = \"50ms\"\noutage_backoff = { initial = \"100ms\", max = \"1s\", multiplier = 2.0, jitter = 0.0 }\n\
         [[worker.handler]]\nevent_types = [\"*\"]\nsql = [\"SELECT pg_sleep(0.2)\"]\n";
    let config = format!("{}{worker}", env.base_config())
        .replace(&env.database_url, &through(&env, &proxy))
        .replace("pool_size = 4", "pool_size = 4\nconnect_timeout = \"1s\"");
    let mut handoff = Handoff::run(&config);
    eventually("the worker to hold a batch", || async { (env.inbox_count("PROCESSING").await > 0).then_some(()) })
        .await;
    proxy.switch(dead_port());
    let restarts = supervise(&config, &mut handoff, Instant::now() + Duration::from_secs(20)).await;
    proxy.switch(pg_port);
    eventually("every row processed", || async { (env.inbox_count("PROCESSED").await == 30).then_some(()) }).await;
    eprintln!("supervisor: {restarts:?}");
    assert_eq!(restarts.failed_probes, 0, "waiting out the outage is alive: {restarts:?}");
    assert_eq!(env.inbox_count("DEAD").await, 0);
    let expired = env.scalar_i64("SELECT coalesce(sum(expired_leases), 0) FROM consumer_inbox").await;
    assert_eq!(expired, 0, "rows held through the outage were handed back, not left to lapse");
}
