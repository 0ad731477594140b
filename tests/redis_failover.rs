//! Redis failover: a primary killed mid-run, events flowing to streams on every shard (one
//! stream per event type, or the shards of one sharded stream). Nothing is
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

/// Where a test's events go: one stream, fed with events of one aggregate type and id.
#[derive(Clone)]
struct Lane {
    stream: String,
    aggregate_type: String,
    aggregate_id: String,
}

impl Lane {
    /// The stream of `aggregate_type` (template `<id>:{aggregate_type}`).
    fn of_type(env: &TestEnv, aggregate_type: &str) -> Self {
        let (stream, aggregate_type) = (env.stream(aggregate_type), aggregate_type.to_owned());
        Self { stream, aggregate_type, aggregate_id: "agg-1".into() }
    }
}

/// Sharded streams: every lane is a shard of `<id>:order:{shard(aggregate_id, SHARDS)}`.
const SHARDS: u32 = 8;

/// The relay's stream template and the bridge's streams for `lanes`.
fn chain(env: &TestEnv, lanes: &[Lane], sharded: bool) -> String {
    let (template, streams) = if sharded {
        let template = format!("stream = \"{}:order:{{shard(aggregate_id, {SHARDS})}}\"\n", env.id);
        let streams = format!("{{ key = \"{}:order:{{shard}}\", shard_count = {SHARDS}, owner = \"relay\" }}", env.id);
        (template, streams)
    } else {
        let streams: Vec<String> =
            lanes.iter().map(|l| format!("{{ key = \"{}\", owner = \"relay\" }}", l.stream)).collect();
        (String::new(), streams.join(", "))
    };
    format!(
        "{}\n[[relay]]\nname = \"relay\"\n{template}{}outage_backoff = {{ initial = \"50ms\", max = \"200ms\", multiplier = 2.0, jitter = 0.0 }}\n\
         [relay.broker_loss]\ncheck_interval = \"200ms\"\nlookback = \"10m\"\n\n\
         [[bridge]]\nname = \"bridge\"\nconsumer = \"admin\"\ninstance = \"b1\"\nblock = \"200ms\"\nclaim_idle = \"2s\"\n\
         streams = [{streams}]\n{}",
        env.base_config(),
        relay_defaults(&env.id, &template),
        TestEnv::worker_section("")
    )
}

/// Inbox rows of events taken over from `stream`.
async fn inbox_of(env: &TestEnv, stream: &str) -> i64 {
    env.db.query_one("SELECT count(*) FROM consumer_inbox WHERE stream = $1", &[&stream]).await.unwrap().get(0)
}

/// Three lanes, each on another primary: one stream per event type, or (`sharded`) three
/// shards of one sharded stream, each fed by a key that hashes into it.
fn lanes_on_every_primary(env: &TestEnv, cluster: &RedisCluster, sharded: bool) -> Vec<(Lane, u16)> {
    let mut lanes: Vec<(Lane, u16)> = Vec::new();
    for i in 0.. {
        let lane = if sharded {
            let key = format!("k-{i}");
            let stream = format!("{}:order:{}", env.id, crc32fast::hash(key.as_bytes()) % SHARDS);
            Lane { stream, aggregate_type: "order".into(), aggregate_id: key }
        } else {
            Lane::of_type(env, &format!("t{i}"))
        };
        let primary = cluster.primary_of(&lane.stream);
        if !lanes.iter().any(|(l, p)| *p == primary || l.stream == lane.stream) {
            lanes.push((lane, primary));
        }
        if lanes.len() == 3 {
            return lanes;
        }
    }
    unreachable!()
}

#[tokio::test]
async fn a_dead_cluster_shard_holds_up_only_its_own_streams_and_the_lag_is_true_afterwards() {
    a_dead_primary_holds_up_only_its_own_streams(false).await
}

#[tokio::test]
async fn a_dead_primary_holds_up_only_the_stream_shards_it_serves_and_the_lag_is_true_afterwards() {
    a_dead_primary_holds_up_only_its_own_streams(true).await
}

