//! Scale-out: sharded streams (`{shard(column, N)}` in a relay's template, `shard_count` and
//! `shards` on a bridge's stream). Each key's events land in one shard, in outbox id order;
//! three bridge instances of one group share the shards, one killed with entries in hand, and
//! every event reaches the inbox once; a changed shard count is refused at start and by `check`
//! until `handoff reshard` records it after a drain (both dialects).

use crate::common;

use std::collections::HashMap;

use common::db_env::{DbEnv, Dialect};
use common::process::{Handoff, run_to_end};
use common::{TestEnv, eventually, relay_defaults};

const SHARDS: u32 = 4;
const KEYS: usize = 40;

fn sharded_template(id: &str, shards: u32) -> String {
    format!("stream = \"{id}:{{aggregate_type}}:{{shard(aggregate_id, {shards})}}\"\n")
}

fn relay_config(env: &TestEnv) -> String {
    let extra = format!("{}[relay.ordering]\non_failure = \"hold\"\n", sharded_template(&env.id, SHARDS));
    format!("{}\n[[relay]]\nname = \"relay\"\n{}{extra}", env.base_config(), relay_defaults(&env.id, &extra))
}

fn bridge_config(env: &TestEnv, instance: &str) -> String {
    format!(
        "{}\n[[bridge]]\nname = \"bridge\"\nconsumer = \"admin\"\ninstance = \"{instance}\"\nblock = \"200ms\"\n\
         claim_idle = \"1s\"\nbatch_size = 25\n\
         streams = [{{ key = \"{}:order:{{shard}}\", shard_count = {SHARDS}, owner = \"relay\" }}]\n",
        env.base_config(),
        env.id
    )
}

/// `per_key` events for each of `KEYS` keys, interleaved across keys in id order
/// (`e-<key>-<seq>`, aggregate `k-<key>`).
async fn insert_interleaved(env: &TestEnv, round: i32, per_key: i32) {
    env.db
        .execute(
            "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
             SELECT 'e-' || k || '-' || (s + $1 * $2), 'order', 'k-' || k, 'order.changed',
                    jsonb_build_object('auditId', 'e-' || k || '-' || s, 'actor', 'ops')
             FROM generate_series(1, $2::int) s, generate_series(1, $3::int) k ORDER BY s, k",
            &[&round, &per_key, &(KEYS as i32)],
        )
        .await
        .unwrap();
}

fn key_and_seq(event_id: &str) -> (String, i64) {
    let (key, seq) = event_id.trim_start_matches("e-").rsplit_once('-').unwrap();
    (format!("k-{key}"), seq.parse().unwrap())
}

/// Entries read by the group and not yet acknowledged on `stream` (0 before the group exists
/// there: an instance creates it on a stream when it first reads it).
async fn pending_in_group(env: &TestEnv, stream: &str) -> i64 {
    let reply: Result<fred::types::Value, _> = fred::interfaces::ClientLike::custom(
        &env.redis,
        fred::types::CustomCommand::new_static("XPENDING", fred::types::ClusterHash::FirstKey, false),
        vec![stream.to_owned(), "admin".to_owned()],
    )
    .await;
    match reply {
        Ok(fred::types::Value::Array(parts)) => parts.first().and_then(|v| v.as_i64()).unwrap_or(0),
        Err(e) if e.details().starts_with("NOGROUP") => 0,
        other => panic!("XPENDING {stream}: {other:?}"),
    }
}

