//! Delivery semantics beyond the seed: LISTEN/NOTIFY wake-up, retention, delete-on-deliver (on
//! both brokers), trimming on append (length, age) and consumer-aware, dead-letter re-drive.
//! Publish dedupe under a kill is the chain's, on both brokers (`both_brokers.rs`).

use crate::common;

use common::brokers::{Chain, on_both_brokers};
use common::process::{Handoff, run_with_path};
use common::{TestEnv, eventually};
use fred::prelude::*;

#[tokio::test]
async fn notify_wakes_the_relay_without_waiting_for_the_poll_interval() {
    let env = TestEnv::new().await;
    // With a ten-minute poll, only the wake-up path can deliver within the test's wait.
    let config = env.config("poll_interval = \"10m\"\n[relay.notify]\nchannel = \"handoff_outbox\"");
    // The environment's schema has no NOTIFY trigger: `migrate` with this config makes it.
    let (ok, out) = common::process::run_to_end(&config, &["migrate"]);
    assert!(ok && out.contains("0014_outbox_notify#notify"), "{out}");
    let relay = Handoff::run(&config);
    relay.await_log("listening for outbox inserts").await;
    env.insert_events("n", "user", 5).await;
    env.await_delivered(5).await;

    // Cut every connection of the relay, the LISTEN one included: it must listen again.
    env.scalar_i64(&format!(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = 'handoff-{}' AND pid <> pg_backend_pid()) t",
        env.id
    ))
    .await;
    eventually("the LISTEN connection to come back", || async {
        (relay.logs().matches("listening for outbox inserts").count() >= 2).then_some(())
    })
    .await;
    env.insert_events("m", "user", 5).await;
    env.await_delivered(10).await;
}

/// The reference outbox's NOTIFY trigger exists only for a relay with `[relay.notify]`: a
/// transaction that notifies holds a cluster-wide lock through its commit, which makes the
/// owner's inserts commit one at a time. `migrate` without it leaves none (0004 made one, 0014
/// drops it); with it, makes it, and the relay is woken by it.
#[tokio::test]
async fn migrate_makes_the_notify_trigger_only_for_a_relay_that_listens() {
    let env = TestEnv::empty().await;
    let trigger = "SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass('audit_outbox') \
                   AND tgname = 'audit_outbox_notify'";
    let (ok, out) = common::process::run_to_end(&env.config(""), &["migrate"]);
    assert!(ok, "{out}");
    assert_eq!(env.scalar_i64(trigger).await, 0, "no relay listens: no trigger");

    let config = env.config("poll_interval = \"10m\"\n[relay.notify]\n");
    let (ok, out) = common::process::run_to_end(&config, &["check"]);
    let warning = "warn: relay `relay`.notify: no trigger on audit_outbox calls handoff_notify('handoff_outbox')";
    assert!(ok && out.contains(warning), "check says the relay would only poll: {out}");
    let (ok, out) = common::process::run_to_end(&config, &["migrate"]);
    assert!(ok && out.contains("0014_outbox_notify#notify"), "{out}");
    assert_eq!(env.scalar_i64(trigger).await, 1);
    let (ok, out) = common::process::run_to_end(&config, &["check"]);
    assert!(ok && !out.contains(".notify:"), "{out}");
    // With a ten-minute poll, only the wake-up path delivers within the test's wait.
    let relay = Handoff::run(&config);
    relay.await_log("listening for outbox inserts").await;
    env.insert_events("n", "user", 3).await;
    env.await_delivered(3).await;
    // The listening relay gone from the config, the trigger stays: check says what it costs.
    let (ok, out) = common::process::run_to_end(&env.config(""), &["check"]);
    let warning = "warn: relay `relay`: a trigger on audit_outbox calls handoff_notify, but no relay of this config";
    assert!(ok && out.contains(warning), "{out}");
}

#[tokio::test]
async fn retention_purges_old_delivered_rows_in_batches_and_keeps_the_rest() {
    let env = TestEnv::new().await;
    env.insert_events("old", "user", 25).await;
    env.insert_events("new", "user", 5).await;
    env.db
        .batch_execute(
            "UPDATE audit_outbox SET status = 'DELIVERED', delivered_at = now() - interval '8 days' WHERE event_id LIKE 'old-%';
             UPDATE audit_outbox SET status = 'DEAD', dead_at = now() - interval '30 days' WHERE event_id = 'old-1';",
        )
        .await
        .unwrap();
    let relay =
        Handoff::run(&env.config("[relay.retention]\ndelivered_after = \"7d\"\nbatch = 10\ninterval = \"100ms\""));
    eventually("old delivered rows purged", || async {
        (env.scalar_i64("SELECT count(*) FROM audit_outbox WHERE event_id LIKE 'old-%'").await == 1).then_some(())
    })
    .await;
    env.await_delivered(5).await;
    assert_eq!(env.count("DEAD").await, 1, "DEAD rows wait for a re-drive or an explicit purge");
    relay.await_log("purged delivered rows").await;
    assert!(relay.logs().contains("rows=24"), "one pass of three batches: {}", relay.logs());
}

