//! The relay's tests written for MariaDB (the MySQL dialect) alone: claims under stress (its own
//! trigger), the operator commands on dead rows, and rows only MariaDB stores. Delivery, kills,
//! fencing, outages, row failures, shutdown, `check`, `verify` and a foreign table run on both
//! dialects from the Postgres suites' files (`relay_delivery.rs`, `relay_failures.rs`, …).

use crate::common;

use common::eventually;
use common::mysql::MyEnv;
use common::process::{Handoff, run_to_end};
use fred::prelude::*;

/// As `relay_claim_stress.rs` on Postgres: two relays with four claim loops each, short polls and
/// backoffs, the first event of every key failing and retrying while the rest flows. A trigger
/// records every claim of a row that was not PENDING (none may happen without a crash).
#[tokio::test]
async fn claims_under_stress_never_take_a_held_or_settled_row() {
    const KEYS: usize = 20;
    const PER_KEY: usize = 100;
    let env = MyEnv::new().await;
    env.exec(
        "CREATE TABLE reclaims (id BIGINT, old_status VARCHAR(16), old_owner VARCHAR(255), new_owner VARCHAR(255),
                                old_token BIGINT, old_lease DATETIME(3), at DATETIME(3))",
    )
    .await;
    env.exec(
        "CREATE TRIGGER record_reclaim AFTER UPDATE ON audit_outbox FOR EACH ROW
         INSERT INTO reclaims SELECT OLD.id, OLD.status, OLD.claimed_by, NEW.claimed_by, OLD.claim_token,
                                     OLD.lease_expires_at, NOW(3) FROM DUAL
         WHERE NEW.claim_token <> OLD.claim_token AND OLD.status <> 'PENDING'",
    )
    .await;
    let bad = env.stream("bad");
    let _: () = env.redis.set(bad.as_str(), "blocked", None, None, false).await.unwrap();
    let config = env.config(&format!(
        "stream = \"{}:{{event_type}}\"\nbatch_size = 50\nconcurrency = 4\npoll_interval = \"10ms\"\nlease = \"20s\"\n\
         max_attempts = 100000\n\
         [relay.backoff]\ninitial = \"10ms\"\nmax = \"50ms\"\nmultiplier = 2.0\njitter = 0.5\n",
        env.id
    ));
    let relays = [Handoff::run(&config), Handoff::run(&config)];
    for relay in &relays {
        relay.await_log("relay started").await;
    }
    let mut pace = tokio::time::interval(std::time::Duration::from_millis(15));
    for n in 0..=PER_KEY {
        pace.tick().await;
        let event_type = if n == 0 { "bad" } else { "good" };
        let rows: Vec<String> =
            (0..KEYS).map(|k| format!("('k{k}-{n}', 'user', 'k{k}', '{event_type}', JSON_OBJECT('n', {n}))")).collect();
        env.exec(&format!(
            "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES {}",
            rows.join(", ")
        ))
        .await;
    }
    let _: i64 = env.redis.del(bad.as_str()).await.unwrap();
    env.await_delivered((KEYS * (PER_KEY + 1)) as i64).await;

    type Reclaim = (i64, String, String, String, i64, Option<String>, String);
    let reclaims: Vec<Reclaim> = env
        .rows("SELECT id, old_status, old_owner, new_owner, old_token, CAST(old_lease AS CHAR), CAST(at AS CHAR) FROM reclaims")
        .await;
    if !reclaims.is_empty() {
        let lease_lines = |relay: &Handoff| {
            relay
                .logs()
                .lines()
                .filter(|l| l.contains("lease") || l.contains("WARN") || l.contains("ERROR"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        panic!(
            "rows claimed from another claim or settled (id, old status, old owner, new owner, old token, old lease, at): \
             {reclaims:?}\nrelay 1:\n{}\nrelay 2:\n{}",
            lease_lines(&relays[0]),
            lease_lines(&relays[1])
        );
    }
    for relay in &relays {
        let metrics = common::http::get(&relay.telemetry_address().await, "/metrics").1;
        let fenced = common::http::sample(&metrics, r#"handoff_relay_fenced_settles_total{relay="relay"}"#);
        assert_eq!(fenced, Some(0.0), "settles refused by the fence");
    }
    let mut ids = env.stream_event_ids(&env.stream("good")).await;
    ids.extend(env.stream_event_ids(&bad).await);
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!((ids.len(), distinct.len()), (KEYS * (PER_KEY + 1), KEYS * (PER_KEY + 1)), "each event appended once");
}

/// `handoff status` and `handoff dead list | retry | purge` on MariaDB as on Postgres: filtered by error text, a
/// retry moves rows back to PENDING with attempts reset and counts the re-drive, a dry run
/// changes nothing, a purge deletes; the relay then delivers what was re-driven.
#[tokio::test]
async fn dead_rows_are_listed_re_driven_and_purged_by_the_operator_commands() {
    let env = MyEnv::new().await;
    env.insert_events("d", "user", 3).await;
    env.exec(
        "UPDATE audit_outbox SET status = 'DEAD', attempts = 5, dead_at = NOW(3) - INTERVAL 1 HOUR,
                last_error = CASE WHEN event_id = 'd-3' THEN 'other' ELSE 'stream rejected the entry' END",
    )
    .await;
    let config = env.config("");
    let (ok, out) = run_to_end(&config, &["dead", "list", "--relay", "relay", "--json"]);
    assert!(ok, "{out}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["count"], 3);
    assert_eq!(listed["rows"][0]["source"], "relay relay");
    assert!(listed["rows"][0]["dead_for_seconds"].as_f64().unwrap() >= 3599.0);

    let (ok, out) = run_to_end(&config, &["dead", "retry", "--relay", "relay", "--error", "rejected", "--dry-run"]);
    assert!(ok && out.contains("would re-drive: 2 row(s)"), "{out}");
    assert_eq!(env.count("DEAD").await, 3, "a dry run changes nothing");
    let (ok, out) = run_to_end(&config, &["dead", "retry", "--relay", "relay", "--error", "rejected"]);
    assert!(ok && out.contains("re-driven: 2 row(s)"), "{out}");
    assert_eq!(
        env.scalar("SELECT COUNT(*) FROM audit_outbox WHERE status = 'PENDING' AND attempts = 0 AND redrives = 1")
            .await,
        2
    );
    let (ok, out) = run_to_end(&config, &["status", "--json"]);
    assert!(ok, "{out}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    let relay = status.as_array().unwrap().iter().find(|l| l["component"] == "relay relay").unwrap();
    assert_eq!((relay["pending"].as_i64(), relay["dead"].as_i64()), (Some(2), Some(1)), "{status}");
    let (ok, out) = run_to_end(&config, &["dead", "purge", "--relay", "relay", "--event-id", "d-3"]);
    assert!(ok && out.contains("purged: 1 row(s)"), "{out}");
    assert_eq!(env.scalar("SELECT COUNT(*) FROM audit_outbox").await, 2);

    let _relay = Handoff::run(&config);
    env.await_delivered(2).await;
}

/// A zero date in `created_at` (MariaDB stores it without strict NO_ZERO_DATE) and a payload
/// over the relay's limit stop only their own rows: DEAD with the reason, the rest delivered.
#[tokio::test]
async fn a_zero_date_or_an_oversized_row_turns_only_that_row_dead() {
    let env = MyEnv::new().await;
    env.insert_events("a", "user", 30).await;
    env.exec(
        "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at)
         VALUES ('odd-zero-date', 'user', 'u', 'user.changed', '{}', '0000-00-00 00:00:00'),
                ('odd-large', 'user', 'u', 'user.changed', JSON_OBJECT('blob', REPEAT('x', 5000)), NOW(3))",
    )
    .await;
    env.insert_events("b", "user", 30).await;
    let _relay = Handoff::run(&env.config("payload_max_bytes = 4096"));
    env.await_delivered(60).await;
    eventually("the odd rows to turn DEAD", || async { (env.count("DEAD").await == 2).then_some(()) }).await;
    let dead: Vec<(String, String)> =
        env.rows("SELECT event_id, last_error FROM audit_outbox WHERE status = 'DEAD' ORDER BY event_id").await;
    assert!(dead[0].0 == "odd-large" && dead[0].1.contains("payload_max_bytes"), "{dead:?}");
    assert!(dead[1].0 == "odd-zero-date" && dead[1].1.contains("age_ms"), "{dead:?}");
    assert_eq!(env.stream_event_ids(&env.stream("user")).await.len(), 60);
}

/// CloudEvents' `time` on MariaDB: the claim's `created_at`, as RFC 3339 in UTC (the sessions'
/// zone), from the claim script's last statement.
#[tokio::test]
async fn a_cloudevents_relay_carries_created_at_as_the_events_time() {
    let env = MyEnv::new().await;
    env.exec(
        "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at)
         VALUES ('ce-1', 'user', 'u-1', 'user.changed', JSON_OBJECT('n', 1), '2026-12-06 10:11:12.345')",
    )
    .await;
    let _relay = Handoff::run(&env.config("[relay.cloudevents]\nsource = \"/services/auth\"\n"));
    env.await_delivered(1).await;
    let entries: Vec<(String, std::collections::HashMap<String, String>)> =
        env.redis.xrange(env.stream("user"), "-", "+", None).await.unwrap();
    let fields = &entries[0].1;
    assert_eq!(fields.get("ce_time").map(String::as_str), Some("2026-12-06T10:11:12.345000Z"));
    assert_eq!((fields["ce_id"].as_str(), fields["ce_subject"].as_str()), ("ce-1", "u-1"));
}
