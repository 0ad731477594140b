//! A row with a value the relay cannot read or should not send stops only itself (invariant
//! 13): odd timestamps and oversized payloads among ordinary rows turn DEAD with a reason naming
//! what is wrong, the ordinary rows are delivered, and the loop goes on delivering.

use crate::common;

use common::http::get;
use common::process::Handoff;
use common::{TestEnv, eventually};

/// Rows whose `created_at` no SQL date type shares with every other, each named by its event id.
const ODD_TIMES: &[(&str, &str)] =
    &[("odd-infinity", "infinity"), ("odd-minus-infinity", "-infinity"), ("odd-year-10000", "10000-01-01 00:00:00+00")];

async fn insert_odd_times(env: &TestEnv) {
    for (event_id, created_at) in ODD_TIMES {
        env.db
            .execute(
                "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at)
                 VALUES ($1, 'user', 'u', 'user.changed', '{}', $2::text::timestamptz)",
                &[event_id, created_at],
            )
            .await
            .unwrap();
    }
}

/// The DEAD rows' event ids with their last errors.
async fn dead_rows(env: &TestEnv) -> Vec<(String, String)> {
    let rows = env
        .db
        .query("SELECT event_id, last_error FROM audit_outbox WHERE status = 'DEAD' ORDER BY event_id", &[])
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

async fn odd_timestamps_stop_only_their_own_rows(claim: &str) {
    let env = TestEnv::new().await;
    env.insert_events("a", "user", 50).await;
    insert_odd_times(&env).await;
    env.insert_events("b", "user", 50).await;
    let relay = Handoff::run(&env.config(&format!("claim = \"{claim}\"")));
    let address = relay.telemetry_address().await;
    env.await_delivered(100).await;
    eventually("the odd rows to turn DEAD", || async { (env.count("DEAD").await == 3).then_some(()) }).await;
    for (event_id, error) in dead_rows(&env).await {
        assert!(event_id.starts_with("odd-"), "{event_id} is an ordinary row");
        assert!(error.contains("age_ms") && error.contains("created_at"), "{event_id}: {error}");
    }
    // The loop goes on: later rows are delivered too, and the process says it is alive.
    env.insert_events("c", "user", 10).await;
    env.await_delivered(110).await;
    assert_eq!(get(&address, "/healthz").0, 200);
    assert_eq!(env.stream_event_ids(&env.stream("user")).await.len(), 110, "no odd row was appended");
}

#[tokio::test]
async fn odd_timestamps_among_ordinary_rows_turn_only_those_rows_dead_under_the_locked_claim() {
    odd_timestamps_stop_only_their_own_rows("locked").await;
}

#[tokio::test]
async fn odd_timestamps_among_ordinary_rows_turn_only_those_rows_dead_under_the_leased_claim() {
    odd_timestamps_stop_only_their_own_rows("leased").await;
}

#[tokio::test]
async fn a_row_over_the_size_limits_turns_dead_as_too_large_and_is_never_appended() {
    let env = TestEnv::new().await;
    env.insert_events("ok", "user", 20).await;
    // A payload over payload_max_bytes, and headers that make an entry over entry_max_bytes.
    env.db
        .execute(
            "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers)
             VALUES ('big-payload', 'user', 'u', 'user.changed', jsonb_build_object('blob', repeat('x', 5000)), '{}'),
                    ('big-entry', 'user', 'u', 'user.changed', '{}', jsonb_build_object('h', repeat('y', 9000)))",
            &[],
        )
        .await
        .unwrap();
    let relay = Handoff::run(&env.config("payload_max_bytes = 4096\nentry_max_bytes = 8192"));
    let address = relay.telemetry_address().await;
    env.await_delivered(20).await;
    eventually("both large rows to turn DEAD", || async { (env.count("DEAD").await == 2).then_some(()) }).await;
    let dead = dead_rows(&env).await;
    assert!(dead[0].0 == "big-entry" && dead[0].1.contains("entry_max_bytes"), "{dead:?}");
    assert!(dead[1].0 == "big-payload" && dead[1].1.contains("payload_max_bytes"), "{dead:?}");
    let ids = env.stream_event_ids(&env.stream("user")).await;
    assert!(ids.len() == 20 && !ids.iter().any(|id| id.starts_with("big")), "{ids:?}");
    let metrics = get(&address, "/metrics").1;
    let series = r#"handoff_relay_dead_total{reason="too_large",relay="relay"}"#;
    assert_eq!(common::http::sample(&metrics, series), Some(2.0), "{metrics}");
}

/// A loop that panics ends the process with an error naming it, after the other tasks drained;
/// it never leaves a process that answers `/healthz` with 200 and relays nothing.
#[tokio::test]
async fn a_panicking_loop_ends_the_process_with_an_error_naming_it() {
    let env = TestEnv::new().await;
    env.insert_events("p", "user", 5).await;
    let launch = common::process::Launch {
        env: vec![("HANDOFF_FAULT_PANIC", "before_append".to_owned())],
        ..Default::default()
    };
    let mut relay = Handoff::launch(&env.config("claim = \"leased\""), launch);
    let status = relay.await_exit().await;
    assert!(!status.success(), "a panic must not end in a clean exit: {status}");
    let logs = relay.logs();
    assert!(logs.contains("relay relay panicked: fault injection: a panic at before_append"), "{logs}");
    assert!(logs.contains("handoff stopped with an error"), "{logs}");
    assert_eq!(env.count("DELIVERED").await, 0);
}

/// A claim statement of the user's own that the database refuses for every batch (here: it
/// subtracts timestamps, and one row's `created_at` is infinity) is an alert and a readiness
/// failure naming refused work, not a quiet back-off behind a healthy-looking process.
#[tokio::test]
async fn a_claim_the_database_refuses_every_time_fails_readiness_and_is_counted_for_the_alert() {
    let env = TestEnv::new().await;
    env.insert_events("a", "user", 3).await;
    insert_odd_times(&env).await;
    let claim = "claim = \"\"\"
UPDATE audit_outbox o SET status = 'IN_FLIGHT', claimed_by = :claimant, claim_token = o.claim_token + 1,
       lease_expires_at = now() + :lease_ms::bigint * interval '1 millisecond'
WHERE o.id IN (SELECT id FROM audit_outbox WHERE status = 'PENDING' ORDER BY id LIMIT :batch_size FOR UPDATE SKIP LOCKED)
RETURNING o.id, o.claim_token AS token, o.event_id, o.event_type, o.aggregate_type, o.aggregate_id,
          o.payload, o.headers, o.attempts, o.expired_claims,
          (extract(epoch FROM now() - o.created_at) * 1000)::float8 AS age_ms\"\"\"";
    let relay = Handoff::run(&env.config(&format!("claim = \"leased\"\n[relay.sql]\n{claim}")));
    let address = relay.telemetry_address().await;
    let series = r#"handoff_relay_statement_failures_total{kind="data",relay="relay",statement="claim"}"#;
    eventually("the refused claim to be counted", || async {
        let metrics = get(&address, "/metrics").1;
        (common::http::sample(&metrics, series).unwrap_or(0.0) >= 2.0).then_some(())
    })
    .await;
    let (status, body) = get(&address, "/readyz");
    assert!(status == 503 && body.contains("database refuses the work"), "{status} {body}");
    assert_eq!(get(&address, "/healthz").0, 200, "the loop is alive: liveness is not where this shows");
    relay.await_log("the database refuses a relay statement").await;
}

/// A settle the database refuses for its data (here a mark statement that cannot take the entry
/// id it is given) is given up after a few tries, reported and counted: never retried for ever.
#[tokio::test]
async fn a_settle_the_database_refuses_is_given_up_reported_and_counted() {
    let env = TestEnv::new().await;
    env.insert_events("s", "user", 2).await;
    let mark = "mark_delivered = \"\"\"
UPDATE audit_outbox o SET status = 'DELIVERED', delivered_at = now(), stream_entry_id = (s.entry_id::bigint)::text,
       lease_expires_at = NULL
FROM unnest(:ids::bigint[], :tokens::bigint[], :entry_ids::text[]) AS s(id, token, entry_id)
WHERE o.id = s.id AND o.claim_token = s.token AND o.claimed_by = :claimant\"\"\"";
    let relay = Handoff::run(&env.config(&format!("claim = \"leased\"\n[relay.sql]\n{mark}")));
    let address = relay.telemetry_address().await;
    relay.await_log("the database refuses this settle's data").await;
    let metrics = get(&address, "/metrics").1;
    let refused = common::http::sample(&metrics, r#"handoff_relay_settle_refused_total{relay="relay"}"#);
    assert!(refused.is_some_and(|n| n >= 1.0), "{metrics}");
    assert_eq!(env.count("DELIVERED").await, 0);
}