async fn delete_on_deliver_removes_rows_once_appended(chain: Chain) {
    let env = &chain.env;
    env.insert_events("x", "user", 30).await;
    let _relay = Handoff::run(&chain.relay_config("settle = \"delete\"", ""));
    eventually("rows deleted", || async {
        (env.scalar_i64("SELECT count(*) FROM audit_outbox").await == 0).then_some(())
    })
    .await;
    assert_eq!(chain.stream_event_ids().await.len(), 30);
}

on_both_brokers!(delete_on_deliver_removes_rows_once_appended);

#[tokio::test]
async fn maxlen_trims_the_stream_on_every_append() {
    let env = TestEnv::new().await;
    env.insert_events("m", "user", 600).await;
    let _relay = Handoff::run(&env.config("[relay.trim]\nmaxlen = 10"));
    env.await_delivered(600).await;
    // `MAXLEN ~ 10`: Redis keeps at least 10 and drops whole nodes (100 entries by default).
    let len: u64 = env.redis.xlen(env.stream("user")).await.unwrap();
    assert!((10..300).contains(&len), "600 appended with maxlen 10, {len} left");
}

#[tokio::test]
async fn min_age_trims_entries_older_than_the_age_on_every_append() {
    let env = TestEnv::new().await;
    env.insert_events("a", "user", 300).await;
    let _relay = Handoff::run(&env.config("[relay.trim]\nmin_age = \"1ms\""));
    env.await_delivered(300).await;
    // Appended after the first 300 were: by then all of those are older than 1 ms.
    env.insert_events("b", "user", 300).await;
    env.await_delivered(600).await;
    let len: u64 = env.redis.xlen(env.stream("user")).await.unwrap();
    assert!(len < 600, "entries older than min_age are trimmed as later ones are appended: {len} left");
}

async fn read_and_ack(env: &TestEnv, group: &str, count: u64, ack: usize) {
    let key = env.stream("user");
    let reply: Value = env.redis.xreadgroup(group, "c", Some(count), None, false, &key, ">").await.unwrap();
    let ids: Vec<String> = match reply {
        Value::Array(streams) => match &streams[0] {
            Value::Array(pair) => match &pair[1] {
                Value::Array(entries) => entries
                    .iter()
                    .filter_map(|e| match e {
                        Value::Array(parts) => parts[0].as_string(),
                        _ => None,
                    })
                    .collect(),
                _ => vec![],
            },
            _ => vec![],
        },
        _ => vec![],
    };
    assert_eq!(ids.len() as u64, count);
    let _: i64 = env.redis.xack(&key, group, ids[..ack].to_vec()).await.unwrap();
}

