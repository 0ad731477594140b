//! Per-key ordering on Redis: events of one key reach the stream in commit order, across
//! failures and concurrent relays; a stuck key holds only itself. A row committed late is not
//! overtaken and a DEAD event is parked or held: on both brokers, in `both_brokers.rs`.

use crate::common;

use crate::both_brokers::insert_keyed;
use common::TestEnv;
use common::process::Handoff;
use fred::prelude::*;

const KEYS: usize = 10;
const PER_KEY: usize = 40;
/// Rounds of one more row per key, at most, for a second claim loop to take part.
const MORE_ROUNDS: usize = 100;

fn ordered_config(env: &TestEnv, on_failure: &str) -> String {
    env.config(&format!(
        "stream = \"{id}:{{aggregate_id}}\"\nbatch_size = 50\nconcurrency = 2\nmax_attempts = 1000\n\
         fields = {{ kind = \"{{event_type}}\" }}\n\
         [relay.backoff]\ninitial = \"50ms\"\nmax = \"200ms\"\nmultiplier = 2.0\njitter = 0.0\n\
         [relay.ordering]\non_failure = \"{on_failure}\"",
        id = env.id
    ))
}

async fn key_order(env: &TestEnv, key: usize) -> Vec<String> {
    env.stream_event_ids(&env.stream(&format!("k{key}"))).await
}

fn expected(key: usize, n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("k{key}-{i}")).collect()
}

#[tokio::test]
async fn each_key_keeps_its_order_across_failures_and_two_relays_and_a_stuck_key_holds_only_itself() {
    let env = TestEnv::new().await;
    // Keys 3 and 7 fail (their stream key holds a string) until the test clears them.
    for key in [3, 7] {
        let _: () = env.redis.set(env.stream(&format!("k{key}")), "blocked", None, None, false).await.unwrap();
    }
    let mut rows: Vec<(usize, usize)> = (1..=PER_KEY).flat_map(|n| (0..KEYS).map(move |k| (k, n))).collect();
    // Interleave keys unevenly; per key the numbers stay increasing.
    rows.sort_by_key(|(k, n)| (n * 7 + k * 13) % 97 + n * 100);
    let config = ordered_config(&env, "hold");
    let a = Handoff::run(&config);
    let b = Handoff::run(&config);
    a.await_log("relay started").await;
    b.await_log("relay started").await;
    for chunk in rows.chunks(25) {
        env.db.batch_execute("BEGIN").await.unwrap();
        insert_keyed(&env.db, chunk, "user.changed").await;
        env.db.batch_execute("COMMIT").await.unwrap();
    }
    let others = ((KEYS - 2) * PER_KEY) as i64;
    env.await_delivered(others).await;
    let held = env
        .scalar_i64("SELECT count(*) FROM audit_outbox WHERE aggregate_id IN ('k3', 'k7') AND status = 'DELIVERED'")
        .await;
    assert_eq!(held, 0, "a failing key holds its later events");
    for key in [3, 7] {
        let _: i64 = env.redis.del(env.stream(&format!("k{key}"))).await.unwrap();
    }
    env.await_delivered((KEYS * PER_KEY) as i64).await;
    // The orders must be checked on a run where more than one claim loop took part. With ordering
    // on, the leased claim takes the keys' heads, and the loop that finishes first can claim again
    // before the others wake: on a loaded machine one loop may win every claim. So add one row
    // per key, in one transaction, until a second loop has claimed; each key's order covers them.
    let mut per_key = PER_KEY;
    while env.scalar_i64("SELECT count(DISTINCT claimed_by) FROM audit_outbox").await < 2 {
        assert!(per_key < PER_KEY + MORE_ROUNDS, "no second claim loop took part in {MORE_ROUNDS} more rounds");
        per_key += 1;
        let round: Vec<(usize, usize)> = (0..KEYS).map(|k| (k, per_key)).collect();
        env.db.batch_execute("BEGIN").await.unwrap();
        insert_keyed(&env.db, &round, "user.changed").await;
        env.db.batch_execute("COMMIT").await.unwrap();
        env.await_delivered((KEYS * per_key) as i64).await;
    }
    for key in 0..KEYS {
        assert_eq!(key_order(&env, key).await, expected(key, per_key), "order of key k{key}");
    }
}
