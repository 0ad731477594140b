//! The relay-core suite against MariaDB (the MySQL dialect): delivery, kills, fencing, outages,
//! row failures, shutdown, and a foreign table adopted by configuration alone.

use crate::common;

use std::collections::HashMap;

use common::eventually;
use common::mysql::MyEnv;
use common::process::{Handoff, run_to_end};
use common::redis_server::RedisServer;
use fred::prelude::*;
use mysql_async::prelude::Queryable;

#[tokio::test]
async fn delivers_every_row_and_records_the_entry_id() {
    let env = MyEnv::new().await;
    env.insert_events("e", "user", 700).await;
    let (ok, out) = run_to_end(&env.config(""), &["check"]);
    assert!(ok, "{out}");
    let _relay = Handoff::run(&env.config("batch_size = 300"));
    env.await_delivered(700).await;
    let entries: Vec<(String, HashMap<String, String>)> =
        env.redis.xrange(env.stream("user"), "-", "+", None).await.unwrap();
    assert_eq!(entries.len(), 700);
    let first = entries.iter().find(|(_, f)| f["event_id"] == "e-1").unwrap();
    let payload: serde_json::Value = serde_json::from_str(&first.1["payload"]).unwrap();
    assert_eq!(payload["auditId"], "e-1");
    assert!(first.1["headers"].contains("traceparent"));
    let recorded: Option<String> = env
        .db
        .get_conn()
        .await
        .unwrap()
        .query_first("SELECT stream_entry_id FROM audit_outbox WHERE event_id = 'e-1'")
        .await
        .unwrap();
    assert_eq!(recorded.as_ref(), Some(&first.0));
    assert_eq!(env.scalar("SELECT COALESCE(MAX(attempts), 0) FROM audit_outbox").await, 0);
}

#[tokio::test]
async fn sigkill_between_append_and_settle_loses_nothing() {
    let env = MyEnv::new().await;
    env.insert_events("k", "user", 50).await;
    // One claim loop, so one claim takes every row (two loops' concurrent SKIP LOCKED claims may
    // both pass a row the other had locked for a moment, and both then park).
    let mut first = Handoff::run_paused(&env.config("concurrency = 1"), "after_append");
    first.await_paused().await;
    eventually("every row parked in flight", || async { (env.count("IN_FLIGHT").await == 50).then_some(()) }).await;
    first.kill();
    let _second = Handoff::run(&env.config(""));
    env.await_delivered(50).await;
    let ids: std::collections::HashSet<String> = env.stream_event_ids(&env.stream("user")).await.into_iter().collect();
    assert_eq!(ids.len(), 50);
    assert_eq!(env.scalar("SELECT COUNT(*) FROM audit_outbox WHERE expired_claims = 1 AND attempts = 0").await, 50);
}

#[tokio::test]
async fn an_expired_lease_under_a_stopped_relay_is_fenced() {
    let env = MyEnv::new().await;
    env.insert_events("f", "user", 20).await;
    let slow = Handoff::run_paused(&env.config("concurrency = 1"), "after_append");
    slow.await_paused().await;
    slow.signal("STOP");
    eventually("the stopped relay's leases to expire", || async {
        (env.scalar("SELECT COUNT(*) FROM audit_outbox WHERE lease_expires_at > NOW(3)").await == 0).then_some(())
    })
    .await;
    let takeover = Handoff::run(&env.config(""));
    env.await_delivered(20).await;
    drop(takeover);
    let before = env
        .scalar("SELECT CRC32(GROUP_CONCAT(event_id, stream_entry_id, claim_token ORDER BY id)) FROM audit_outbox")
        .await;
    slow.resume();
    slow.signal("CONT");
    slow.await_log("settle refused by the fence").await;
    let after = env
        .scalar("SELECT CRC32(GROUP_CONCAT(event_id, stream_entry_id, claim_token ORDER BY id)) FROM audit_outbox")
        .await;
    assert_eq!(before, after, "the late settle changed nothing");
}