#[tokio::test]
async fn each_key_stays_in_its_shard_in_order_and_three_bridge_instances_share_the_shards_through_a_kill() {
    let env = TestEnv::new().await;
    insert_interleaved(&env, 0, 10).await;
    let _relay = Handoff::run(&relay_config(&env));
    env.await_delivered(KEYS as i64 * 10).await;

    // The first instance takes a batch and is killed before its commit: its entries wait in
    // its pending list until another instance claims them.
    let mut victim = Handoff::run_paused(&bridge_config(&env, "b1"), "bridge_before_commit");
    victim.await_paused().await;
    let shards: Vec<String> = (0..SHARDS).map(|s| format!("{}:order:{s}", env.id)).collect();
    let mut held = 0;
    for stream in &shards {
        held += pending_in_group(&env, stream).await;
    }
    assert!(held >= 1, "the killed instance holds entries");
    victim.kill();
    let _b2 = Handoff::run(&bridge_config(&env, "b2"));
    let _b3 = Handoff::run(&bridge_config(&env, "b3"));
    insert_interleaved(&env, 1, 10).await;
    let total = KEYS as i64 * 20;
    eventually("every event in the inbox", || async {
        (env.inbox_count("PENDING").await + env.inbox_count("PROCESSED").await == total).then_some(())
    })
    .await;
    eventually("nothing left pending in the group", || async {
        let mut pending = 0;
        for stream in &shards {
            pending += pending_in_group(&env, stream).await;
        }
        (pending == 0).then_some(())
    })
    .await;

    // Each key in the one shard CRC-32 names, its events in id (= sequence) order there.
    let mut shard_of_key: HashMap<String, String> = HashMap::new();
    for stream in &shards {
        let mut last: HashMap<String, i64> = HashMap::new();
        for event_id in env.stream_event_ids(stream).await {
            let (key, seq) = key_and_seq(&event_id);
            let expected = format!("{}:order:{}", env.id, crc32fast::hash(key.as_bytes()) % SHARDS);
            assert_eq!(*stream, expected, "{key} is in the shard its hash names");
            assert_eq!(shard_of_key.entry(key.clone()).or_insert_with(|| stream.clone()), stream);
            let previous = last.insert(key.clone(), seq).unwrap_or(0);
            assert!(seq > previous, "{key}: seq {seq} after {previous} on {stream}");
        }
    }
    assert_eq!(shard_of_key.len(), KEYS, "every key was appended");
    let used: std::collections::HashSet<_> = shard_of_key.values().collect();
    assert_eq!(used.len(), SHARDS as usize, "{KEYS} keys spread over every shard");

    // The inbox: one row per event, and a key's rows in stream order are in sequence order.
    let rows = env
        .db
        .query("SELECT event_id, stream, stream_entry_id FROM consumer_inbox WHERE consumer = 'admin'", &[])
        .await
        .unwrap();
    assert_eq!(rows.len() as i64, total, "one inbox row per event");
    // Per key: (stream entry id as (ms, seq), the event's sequence number).
    type Taken = ((u64, u64), i64);
    let mut by_key: HashMap<String, Vec<Taken>> = HashMap::new();
    for row in &rows {
        let (key, seq) = key_and_seq(row.get(0));
        let entry: String = row.get(2);
        let (ms, n) = entry.split_once('-').unwrap();
        by_key.entry(key).or_default().push(((ms.parse().unwrap(), n.parse().unwrap()), seq));
    }
    for (key, mut entries) in by_key {
        entries.sort();
        let seqs: Vec<i64> = entries.iter().map(|(_, s)| *s).collect();
        assert_eq!(seqs, (1..=20).collect::<Vec<_>>(), "{key}: its events once each, in order by entry id");
    }
}

async fn a_changed_shard_count_is_refused_until_resharded_after_a_drain(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    let config = |shards| env.config(&sharded_template(env.id(), shards));
    env.insert_events("a", "order", 5).await;
    let mut relay = Handoff::run(&config(4));
    env.await_delivered(5).await;
    relay.kill();

    let (ok, out) = run_to_end(&config(8), &["check"]);
    assert!(!ok && out.contains("was written with 4 shards") && out.contains("this config says 8"), "{out}");
    let mut refused = Handoff::run(&config(8));
    assert!(!refused.await_exit().await.success(), "a relay with another count does not start");
    assert!(refused.logs().contains("handoff reshard --relay relay"), "{}", refused.logs());

    // Undelivered rows: the count may not change yet.
    env.insert_events("b", "order", 3).await;
    let (ok, out) = run_to_end(&config(8), &["reshard", "--relay", "relay"]);
    assert!(!ok && out.contains("3 rows are not delivered yet"), "{out}");
    let mut relay = Handoff::run(&config(4));
    env.await_delivered(8).await;
    relay.kill();

    let (ok, out) = run_to_end(&config(8), &["reshard", "--relay", "relay"]);
    assert!(ok && out.contains("8 shards recorded (was 4)"), "{out}");
    let (ok, out) = run_to_end(&config(8), &["check"]);
    assert!(ok && out.contains("8 shards of"), "{out}");
    env.insert_events("c", "order", 20).await;
    let _relay = Handoff::run(&config(8));
    env.await_delivered(28).await;
    let mut keys = Vec::new();
    for shard in 0..8 {
        let stream = format!("{}:order:{shard}", env.id());
        if !env.stream_event_ids(&stream).await.is_empty() {
            keys.push(stream);
        }
    }
    assert!(keys.len() > 4, "the new count spreads keys over more than the old 4 shards: {keys:?}");
}

#[tokio::test]
async fn postgres_a_changed_shard_count_is_refused_until_resharded_after_a_drain() {
    a_changed_shard_count_is_refused_until_resharded_after_a_drain(Dialect::Postgres).await
}

#[tokio::test]
async fn mariadb_a_changed_shard_count_is_refused_until_resharded_after_a_drain() {
    a_changed_shard_count_is_refused_until_resharded_after_a_drain(Dialect::Mariadb).await
}
