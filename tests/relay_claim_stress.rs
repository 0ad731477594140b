//! Claims under stress, with no process killed: two relays with several claim loops each, short
//! polls and backoffs, and keys whose first event fails and retries while the rest flows. No row
//! may be claimed while another claim holds it or after it was settled, so no entry is appended
//! twice and no settle is refused by the fence; ordered keys keep their order.
//!
//! A trigger (test-only) records every claim of a row that was not PENDING: without a crash, no
//! lease expires, so each such claim is a row taken from another claimant or out of DELIVERED.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::TestEnv;
use common::http::{get, sample};
use common::process::Handoff;
use fred::prelude::*;

const KEYS: usize = 20;
const PER_KEY: usize = 100;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    Plain,
    /// The plain shape under the locked claim (one transaction locks, appends and settles).
    Locked,
    Hold,
    Park,
}

#[tokio::test]
async fn the_plain_claim_never_takes_a_held_or_settled_row() {
    stress(Shape::Plain).await;
}

/// The default claim on Postgres: rows stay PENDING while a transaction holds them, so the
/// trigger sees nothing; a row locked twice would show as an entry appended twice.
#[tokio::test]
async fn the_locked_claim_never_takes_a_held_or_settled_row() {
    stress(Shape::Locked).await;
}

#[tokio::test]
async fn the_ordered_claim_with_hold_never_takes_a_held_or_settled_row_and_keeps_order() {
    stress(Shape::Hold).await;
}

#[tokio::test]
async fn the_ordered_claim_with_park_never_takes_a_held_or_settled_row_and_keeps_order() {
    stress(Shape::Park).await;
}

/// Each key `k<i>` gets a first event `k<i>-0` that fails until the test lets it through, then
/// `k<i>-1 … k<i>-100`. With `hold` every event of a key goes to the key's own stream, which is
/// blocked for half of the keys (so their heads retry); otherwise streams follow the event type
/// and only the first events' stream (`bad`) is blocked.
async fn stress(shape: Shape) {
    let env = TestEnv::new().await;
    record_reclaims(&env).await;
    let blocked: Vec<String> = match shape {
        Shape::Hold => (0..KEYS).step_by(2).map(|k| env.stream(&format!("k{k}"))).collect(),
        Shape::Plain | Shape::Locked | Shape::Park => vec![env.stream("bad")],
    };
    for key in &blocked {
        let _: () = env.redis.set(key.as_str(), "blocked", None, None, false).await.unwrap();
    }
    let config = stress_config(&env, shape);
    let relays = [Handoff::run(&config), Handoff::run(&config)];
    for relay in &relays {
        relay.await_log("relay started").await;
    }
    produce(&env).await;
    for key in &blocked {
        let _: i64 = env.redis.del(key.as_str()).await.unwrap();
    }
    env.await_delivered((KEYS * (PER_KEY + 1)) as i64).await;

    let reclaims = env.scalar_i64("SELECT count(*) FROM reclaims").await;
    assert_eq!(reclaims, 0, "rows claimed while another claim held them, or after they were settled");
    for relay in &relays {
        let address = relay.telemetry_address().await;
        let metrics = get(&address, "/metrics").1;
        let fenced = sample(&metrics, r#"handoff_relay_fenced_settles_total{relay="relay"}"#);
        assert_eq!(fenced, Some(0.0), "settles refused by the fence");
    }
    let per_key = entries_per_key(&env, shape).await;
    for key in 0..KEYS {
        let got = &per_key[&format!("k{key}")];
        let mut unique = got.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), got.len(), "key k{key} has duplicate entries: {got:?}");
        assert_eq!(got.len(), PER_KEY + 1, "key k{key}: every event once");
        if matches!(shape, Shape::Hold | Shape::Park) {
            // The first event may be parked behind the others; the rest keep commit order.
            let ordered: Vec<&String> = got.iter().filter(|e| shape == Shape::Hold || !e.ends_with("-0")).collect();
            let first = if shape == Shape::Hold { 0 } else { 1 };
            let expected: Vec<String> = (first..=PER_KEY).map(|n| format!("k{key}-{n}")).collect();
            assert_eq!(ordered, expected.iter().collect::<Vec<_>>(), "order of key k{key}");
        }
    }
}