#[tokio::test]
async fn a_redis_outage_burns_no_attempts() {
    let mut redis = RedisServer::start().await;
    let env = MyEnv::with_redis(&redis.url()).await;
    env.insert_events("before", "user", 50).await;
    let relay = Handoff::run(&env.config("max_attempts = 2"));
    env.await_delivered(50).await;
    redis.stop();
    env.insert_events("during", "user", 100).await;
    relay.await_log("stream unavailable; releasing rows").await;
    eventually("the claimed rows to be handed back", || async {
        (env.count("PENDING").await == 100 && env.count("IN_FLIGHT").await == 0).then_some(())
    })
    .await;
    assert_eq!(env.scalar("SELECT COALESCE(MAX(attempts), 0) FROM audit_outbox").await, 0);
    redis.restart().await;
    env.await_delivered(150).await;
    assert_eq!(env.count("DEAD").await, 0);
    assert_eq!(env.scalar("SELECT COALESCE(MAX(attempts), 0) FROM audit_outbox").await, 0);
}

#[tokio::test]
async fn a_rejected_row_backs_off_retries_and_turns_dead_and_shutdown_leaves_nothing_claimed() {
    let env = MyEnv::new().await;
    let _: () = env.redis.set(env.stream("bad"), "not a stream", None, None, false).await.unwrap();
    env.insert_events("bad", "bad", 1).await;
    env.insert_events("good", "user", 10).await;
    let config = env
        .config("max_attempts = 3\n[relay.backoff]\ninitial = \"200ms\"\nmax = \"1s\"\nmultiplier = 2.0\njitter = 0.0");
    let mut relay = Handoff::run(&config);
    env.await_delivered(10).await;
    eventually("the rejected row to turn DEAD", || async { (env.count("DEAD").await == 1).then_some(()) }).await;
    let error: Option<String> = env
        .db
        .get_conn()
        .await
        .unwrap()
        .query_first("SELECT last_error FROM audit_outbox WHERE status = 'DEAD'")
        .await
        .unwrap();
    assert!(error.unwrap_or_default().contains("WRONGTYPE"));
    assert_eq!(env.scalar("SELECT attempts FROM audit_outbox WHERE status = 'DEAD'").await, 3);
    relay.signal("TERM");
    assert!(relay.await_exit().await.success());

    env.insert_events("t", "user", 30).await;
    let mut parked = Handoff::run_paused(&config, "before_append");
    parked.await_paused().await;
    parked.signal("TERM");
    assert!(parked.await_exit().await.success());
    assert_eq!(env.count("IN_FLIGHT").await, 0, "in-flight rows were released");
    assert_eq!(env.count("PENDING").await, 30);
}

#[tokio::test]
async fn two_replicas_deliver_each_row_once() {
    let env = MyEnv::new().await;
    // A lease long enough that a busy machine cannot let one lapse (which would allow a second
    // delivery): the test is about concurrent claims, not takeovers.
    let config = env.config("batch_size = 100\nconcurrency = 2\nlease = \"20s\"");
    let a = Handoff::run(&config);
    let b = Handoff::run(&config);
    a.await_log("relay started").await;
    b.await_log("relay started").await;
    env.insert_events("r", "user", 2000).await;
    env.await_delivered(2000).await;
    let ids = env.stream_event_ids(&env.stream("user")).await;
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!((ids.len(), distinct.len()), (2000, 2000));
}