#[tokio::test]
async fn acknowledged_trimming_keeps_what_a_lagging_group_still_needs() {
    let env = TestEnv::new().await;
    let key = env.stream("user");
    for group in ["fast", "slow"] {
        let _: Value = env.redis.xgroup_create(&key, group, "0", true).await.unwrap();
    }
    env.insert_events("t", "user", 1000).await;
    let relay = Handoff::run(&env.config("[relay.trim]\nacknowledged = true\ninterval = \"100ms\""));
    env.await_delivered(1000).await;
    read_and_ack(&env, "fast", 1000, 1000).await;
    // `slow` has read nothing: however often the trim runs, every entry stays.
    let address = relay.telemetry_address().await;
    eventually("a few trim passes", || async {
        relay.logs().matches("trimmed below what every group acknowledged").count().ge(&3).then_some(())
    })
    .await;
    let len: u64 = env.redis.xlen(&key).await.unwrap();
    assert_eq!(len, 1000);

    // `slow` takes 800 and finishes 600: only entries below its oldest pending one may go.
    read_and_ack(&env, "slow", 800, 600).await;
    let oldest_needed = env.stream_entries(&key).await[600].0.clone();
    eventually("the stream to shrink", || async {
        let len: u64 = env.redis.xlen(&key).await.unwrap();
        (len < 1000).then_some(())
    })
    .await;
    let remaining: Vec<String> = env.stream_entries(&key).await.into_iter().map(|(id, _)| id).collect();
    assert!(remaining.contains(&oldest_needed), "the lagging group's pending entries survive");
    assert!(remaining.len() >= 400);
    let metrics = common::http::get(&address, "/metrics").1;
    let trimmed = common::http::sample(&metrics, r#"handoff_relay_trimmed_entries_total{relay="relay"}"#).unwrap();
    assert_eq!(trimmed as usize, 1000 - remaining.len());
}

#[tokio::test]
async fn dead_rows_are_listed_re_driven_with_history_and_purged() {
    let env = TestEnv::new().await;
    let _: () = env.redis.set(env.stream("bad"), "not a stream", None, None, false).await.unwrap();
    env.insert_events("bad", "bad", 3).await;
    let config = env.config("max_attempts = 1");
    let relay = Handoff::run(&config);
    eventually("three DEAD rows", || async { (env.count("DEAD").await == 3).then_some(()) }).await;
    let path = relay.config_path();

    let (ok, out) = run_with_path(&path, &["dead", "list", "--json"]);
    assert!(ok, "{out}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["count"], 3);
    assert!(listed["rows"][0]["last_error"].as_str().unwrap().contains("WRONGTYPE"));

    let (ok, out) = run_with_path(&path, &["dead", "retry", "--event-id", "bad-1", "--dry-run"]);
    assert!(ok && out.contains("would re-drive: 1 row(s)"), "{out}");
    assert_eq!(env.count("DEAD").await, 3, "a dry run touches nothing");

    // Fix the cause, then re-drive one event: it is delivered, its history kept.
    let _: i64 = env.redis.del(env.stream("bad")).await.unwrap();
    let (ok, out) = run_with_path(&path, &["dead", "retry", "--event-id", "bad-1"]);
    assert!(ok && out.contains("re-driven: 1 row(s)"), "{out}");
    env.await_delivered(1).await;
    let row = env
        .db
        .query_one("SELECT redrives, last_error IS NULL, attempts FROM audit_outbox WHERE event_id = 'bad-1'", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 1);

    let (ok, out) = run_with_path(&path, &["dead", "purge", "--error", "WRONGTYPE", "--limit", "1"]);
    assert!(ok && out.contains("purged: 1 row(s)"), "{out}");
    assert_eq!(env.count("DEAD").await, 1);
    let (ok, out) = run_with_path(&path, &["status", "--json"]);
    assert!(ok, "{out}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status[0]["dead"], 1);
}

#[tokio::test]
async fn dedupe_works_on_redis_cluster_across_slots() {
    let cluster = common::redis_cluster::RedisCluster::start().await;
    let env = TestEnv::with_redis(&cluster.url()).await;
    // Three aggregate types: three streams, spread over the cluster's slots.
    for kind in ["user", "order", "invoice"] {
        env.insert_events(kind, kind, 20).await;
    }
    let config = env.config("[relay.dedupe]\nwindow = \"10m\"");
    let mut first = Handoff::run_paused(&config, "after_append");
    first.await_paused().await;
    first.kill();
    let _second = Handoff::run(&config);
    env.await_delivered(60).await;
    for kind in ["user", "order", "invoice"] {
        let ids = env.stream_event_ids(&env.stream(kind)).await;
        assert_eq!(ids.len(), 20, "one entry per {kind} event despite the takeover");
    }
}

/// CloudEvents' `time` is the row's `created_at` (RFC 3339, UTC, microseconds), whichever claim
/// took the row — leased, locked or ordered — and on a replay of it.
#[tokio::test]
async fn cloudevents_carry_created_at_as_time_from_every_claim_and_from_a_replay() {
    for claim in ["claim = \"leased\"\n", "claim = \"locked\"\n", "[relay.ordering]\non_failure = \"park\"\n"] {
        let env = TestEnv::new().await;
        env.db
            .batch_execute(
                "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at)
                 VALUES ('ce-1', 'user', 'u-1', 'user.changed', '{}', '2026-12-06 10:11:12.345678+00')",
            )
            .await
            .unwrap();
        let config = env.config(&format!("{claim}[relay.cloudevents]\nsource = \"/services/auth\"\n"));
        let relay = Handoff::run(&config);
        env.await_delivered(1).await;
        drop(relay);
        let replayed = format!("{}:replayed", env.id);
        let (ok, out) = common::process::run_to_end(&config, &["replay", "--relay", "relay", "--to-stream", &replayed]);
        assert!(ok, "{out}");
        for stream in [env.stream("user"), replayed] {
            let entries = env.stream_entries(&stream).await;
            let fields = &entries.first().unwrap_or_else(|| panic!("{claim}: an entry in {stream}")).1;
            assert_eq!(
                fields.get("ce_time").map(String::as_str),
                Some("2026-12-06T10:11:12.345678Z"),
                "{claim} {stream}"
            );
            assert_eq!(fields.get("ce_id").map(String::as_str), Some("ce-1"));
        }
    }
}
