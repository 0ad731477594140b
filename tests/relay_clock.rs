//! Invariant 5: only the database clock decides leases and retry times. The relay and the worker
//! run with their process clock two hours ahead (libfaketime); what they claim, for how long and
//! when a failed row comes back must not change.

use crate::common;

use common::process::{Handoff, Launch};
use common::{TestEnv, eventually};
use fred::prelude::*;

const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

fn two_hours_ahead() -> Vec<(&'static str, String)> {
    vec![
        ("LD_PRELOAD", FAKETIME_LIB.into()),
        ("FAKETIME", "+2h".into()),
        // Timers and intervals keep real time; only wall-clock readings are shifted.
        ("DONT_FAKE_MONOTONIC", "1".into()),
    ]
}

/// Hours (UTC, "HH") the relay's own log timestamps should show if its clock is shifted.
fn shifted_hours() -> Vec<String> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    [2 * 3600, 2 * 3600 + 120].iter().map(|d| format!("T{:02}:", ((now + d) / 3600) % 24)).collect()
}

#[tokio::test]
async fn a_relay_whose_clock_runs_ahead_still_follows_the_database_clock() {
    assert!(std::path::Path::new(FAKETIME_LIB).exists(), "libfaketime missing (scripts/services installs it)");
    let env = TestEnv::new().await;
    env.insert_events("due", "user", 5).await;
    // Due in one hour by the database's clock: a relay trusting its own (+2h) would claim it.
    env.db
        .execute(
            "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, next_attempt_at)
             VALUES ('later', 'user', 'a', 'user.changed', '{}', now() + interval '1 hour')",
            &[],
        )
        .await
        .unwrap();
    let relay = Handoff::launch(&env.config(""), Launch { env: two_hours_ahead(), args: vec![], binary: None });
    env.await_delivered(5).await;
    let claims = relay.logs().matches("claimed").count();
    eventually("several more claims", || async {
        (relay.logs().matches("claimed").count() >= claims + 5).then_some(())
    })
    .await;
    let hours = shifted_hours();
    assert!(hours.iter().any(|h| relay.logs().contains(h.as_str())), "the relay's clock is shifted: {}", relay.logs());
    let state: String =
        env.db.query_one("SELECT status FROM audit_outbox WHERE event_id = 'later'", &[]).await.unwrap().get(0);
    assert_eq!(state, "PENDING", "not due by the database clock, so not claimed");
}

#[tokio::test]
async fn leases_are_set_by_the_database_clock() {
    let env = TestEnv::new().await;
    env.insert_events("l", "user", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let mut launch_env = two_hours_ahead();
    launch_env.push(("HANDOFF_FAULT_PAUSE", "before_append".into()));
    launch_env.push(("HANDOFF_FAULT_MARKER", dir.path().join("marker").display().to_string()));
    let _relay =
        Handoff::launch(&env.config("lease = \"30s\""), Launch { env: launch_env, args: vec![], binary: None });
    let marker = dir.path().join("marker");
    eventually("the relay to park with its rows claimed", || async { marker.exists().then_some(()) }).await;
    let off = env
        .scalar_i64(
            "SELECT count(*) FROM audit_outbox WHERE status = 'IN_FLIGHT'
               AND lease_expires_at BETWEEN now() + interval '20 seconds' AND now() + interval '40 seconds'",
        )
        .await;
    assert_eq!(off, 3, "each lease is now() + 30s on the database's clock, not two hours on");
}

#[tokio::test]
async fn retry_times_are_set_by_the_database_clock() {
    let env = TestEnv::new().await;
    // The key for aggregate type `bad` holds a string: XADD answers WRONGTYPE, a row failure.
    let _: () = env.redis.set(env.stream("bad"), "not a stream", None, None, false).await.unwrap();
    env.insert_events("bad", "bad", 1).await;
    let config = env.config("[relay.backoff]\ninitial = \"10m\"\nmax = \"10m\"\nmultiplier = 2.0\njitter = 0.0");
    let _relay = Handoff::launch(&config, Launch { env: two_hours_ahead(), args: vec![], binary: None });
    eventually("the failure to be recorded", || async {
        (env.scalar_i64("SELECT attempts::int8 FROM audit_outbox WHERE event_id = 'bad-1'").await == 1).then_some(())
    })
    .await;
    let due_in_ten_minutes = env
        .scalar_i64(
            "SELECT count(*) FROM audit_outbox WHERE event_id = 'bad-1' AND status = 'PENDING'
               AND next_attempt_at BETWEEN now() + interval '9 minutes' AND now() + interval '11 minutes'",
        )
        .await;
    assert_eq!(due_in_ten_minutes, 1, "the retry is now() + 10 min on the database's clock, not two hours on");
}

#[tokio::test]
async fn a_worker_whose_clock_runs_ahead_follows_the_database_clock() {
    let env = TestEnv::new().await;
    for (event_id, due) in [("now", "now()"), ("later", "now() + interval '1 hour'")] {
        env.db
            .execute(
                &format!(
                    "INSERT INTO consumer_inbox (consumer, event_id, event_type, owner, payload, content_hash, stream, stream_entry_id, next_retry_at)
                     VALUES ('admin', $1, 'user.changed', 'relay', '{{\"actor\": \"a\"}}', 'h', 's', '0-1', {due})"
                ),
                &[&event_id],
            )
            .await
            .unwrap();
    }
    let config = format!("{}{}", env.base_config(), TestEnv::worker_section(""));
    let worker = Handoff::launch(&config, Launch { env: two_hours_ahead(), args: vec![], binary: None });
    eventually("the due row processed", || async { (env.inbox_count("PROCESSED").await == 1).then_some(()) }).await;
    let hours = shifted_hours();
    assert!(
        hours.iter().any(|h| worker.logs().contains(h.as_str())),
        "the worker's clock is shifted: {}",
        worker.logs()
    );
    // A worker trusting its own clock would have claimed both rows in the claim that took `now`.
    let state: String =
        env.db.query_one("SELECT status FROM consumer_inbox WHERE event_id = 'later'", &[]).await.unwrap().get(0);
    assert_eq!(state, "PENDING", "not due by the database clock, so not claimed");
}
