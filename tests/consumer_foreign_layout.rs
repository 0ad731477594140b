//! A consumer that already has its own inbox (text ids, its own state words and column names, no
//! `consumer` / `owner` / `stream` columns) and producers that already speak a camelCase
//! envelope adopt handoff by configuration alone: the relay writes that envelope exactly, the
//! bridge takes it over into that table, the worker applies a handler that binds an extra field
//! — each event exactly once, through SIGKILLs of the bridge and of the worker.

use crate::common;

use common::process::Handoff;
use common::{TestEnv, eventually};
use handoff::store::outbox::contract::StatementKind;

const ROUNDS: usize = 3;
const PER_ROUND: usize = 300;

/// The consumer's own tables (as in docs/sql-contract.md): its inbox and the effect the handler writes. The effect has no
/// `ON CONFLICT`: applying an event twice would fail, and the row would go to `failed`.
const TABLES: &str = "
CREATE TABLE app_inbox (
    message_id     text PRIMARY KEY,
    kind           text NOT NULL,
    entity_id      text,
    entity_version int,
    body           jsonb NOT NULL,
    trace          jsonb,
    state          text NOT NULL DEFAULT 'new' CHECK (state IN ('new', 'working', 'done', 'failed', 'skipped')),
    tries          int  NOT NULL DEFAULT 0,
    lost_leases    int  NOT NULL DEFAULT 0,
    next_retry_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner    text,
    fence          bigint NOT NULL DEFAULT 0,
    lease_until    timestamptz,
    done_at        timestamptz,
    error          text
);
CREATE TABLE order_versions (
    event_id text PRIMARY KEY,
    order_id text NOT NULL,
    version  int  NOT NULL
);";

/// The relay: the reference outbox, whose claim also returns the payload's version, written as
/// a camelCase envelope in a fixed order.
fn relay_config(env: &TestEnv) -> String {
    let claim = handoff::store::outbox::postgres_sql::default_sql(StatementKind::Claim, "audit_outbox")
        .replace("o.headers, o.attempts", "o.headers, o.payload->>'version' AS aggregate_version, o.attempts");
    env.config(&format!(
        r#"stream = "{id}:orders"
batch_size = 50

[relay.envelope]
eventId = "{{event_id}}"
eventType = "{{event_type}}"
aggregateId = "{{aggregate_id}}"
aggregateVersion = "{{aggregate_version}}"
schemaVersion = "2"
payload = "{{payload}}"
headers = "{{headers}}"

[relay.sql]
claim = """{claim}"""
"#,
        id = env.id,
    ))
}