async fn a_dead_primary_holds_up_only_its_own_streams(sharded: bool) {
    let mut cluster = RedisCluster::start_with(1).await;
    let env = TestEnv::with_redis(&cluster.url()).await;
    let lanes_and_primaries = lanes_on_every_primary(&env, &cluster, sharded);
    let lanes: Vec<Lane> = lanes_and_primaries.iter().map(|(l, _)| l.clone()).collect();
    // Small batches: the dead shard's rows soon outnumber a batch, and only rows that step
    // aside keep them from filling every claim and stalling the healthy shards too.
    let config = chain(&env, &lanes, sharded).replacen(
        "[[relay]]\nname = \"relay\"\n",
        "[[relay]]\nname = \"relay\"\nbatch_size = 5\n",
        1,
    );
    let handoff = Handoff::run(&config);
    let address = handoff.telemetry_address().await;

    // A steady flow to every stream while the test watches.
    let inserted = Cell::new(0usize);
    let stop = Cell::new(false);
    let produce = produce(&env, &lanes, &inserted, &stop);
    let watch = async {
        eventually("events of every stream in the inbox", || async {
            let mut all = true;
            for lane in &lanes {
                all &= inbox_of(&env, &lane.stream).await >= 5;
            }
            all.then_some(())
        })
        .await;
        let (dead, victim) = lanes_and_primaries[0].clone();
        let replica = cluster.replica_of(victim);
        let healthy: Vec<(Lane, u16)> = lanes_and_primaries[1..].to_vec();
        let mut before = Vec::new();
        for (lane, port) in &healthy {
            let length = xlen(*port, &lane.stream);
            assert!(length > 0, "the healthy primary on {port} answers with the stream's entries");
            before.push((length, inbox_of(&env, &lane.stream).await));
        }
        cluster.kill(victim);

        // The property: while the dead shard's replica is not yet promoted, entries of the
        // healthy shards are still appended and taken over.
        let promoted_first = Cell::new(false);
        eventually("the healthy shards to keep flowing", || async {
            let still_replica = redis_cli(replica, &["role"]).starts_with("slave");
            let mut flowing = true;
            for ((lane, port), (length, taken)) in healthy.iter().zip(&before) {
                let now = xlen(*port, &lane.stream);
                flowing &= now >= length + 10 && inbox_of(&env, &lane.stream).await >= taken + 10;
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
            (xlen(replica, &dead.stream) >= 10).then_some(())
        })
        .await;
        stop.set(true);
    };
    tokio::join!(produce, watch);

    each_event_once(&env, inserted.get() as i64).await;
    for (i, lane) in lanes.iter().enumerate() {
        let key = &lane.stream;
        let gap = longest_gap_ms(cluster.primary_of(key), key);
        eprintln!(
            "failover: longest gap between appends on {key} ({}): {gap} ms",
            if i == 0 { "dead shard" } else { "healthy shard" }
        );
    }
    lag_is_zero(&address, &lanes).await;
}

/// A Sentinel failover mid-run: handoff follows the promoted replica; nothing is lost or taken
/// over twice, and the lag gauge is 0 once everything is read.
#[tokio::test]
async fn a_sentinel_failover_mid_run_loses_nothing_and_the_lag_is_true_afterwards() {
    let mut setup = RedisSentinel::start().await;
    let env = TestEnv::with_redis(&setup.url()).await;
    let lanes = vec![Lane::of_type(&env, "user")];
    let handoff = Handoff::run(&chain(&env, &lanes, false));
    let address = handoff.telemetry_address().await;
    let inserted = Cell::new(0usize);
    let stop = Cell::new(false);
    let produce = produce(&env, &lanes, &inserted, &stop);
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
    lag_is_zero(&address, &lanes).await;
}

/// One event into each of `lanes` every 20 ms until `stop`, counting them in `inserted`.
async fn produce(env: &TestEnv, lanes: &[Lane], inserted: &Cell<usize>, stop: &Cell<bool>) {
    let mut round = 0;
    while !stop.get() {
        round += 1;
        for (i, lane) in lanes.iter().enumerate() {
            env.db
                .execute(
                    "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
                     VALUES ($1, $2, $3, 'user.changed', jsonb_build_object('auditId', $1::text, 'actor', 'admin'))",
                    &[&format!("{i}-{round}"), &lane.aggregate_type, &lane.aggregate_id],
                )
                .await
                .unwrap();
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

async fn lag_is_zero(address: &str, lanes: &[Lane]) {
    for lane in lanes {
        let series =
            format!(r#"handoff_bridge_lag_entries{{bridge="bridge",broker="redis",stream="{}"}}"#, lane.stream);
        eventually(&format!("lag 0 on {}", lane.stream), || async {
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
