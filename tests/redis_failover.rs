//! Redis failover: a primary killed mid-run, events flowing to streams on every shard. Nothing is
//! lost or taken over twice; streams on the healthy shards keep flowing while the dead shard
//! waits for its replica to be promoted; afterwards the lag gauge says 0 on every stream.

use crate::common;

use std::cell::Cell;

use common::http::{get, sample};
use common::process::Handoff;
use common::redis_cluster::RedisCluster;
use common::redis_sentinel::RedisSentinel;
use common::redis_server::redis_cli;
use common::{TestEnv, eventually, relay_defaults};

fn chain(env: &TestEnv, types: &[String]) -> String {
    let streams: Vec<String> =
        types.iter().map(|t| format!("{{ key = \"{}\", owner = \"relay\" }}", env.stream(t))).collect();
    format!(
        "{}\n[[relay]]\nname = \"relay\"\n{}outage_backoff = {{ initial = \"50ms\", max = \"200ms\", multiplier = 2.0, jitter = 0.0 }}\n\
         [relay.broker_loss]\ncheck_interval = \"200ms\"\nlookback = \"20s\"\n\n\
         [[bridge]]\nname = \"bridge\"\nconsumer = \"admin\"\ninstance = \"b1\"\nblock = \"200ms\"\nclaim_idle = \"2s\"\n\
         streams = [{}]\n{}",
        env.base_config(),
        relay_defaults(&env.id, ""),
        streams.join(", "),
        TestEnv::worker_section("")
    )
}

/// Inbox rows of events of `aggregate_type` (taken over from its stream).
async fn inbox_of(env: &TestEnv, stream: &str) -> i64 {
    env.db.query_one("SELECT count(*) FROM consumer_inbox WHERE stream = $1", &[&stream]).await.unwrap().get(0)
}

#[tokio::test]
async fn a_dead_cluster_shard_holds_up_only_its_own_streams_and_the_lag_is_true_afterwards() {
    let mut cluster = RedisCluster::start_with(1).await;
    let env = TestEnv::with_redis(&cluster.url()).await;
    // One event type (one stream) per primary.
    let mut types: Vec<(String, u16)> = Vec::new();
    for i in 0.. {
        let t = format!("t{i}");
        let primary = cluster.primary_of(&env.stream(&t));
        if !types.iter().any(|(_, p)| *p == primary) {
            types.push((t, primary));
        }
        if types.len() == 3 {
            break;
        }
    }
    let names: Vec<String> = types.iter().map(|(t, _)| t.clone()).collect();
    // Small batches: the dead shard's rows soon outnumber a batch, and only rows that step
    // aside keep them from filling every claim and stalling the healthy shards too.
    let config = chain(&env, &names).replacen(
        "[[relay]]\nname = \"relay\"\n",
        "[[relay]]\nname = \"relay\"\nbatch_size = 5\n",
        1,
    );
    let handoff = Handoff::run(&config);
    let address = handoff.telemetry_address().await;

    // A steady flow to every stream while the test watches.
    let inserted = Cell::new(0usize);
    let stop = Cell::new(false);
    let produce = produce(&env, &names, &inserted, &stop);
    let watch = async {
        eventually("events of every stream in the inbox", || async {
            let mut all = true;
            for t in &names {
                all &= inbox_of(&env, &env.stream(t)).await >= 5;
            }
            all.then_some(())
        })
        .await;
        let (dead, victim) = types[0].clone();
        let replica = cluster.replica_of(victim);
        let healthy: Vec<(String, u16)> = types[1..].to_vec();
        let mut before = Vec::new();
        for (t, port) in &healthy {
            let length = xlen(*port, &env.stream(t));
            assert!(length > 0, "the healthy primary on {port} answers with the stream's entries");
            before.push((length, inbox_of(&env, &env.stream(t)).await));
        }
        cluster.kill(victim);

        // The property: while the dead shard's replica is not yet promoted, entries of the
        // healthy shards are still appended and taken over.
        let promoted_first = Cell::new(false);
        eventually("the healthy shards to keep flowing", || async {
            let still_replica = redis_cli(replica, &["role"]).starts_with("slave");
            let mut flowing = true;
            for ((t, port), (length, taken)) in healthy.iter().zip(&before) {
                let now = xlen(*port, &env.stream(t));
                flowing &= now >= length + 10 && inbox_of(&env, &env.stream(t)).await >= taken + 10;
            }
            if flowing && !still_replica {
                promoted_first.set(true);
            }
            flowing.then_some(())
        })
        .await;
        assert!(
            !promoted_first.get(),
            "the healthy shards' streams only moved on once the dead shard's replica had been promoted"
        );
        eventually("the replica to be promoted", || async {
            redis_cli(replica, &["role"]).starts_with("master").then_some(())
        })
        .await;
        eventually("the promoted shard's stream to flow again", || async {
            (xlen(replica, &env.stream(&dead)) >= 10).then_some(())
        })
        .await;
        stop.set(true);
    };
    tokio::join!(produce, watch);

    each_event_once(&env, inserted.get() as i64).await;
    for t in &names {
        let key = env.stream(t);
        let gap = longest_gap_ms(cluster.primary_of(&key), &key);
        eprintln!(
            "failover: longest gap between appends on {key} ({}): {gap} ms",
            if *t == names[0] { "dead shard" } else { "healthy shard" }
        );
    }
    lag_is_zero(&env, &address, &names).await;
}