/// A table of its own: varchar UUID ids, a `state` column with its own words, `claim_owner` /
/// `claimed_at` / `next_retry_at` columns.
const FOREIGN: &str = "
CREATE TABLE outbox_events (
    uuid          VARCHAR(36)  NOT NULL PRIMARY KEY,
    kind          VARCHAR(64)  NOT NULL,
    topic         VARCHAR(64)  NOT NULL,
    body          JSON         NOT NULL,
    state         VARCHAR(16)  NOT NULL DEFAULT 'waiting',
    tries         INT          NOT NULL DEFAULT 0,
    lapses        INT          NOT NULL DEFAULT 0,
    next_retry_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    claim_owner   VARCHAR(255) NULL,
    claim_seq     BIGINT       NOT NULL DEFAULT 0,
    claimed_at    DATETIME(3)  NULL,
    lease_until   DATETIME(3)  NULL,
    made_at       DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    published_as  VARCHAR(64)  NULL,
    problem       TEXT         NULL,
    KEY due (state, next_retry_at)
)";

#[tokio::test]
async fn a_foreign_mysql_table_is_relayed_by_configuration_alone() {
    let env = MyEnv::new().await;
    env.exec(FOREIGN).await;
    env.exec(
        "INSERT INTO outbox_events (uuid, kind, topic, body)
              SELECT UUID(), 'invoice.paid', 'billing', JSON_OBJECT('n', seq)
              FROM (SELECT 1 AS seq UNION SELECT 2 UNION SELECT 3 UNION SELECT 4 UNION SELECT 5) s",
    )
    .await;
    env.exec("INSERT INTO outbox_events (uuid, kind, topic, body) VALUES (UUID(), 'invoice.paid', 'blocked', '{}')")
        .await;
    let _: () = env.redis.set(env.stream("blocked"), "not a stream", None, None, false).await.unwrap();
    let rows = "JOIN JSON_TABLE(:ids, '$[*]' COLUMNS (n FOR ORDINALITY, id VARCHAR(36) PATH '$')) AS i ON e.uuid = i.id \
                JOIN JSON_TABLE(:tokens, '$[*]' COLUMNS (n FOR ORDINALITY, seq BIGINT PATH '$')) AS t ON t.n = i.n";
    let fence = "e.claim_seq = t.seq AND e.claim_owner = :claimant AND e.state = 'sending'";
    let config = env.config(&format!(
        r#"stream = "{id}:{{topic}}"
max_attempts = 1

[relay.sql]
claim = """
SELECT uuid AS id FROM outbox_events
WHERE (state = 'waiting' AND next_retry_at <= NOW(3)) OR (state = 'sending' AND lease_until <= NOW(3))
ORDER BY made_at LIMIT :batch_size FOR UPDATE SKIP LOCKED;
UPDATE outbox_events SET lapses = lapses + IF(state = 'sending', 1, 0), state = 'sending',
    claim_owner = :claimant, claim_seq = claim_seq + 1, claimed_at = NOW(3),
    lease_until = NOW(3) + INTERVAL :lease_ms * 1000 MICROSECOND
WHERE uuid IN (SELECT j.id FROM JSON_TABLE(:ids, '$[*]' COLUMNS (id VARCHAR(36) PATH '$')) AS j);
SELECT uuid AS id, claim_seq AS token, uuid AS event_id, kind AS event_type, topic, body AS payload,
       tries AS attempts, lapses AS expired_claims, TIMESTAMPDIFF(MICROSECOND, made_at, NOW(3)) / 1000 AS age_ms
FROM outbox_events WHERE uuid IN (SELECT j.id FROM JSON_TABLE(:ids, '$[*]' COLUMNS (id VARCHAR(36) PATH '$')) AS j)"""
mark_delivered = """UPDATE outbox_events e {rows}
JOIN JSON_TABLE(:entry_ids, '$[*]' COLUMNS (n FOR ORDINALITY, entry VARCHAR(64) PATH '$')) AS x ON x.n = i.n
SET e.state = 'sent', e.published_as = x.entry, e.lease_until = NULL WHERE {fence}"""
retry = "UPDATE outbox_events SET state = 'waiting', tries = tries + 1, problem = :error, lease_until = NULL, next_retry_at = NOW(3) + INTERVAL :delay_ms * 1000 MICROSECOND WHERE uuid = :id AND claim_seq = :token AND claim_owner = :claimant AND state = 'sending'"
dead = "UPDATE outbox_events SET state = 'gave_up', tries = tries + 1, problem = :error, lease_until = NULL WHERE uuid = :id AND claim_seq = :token AND claim_owner = :claimant AND state = 'sending'"
release = "UPDATE outbox_events e {rows} SET e.state = 'waiting', e.lease_until = NULL WHERE {fence}"
renew = "UPDATE outbox_events e {rows} SET e.lease_until = NOW(3) + INTERVAL :lease_ms * 1000 MICROSECOND WHERE {fence}"
"#,
        id = env.id
    ));
    let (ok, out) = run_to_end(&config, &["check"]);
    assert!(ok, "check accepts the foreign statements:\n{out}");
    let _relay = Handoff::run(&config);
    eventually("five sent, one given up", || async {
        let sent = env.scalar("SELECT COUNT(*) FROM outbox_events WHERE state = 'sent'").await;
        let gave_up = env.scalar("SELECT COUNT(*) FROM outbox_events WHERE state = 'gave_up'").await;
        (sent == 5 && gave_up == 1).then_some(())
    })
    .await;
    let entries: Vec<(String, HashMap<String, String>)> =
        env.redis.xrange(env.stream("billing"), "-", "+", None).await.unwrap();
    assert_eq!(entries.len(), 5);
    assert_eq!(entries[0].1["event_type"], "invoice.paid");
    assert_eq!(entries[0].1["event_id"].len(), 36, "a UUID id travels as text");
    let published: Option<String> = env
        .db
        .get_conn()
        .await
        .unwrap()
        .exec_first("SELECT published_as FROM outbox_events WHERE uuid = ?", (entries[0].1["event_id"].as_str(),))
        .await
        .unwrap();
    assert_eq!(published.as_ref(), Some(&entries[0].0));
}