/// The shipped example for an existing consumer table (`config/existing-consumer.toml`), its
/// `[[bridge]]` or `[[worker]]` part on this test's servers, stream and timings.
fn example_part(env: &TestEnv, part: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/existing-consumer.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let (bridge, worker) = text.split_at(text.find("[[worker]]").unwrap());
    let bridge = &bridge[bridge.find("[[bridge]]").unwrap()..];
    let chosen = if part == "bridge" { bridge } else { worker };
    let tuned = chosen
        .replace(
            r#"streams = [{ key = "orders" }]"#,
            &format!("streams = [{{ key = \"{}:orders\" }}]\ninstance = \"b1\"\nblock = \"200ms\"\nclaim_idle = \"1s\"\nbatch_size = 40", env.id),
        )
        .replace(r#"poll_interval = "250ms""#, r#"poll_interval = "50ms""#)
        .replace(r#"lease = "30s""#, "lease = \"2s\"\nbatch_size = 30");
    assert_ne!(tuned, chosen, "the example still has the keys this test tunes");
    format!("{}\n{tuned}", env.base_config())
}

async fn insert_orders(env: &TestEnv, round: usize, n: usize) {
    env.db
        .execute(
            "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers)
             SELECT 'ord-' || $1::int || '-' || g, 'order', 'o-' || (g % 7), 'OrderPlaced',
                    jsonb_build_object('version', g, 'total', g * 10),
                    '{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}'
             FROM generate_series(1, $2::int) g",
            &[&(round as i32), &(n as i32)],
        )
        .await
        .unwrap();
}

async fn scalar(env: &TestEnv, sql: &str) -> i64 {
    env.scalar_i64(sql).await
}

#[tokio::test]
async fn an_existing_inbox_and_envelope_are_adopted_by_configuration_through_kills() {
    let env = TestEnv::new().await;
    env.db.batch_execute(TABLES).await.unwrap();
    let (relay, bridge, worker) = (relay_config(&env), example_part(&env, "bridge"), example_part(&env, "worker"));
    for config in [&relay, &bridge, &worker] {
        let (ok, out) = common::process::run_to_end(config, &["check"]);
        assert!(ok, "check accepts the consumer's own statements:\n{out}");
    }

    let _relay = Handoff::run(&relay);
    let mut bridge_process = Handoff::run(&bridge);
    let mut worker_process = Handoff::run(&worker);
    for round in 0..ROUNDS {
        insert_orders(&env, round, PER_ROUND).await;
        let taken = scalar(&env, "SELECT count(*) FROM app_inbox").await;
        eventually("the bridge to make progress", || async {
            (scalar(&env, "SELECT count(*) FROM app_inbox").await > taken).then_some(())
        })
        .await;
        bridge_process.kill();
        bridge_process = Handoff::run(&bridge);
        let applied = scalar(&env, "SELECT count(*) FROM order_versions").await;
        eventually("the worker to make progress", || async {
            (scalar(&env, "SELECT count(*) FROM order_versions").await > applied).then_some(())
        })
        .await;
        worker_process.kill();
        worker_process = Handoff::run(&worker);
    }

    let total = (ROUNDS * PER_ROUND) as i64;
    eventually("every event applied", || async {
        (scalar(&env, "SELECT count(*) FROM app_inbox WHERE state = 'done'").await == total).then_some(())
    })
    .await;
    assert_eq!(scalar(&env, "SELECT count(*) FROM order_versions").await, total, "each event applied once");
    assert_eq!(scalar(&env, "SELECT count(*) FROM app_inbox WHERE state <> 'done'").await, 0);
    assert_eq!(scalar(&env, "SELECT count(*) FROM consumer_inbox_poison").await, 0, "nothing poisoned");
    let wrong = "SELECT count(*) FROM order_versions v JOIN audit_outbox o ON o.event_id = v.event_id
                 WHERE v.version <> (o.payload->>'version')::int OR v.order_id <> o.aggregate_id";
    assert_eq!(scalar(&env, wrong).await, 0, "the extra field reached the handler");
    let missing = "SELECT count(*) FROM audit_outbox o WHERE NOT EXISTS (SELECT 1 FROM order_versions v WHERE v.event_id = o.event_id)";
    assert_eq!(scalar(&env, missing).await, 0, "no committed event was lost");

    // The envelope, exactly: these names, in this order (headers follow the payload).
    use fred::prelude::*;
    let entries: Vec<(String, Vec<(String, String)>)> =
        env.redis.xrange(format!("{}:orders", env.id), "-", "+", Some(1)).await.unwrap();
    let names: Vec<&str> = entries[0].1.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["eventId", "eventType", "aggregateId", "aggregateVersion", "schemaVersion", "payload", "headers"]
    );
}

/// An adopted inbox without a content-hash column still tells a replay from a conflict: its
/// `existing` statement is offered the entry's payload and hash, and compares the payload.
#[tokio::test]
async fn an_adopted_inbox_without_a_hash_column_detects_a_replay_with_other_content() {
    let env = TestEnv::new().await;
    env.db.batch_execute(TABLES).await.unwrap();
    let bridge = example_part(&env, "bridge");
    let (ok, out) = common::process::run_to_end(&bridge, &["check"]);
    assert!(ok, "{out}");
    let _bridge = Handoff::run(&bridge);
    let entry = |payload: &str| -> Vec<(&str, Vec<u8>)> {
        vec![
            ("eventId", b"ord-x".to_vec()),
            ("eventType", b"OrderPlaced".to_vec()),
            ("aggregateId", b"o-1".to_vec()),
            ("payload", payload.as_bytes().to_vec()),
        ]
    };
    env.xadd_raw("orders", entry(r#"{"total": 10}"#)).await;
    env.xadd_raw("orders", entry(r#"{"total": 10}"#)).await;
    env.xadd_raw("orders", entry(r#"{"total": 99}"#)).await;
    eventually("the conflicting replay to be recorded", || async {
        (scalar(&env, "SELECT count(*) FROM consumer_inbox_poison").await == 1).then_some(())
    })
    .await;
    let reason: String = env.db.query_one("SELECT reason FROM consumer_inbox_poison", &[]).await.unwrap().get(0);
    assert_eq!(reason, "payload_conflict", "the same payload again is a duplicate, another one a conflict");
    assert_eq!(scalar(&env, "SELECT count(*) FROM app_inbox").await, 1);
}