fn stress_config(env: &TestEnv, shape: Shape) -> String {
    let stream = match shape {
        Shape::Hold => format!("{}:{{aggregate_id}}", env.id),
        Shape::Plain | Shape::Locked | Shape::Park => format!("{}:{{event_type}}", env.id),
    };
    // The locked claim holds a pooled connection per loop: the pool (4) must outnumber them.
    let (claim, concurrency) = if shape == Shape::Locked { ("locked", 3) } else { ("auto", 4) };
    let ordering = match shape {
        Shape::Plain | Shape::Locked => String::new(),
        Shape::Hold => "[relay.ordering]\non_failure = \"hold\"\n".into(),
        Shape::Park => "[relay.ordering]\non_failure = \"park\"\n".into(),
    };
    env.config(&format!(
        "stream = \"{stream}\"\nclaim = \"{claim}\"\nbatch_size = 50\nconcurrency = {concurrency}\npoll_interval = \"10ms\"\nlease = \"20s\"\n\
         max_attempts = 100000\n\
         [relay.backoff]\ninitial = \"10ms\"\nmax = \"50ms\"\nmultiplier = 2.0\njitter = 0.5\n{ordering}"
    ))
}

/// Commits the first event of every key, then the others a round at a time at a steady rate.
async fn produce(env: &TestEnv) {
    let insert = "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
                  SELECT 'k' || k || '-' || $1::int, 'user', 'k' || k, $2, jsonb_build_object('n', $1::int)
                  FROM generate_series(0, $3::int - 1) k";
    env.db.execute(insert, &[&0i32, &"bad", &(KEYS as i32)]).await.unwrap();
    let mut pace = tokio::time::interval(Duration::from_millis(15));
    for n in 1..=PER_KEY as i32 {
        pace.tick().await;
        env.db.execute(insert, &[&n, &"good", &(KEYS as i32)]).await.unwrap();
    }
}

/// Every appended event id per key, in stream order (per stream).
async fn entries_per_key(env: &TestEnv, shape: Shape) -> HashMap<String, Vec<String>> {
    let streams: Vec<String> = match shape {
        Shape::Hold => (0..KEYS).map(|k| env.stream(&format!("k{k}"))).collect(),
        Shape::Plain | Shape::Locked | Shape::Park => vec![env.stream("bad"), env.stream("good")],
    };
    let mut per_key: HashMap<String, Vec<String>> = HashMap::new();
    for stream in streams {
        for (_, fields) in env.stream_entries(&stream).await {
            per_key.entry(fields["aggregate_id"].clone()).or_default().push(fields["event_id"].clone());
        }
    }
    per_key
}

async fn record_reclaims(env: &TestEnv) {
    env.db
        .batch_execute(
            "CREATE TABLE reclaims (id bigint, old_status text, new_status text, old_token bigint, new_token bigint);
             CREATE FUNCTION record_reclaim() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO reclaims VALUES (OLD.id, OLD.status, NEW.status, OLD.claim_token, NEW.claim_token);
                 RETURN NEW;
             END $$;
             CREATE TRIGGER record_reclaim AFTER UPDATE ON audit_outbox FOR EACH ROW
                 WHEN (NEW.claim_token <> OLD.claim_token AND OLD.status <> 'PENDING')
                 EXECUTE FUNCTION record_reclaim();",
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn the_reference_schema_refuses_to_move_a_settled_row_back_except_for_a_redrive() {
    let env = TestEnv::new().await;
    env.insert_events("e", "user", 2).await;
    env.db.batch_execute("UPDATE audit_outbox SET status = 'DELIVERED' WHERE event_id = 'e-1'").await.unwrap();
    env.db.batch_execute("UPDATE audit_outbox SET status = 'DEAD' WHERE event_id = 'e-2'").await.unwrap();
    for event_id in ["e-1", "e-2"] {
        let claim = format!("UPDATE audit_outbox SET status = 'IN_FLIGHT' WHERE event_id = '{event_id}'");
        let error = env.db.batch_execute(&claim).await.unwrap_err();
        let message = error.as_db_error().map(|e| e.message().to_owned()).unwrap_or_default();
        assert!(message.contains("only an operator re-drive"), "{message}");
    }
    assert_eq!((env.count("DELIVERED").await, env.count("DEAD").await), (1, 1));
    env.db
        .batch_execute(
            "BEGIN; SET LOCAL handoff.redrive = 'on';
             UPDATE audit_outbox SET status = 'PENDING' WHERE event_id = 'e-2'; COMMIT;",
        )
        .await
        .unwrap();
    assert_eq!(env.count("PENDING").await, 1, "a re-drive may move a DEAD row back");
}