#[tokio::test]
async fn check_names_the_mysql_statement_the_database_rejects() {
    let env = MyEnv::new().await;
    let config = env.config("[relay.sql]\ndead = \"UPDATE audit_outbox SET statuz = 'DEAD' WHERE id = :id\"\n");
    let (ok, out) = run_to_end(&config, &["check"]);
    assert!(!ok);
    assert!(out.contains("sql.dead") && out.contains("statuz"), "{out}");
}

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

/// `handoff verify` on MariaDB, reading the delivered rows three at a time (`page_rows`; the
/// store does hand them over in pages of three):
/// trimmed entries are told apart from lost ones, counts add up across pages, and `--repair`
/// re-drives every lost row, which the relay then appends again.
#[tokio::test]
async fn verify_reads_delivered_rows_in_pages_and_repairs_the_lost() {
    let env = MyEnv::new().await;
    let config = env.config("[relay.broker_loss]\nenabled = false\npage_rows = 3\n");
    let _relay = Handoff::run(&config);
    env.insert_events("v", "user", 20).await;
    env.await_delivered(20).await;
    assert_eq!(common::delivered_page_sizes(&config, 3).await, [3, 3, 3, 3, 3, 3, 2], "read three rows at a time");
    let stream = env.stream("user");
    let _: i64 = env.redis.xtrim(&stream, ("MAXLEN", "=", 10)).await.unwrap();

    let (ok, out) = run_to_end(&config, &["verify", "--since", "10m"]);
    assert!(ok && out.contains("20 checked, 10 trimmed, 0 missing"), "{out}");
    let _: i64 = env.redis.del(&stream).await.unwrap();
    let (ok, out) = run_to_end(&config, &["verify", "--since", "10m"]);
    assert!(!ok && out.contains("20 missing"), "{out}");
    let (ok, out) = run_to_end(&config, &["verify", "--since", "10m", "--repair"]);
    assert!(ok && out.contains("20 re-driven"), "{out}");
    eventually("the relay to append the re-driven rows", || async {
        (env.stream_event_ids(&stream).await.len() == 20).then_some(())
    })
    .await;
    env.await_delivered(20).await;
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