/// A Sentinel failover mid-run: handoff follows the promoted replica; nothing is lost or taken
/// over twice, and the lag gauge is 0 once everything is read.
#[tokio::test]
async fn a_sentinel_failover_mid_run_loses_nothing_and_the_lag_is_true_afterwards() {
    let mut setup = RedisSentinel::start().await;
    let env = TestEnv::with_redis(&setup.url()).await;
    let names = vec!["user".to_owned()];
    let handoff = Handoff::run(&chain(&env, &names));
    let address = handoff.telemetry_address().await;
    let inserted = Cell::new(0usize);
    let stop = Cell::new(false);
    let produce = produce(&env, &names, &inserted, &stop);
    let watch = async {
        eventually("events in the inbox", || async { (inbox_of(&env, &env.stream("user")).await >= 10).then_some(()) })
            .await;
        let old = setup.primary.port;
        setup.primary.stop();
        eventually("the sentinels to promote a replica", || async {
            let now = setup.primary_port();
            (now != old && now != 0).then_some(())
        })
        .await;
        let promoted = setup.primary_port();
        let key = env.stream("user");
        let before = xlen(promoted, &key);
        eventually("appends to the promoted primary", || async { (xlen(promoted, &key) >= before + 10).then_some(()) })
            .await;
        stop.set(true);
    };
    tokio::join!(produce, watch);

    each_event_once(&env, inserted.get() as i64).await;
    let key = env.stream("user");
    eprintln!(
        "failover: longest gap between appends on {key} (sentinel): {} ms",
        longest_gap_ms(setup.primary_port(), &key)
    );
    lag_is_zero(&env, &address, &names).await;
}

/// One event of each of `names` every 20 ms until `stop`, counting them in `inserted`.
async fn produce(env: &TestEnv, names: &[String], inserted: &Cell<usize>, stop: &Cell<bool>) {
    let mut round = 0;
    while !stop.get() {
        round += 1;
        for t in names {
            env.insert_events(&format!("{t}-{round}"), t, 1).await;
            inserted.set(inserted.get() + 1);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Every one of `total` events was processed, with one inbox row and one effect each.
async fn each_event_once(env: &TestEnv, total: i64) {
    eventually(&format!("all {total} events processed"), || async {
        (env.inbox_count("PROCESSED").await == total).then_some(())
    })
    .await;
    let distinct = env.scalar_i64("SELECT count(DISTINCT event_id) FROM consumer_inbox").await;
    assert_eq!(distinct, total, "one inbox row per event");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM audit_logs").await, total, "one effect per event");
}

/// `XLEN key` on the node at `port` (0 while it cannot answer).
fn xlen(port: u16, key: &str) -> u64 {
    redis_cli(port, &["xlen", key]).trim().parse().unwrap_or(0)
}

async fn lag_is_zero(env: &TestEnv, address: &str, names: &[String]) {
    for t in names {
        let series = format!(r#"handoff_bridge_lag_entries{{bridge="bridge",stream="{}"}}"#, env.stream(t));
        eventually(&format!("lag 0 on {t}"), || async {
            (sample(&get(address, "/metrics").1, &series) == Some(0.0)).then_some(())
        })
        .await;
    }
}

/// The longest time between two consecutive entries of `key` (from their ids' milliseconds):
/// how long the stream received nothing during the failover.
fn longest_gap_ms(port: u16, key: &str) -> u64 {
    let listing = redis_cli(port, &["xrange", key, "-", "+"]);
    let millis: Vec<u64> = listing
        .lines()
        .filter_map(|l| l.trim().split_once('-'))
        .filter_map(|(ms, seq)| {
            (seq.chars().all(|c| c.is_ascii_digit()) && !seq.is_empty()).then(|| ms.parse().ok()).flatten()
        })
        .collect();
    millis.windows(2).map(|w| w[1].saturating_sub(w[0])).max().unwrap_or(0)
}
