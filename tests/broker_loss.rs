//! A broker that loses writes it acknowledged (invariant 9): a failover to a replica that had
//! not caught up, a flushed stream. The relay notices from the stream's own state, re-drives the
//! rows whose entries are gone, and the chain ends with every event in the stream once more and
//! exactly once in the inbox and in `audit_logs`. With the durability gate, the same failover
//! loses nothing in the first place. `handoff verify` reports trimmed and lost entries (on
//! Postgres and on MariaDB).

use crate::common;

use common::db_env::{DbEnv, Dialect};
use common::http::{get, sample};
use common::process::{Handoff, run_with_path};
use common::proxy::Proxy;
use common::redis_server::{RedisServer, redis_cli};
use common::{TestEnv, eventually, relay_defaults};
use fred::prelude::*;

/// Relay, bridge and worker on `env`; `relay_extra` goes into `[[relay]]` (later keys may open
/// sub-tables).
fn chain(env: &TestEnv, relay_extra: &str) -> String {
    format!("{}{}", relay_only(env, relay_extra), consumer_sections(env))
}

/// The relay alone, checking for broker loss every 200ms; a sign of loss looks up every row the
/// test delivered, however long its servers took.
fn relay_only(env: &TestEnv, relay_extra: &str) -> String {
    format!(
        "{}\n[[relay]]\nname = \"relay\"\n{}{relay_extra}\n[relay.broker_loss]\ncheck_interval = \"200ms\"\nlookback = \"10m\"\n\n",
        env.base_config(),
        relay_defaults(&env.id, relay_extra),
    )
}

/// The bridge and the worker alone.
fn consumers(env: &TestEnv) -> String {
    format!("{}\n{}", env.base_config(), consumer_sections(env))
}

fn consumer_sections(env: &TestEnv) -> String {
    format!("{}{}", bridge_section(env), TestEnv::worker_section(""))
}

/// A primary with a replica behind a proxy the test can switch, the chain running through the
/// proxy, and a first round of 30 events applied, settled and replicated.
struct Replicated {
    primary: RedisServer,
    replica: RedisServer,
    proxy: Proxy,
    env: TestEnv,
    _handoff: Handoff,
    address: String,
}

async fn replicated_chain(relay_extra: &str) -> Replicated {
    let primary = RedisServer::start().await;
    let replica = RedisServer::replica_of(primary.port).await;
    let proxy = Proxy::start(primary.port).await;
    let env = TestEnv::with_redis(&proxy.url()).await;
    let handoff = Handoff::run(&chain(&env, relay_extra));
    let address = handoff.telemetry_address().await;
    env.insert_events("a", "user", 30).await;
    audit_logs(&env, 30).await;
    first_round_settled_and_replicated(&env, primary.port, replica.port, 30).await;
    Replicated { primary, replica, proxy, env, _handoff: handoff, address }
}

fn bridge_section(env: &TestEnv) -> String {
    format!(
        "[[bridge]]\nname = \"bridge\"\nconsumer = \"admin\"\ninstance = \"b1\"\nblock = \"200ms\"\nclaim_idle = \"1s\"\n\
         streams = [{{ key = \"{}\", owner = \"relay\" }}]\n",
        env.stream("user")
    )
}

async fn audit_logs(env: &TestEnv, n: i64) {
    eventually(&format!("{n} audit_logs rows"), || async {
        (env.scalar_i64("SELECT count(*) FROM audit_logs").await == n).then_some(())
    })
    .await;
}

/// Waits until the first round of events is settled DELIVERED and the replica holds everything
/// the primary has: what the bridge applied is not yet settled (the relay settles after the
/// append), nor replicated (replication is asynchronous).
async fn first_round_settled_and_replicated(env: &TestEnv, primary: u16, replica: u16, n: i64) {
    env.await_delivered(n).await;
    let offset = |port: u16, field: &str| {
        redis_cli(port, &["info", "replication"])
            .lines()
            .find_map(|l| l.trim().strip_prefix(field)?.strip_prefix(':')?.trim().parse::<u64>().ok())
    };
    eventually("the replica to hold what the primary has", || async {
        let (primary, replica) = (offset(primary, "master_repl_offset"), offset(replica, "slave_repl_offset"));
        (primary.is_some() && primary == replica).then_some(())
    })
    .await;
}

fn metric(address: &str, name: &str) -> f64 {
    sample(&get(address, "/metrics").1, &format!("{name}{{relay=\"relay\"}}")).unwrap_or(0.0)
}

/// Every event id `a-1..a-n` and `b-1..b-n` is in the stream (as the clients now see it).
async fn stream_holds_every_event(env: &TestEnv, n: usize) {
    eventually("the stream to hold every event again", || async {
        let ids: std::collections::HashSet<String> =
            env.stream_event_ids(&env.stream("user")).await.into_iter().collect();
        let all = (1..=n).all(|i| ids.contains(&format!("a-{i}")) && ids.contains(&format!("b-{i}")));
        all.then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_failover_to_a_replica_that_had_not_caught_up_is_detected_and_repaired() {
    let Replicated { primary: _primary, replica, proxy, env, _handoff, address } = replicated_chain("").await;

    // The replica stops following; what the primary acknowledges from now on is not on it.
    redis_cli(replica.port, &["replicaof", "no", "one"]);
    env.insert_events("b", "user", 30).await;
    env.await_delivered(60).await;
    // Fail over to the replica: the last 30 delivered events' entries are not there.
    proxy.switch(replica.port);

    stream_holds_every_event(&env, 30).await;
    audit_logs(&env, 60).await;
    assert_eq!(env.inbox_count("PROCESSED").await, 60, "one inbox row per event");
    eventually("the loss counted", || async {
        (metric(&address, "handoff_relay_broker_lost_entries_total") == 30.0).then_some(())
    })
    .await;
    assert_eq!(metric(&address, "handoff_relay_broker_redriven_total"), 30.0);
    assert_eq!(
        env.scalar_i64("SELECT count(*) FROM audit_outbox WHERE redrives = 1 AND event_id LIKE 'b-%'").await,
        30
    );
    env.await_delivered(60).await;
}

#[tokio::test]
async fn with_the_durability_gate_the_same_failover_loses_nothing() {
    let gate = "outage_backoff = { initial = \"100ms\", max = \"400ms\", multiplier = 2.0, jitter = 0.0 }\n\
                [relay.durability]\nreplicas = 1\ntimeout = \"300ms\"\n";
    let Replicated { primary: _primary, replica, proxy, env, _handoff, address } = replicated_chain(gate).await;

    redis_cli(replica.port, &["replicaof", "no", "one"]);
    env.insert_events("b", "user", 30).await;
    eventually("the gate to hold the new rows back", || async {
        (metric(&address, "handoff_relay_durability_gate_misses_total") >= 1.0).then_some(())
    })
    .await;
    assert_eq!(env.count("DELIVERED").await, 30, "nothing settled without a replica holding it");

    // The failover target gets a replica of its own; the gate can be met there.
    let _second = RedisServer::replica_of(replica.port).await;
    proxy.switch(replica.port);
    env.await_delivered(60).await;
    stream_holds_every_event(&env, 30).await;
    audit_logs(&env, 60).await;
    assert_eq!(metric(&address, "handoff_relay_broker_lost_entries_total"), 0.0, "nothing was lost to find");
}

#[tokio::test]
async fn a_flushed_stream_is_filled_again_with_what_no_consumer_had_read() {
    let redis = RedisServer::start().await;
    let env = TestEnv::with_redis(&redis.url()).await;
    let handoff = Handoff::run(&chain(&env, ""));
    let address = handoff.telemetry_address().await;
    let mut bridge_and_worker = Handoff::run(&consumers(&env));
    env.insert_events("a", "user", 30).await;
    audit_logs(&env, 30).await;
    // The consumers are away while 30 more events are delivered, then the data is flushed.
    bridge_and_worker.kill();
    drop(handoff);
    let relay = Handoff::run(&relay_only(&env, ""));
    let address_relay = relay.telemetry_address().await;
    env.insert_events("b", "user", 30).await;
    env.await_delivered(60).await;
    let _: () = env.redis.flushall(false).await.unwrap();

    eventually("the flushed entries re-driven", || async {
        (metric(&address_relay, "handoff_relay_broker_redriven_total") >= 30.0).then_some(())
    })
    .await;
    env.await_delivered(60).await;
    let _consumers = Handoff::run(&consumers(&env));
    audit_logs(&env, 60).await;
    let b_events = env.scalar_i64("SELECT count(*) FROM audit_logs WHERE audit_id LIKE 'b-%'").await;
    assert_eq!(b_events, 30, "every event no consumer had read reached it");
    let _ = address;
}

/// `handoff verify` over rows read three at a time (`page_rows`; the store does hand them over
/// in pages of three): trimmed entries are told apart from lost ones, the counts add up across
/// pages, and `--repair` re-drives the lost rows of every page, which the relay then appends
/// again.
async fn verify_reports_trimmed_and_lost_entries_and_repairs_the_lost(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    let config = env.config("[relay.broker_loss]\nenabled = false\npage_rows = 3\n");
    let relay = Handoff::run(&config);
    env.insert_events("v", "user", 20).await;
    env.await_delivered(20).await;
    assert_eq!(common::delivered_page_sizes(&config, 3).await, [3, 3, 3, 3, 3, 3, 2], "read three rows at a time");
    let stream = env.stream("user");
    let _: i64 = env.redis().xtrim(&stream, ("MAXLEN", "=", 10)).await.unwrap();

    let path = relay.config_path();
    let (ok, out) = run_with_path(&path, &["verify", "--since", "10m"]);
    assert!(ok && out.contains("20 checked, 10 trimmed, 0 missing"), "{out}");

    let _: i64 = env.redis().del(&stream).await.unwrap();
    let (ok, out) = run_with_path(&path, &["verify", "--since", "10m"]);
    assert!(!ok && out.contains("20 missing"), "{out}");
    let (ok, out) = run_with_path(&path, &["verify", "--since", "10m", "--repair"]);
    assert!(ok && out.contains("20 re-driven"), "{out}");
    eventually("the relay to append the re-driven rows", || async {
        (env.stream_event_ids(&stream).await.len() == 20).then_some(())
    })
    .await;
    env.await_delivered(20).await;
}

crate::on_both_dialects!(verify_reports_trimmed_and_lost_entries_and_repairs_the_lost);
