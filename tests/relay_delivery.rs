//! The relay's happy path and its guarantees under kills, stops and concurrent replicas; the
//! scenarios under `on_both_dialects!` run on Postgres and on MariaDB, those under
//! `on_both_brokers!` on Redis and on NATS JetStream (with the chain's in `both_brokers.rs`).

use crate::common;

use std::collections::HashMap;

use common::brokers::{Chain, on_both_brokers};
use common::db_env::{DbEnv, Dialect};
use common::process::{Handoff, run_to_end};
use common::{TestEnv, eventually};

/// Every row reaches the stream with its fields, over several batches, and the delivered row
/// names the entry the stream returned; no attempt is spent. `check` accepts the reference schema.
async fn delivers_every_row_with_its_fields_and_records_the_entry_id(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    env.insert_events("e", "user", 1200).await;
    let (ok, out) = run_to_end(&env.config(""), &["check"]);
    assert!(ok, "{out}");
    let _relay = Handoff::run(&env.config("batch_size = 500"));
    env.await_delivered(1200).await;

    let entries = env.stream_entries(&env.stream("user")).await;
    assert_eq!(entries.len(), 1200);
    // Two claim loops append side by side: without ordering mode, entries need not be in id order.
    let (entry_id, fields) = entries.iter().find(|(_, f)| f["event_id"] == "e-1").expect("e-1 appended");
    assert_eq!(fields["event_type"], "user.changed");
    assert_eq!(fields["aggregate_type"], "user");
    assert_eq!(fields["aggregate_id"], "agg-1");
    assert_eq!(fields["owner"], "relay");
    let payload: serde_json::Value = serde_json::from_str(&fields["payload"]).unwrap();
    assert_eq!(payload["auditId"], "e-1");
    assert!(fields["headers"].contains("traceparent"));
    let recorded = env.text("SELECT stream_entry_id FROM audit_outbox WHERE event_id = 'e-1'").await;
    assert_eq!(&recorded, entry_id, "the delivered row names the entry the stream returned");
    assert_eq!(env.scalar("SELECT COALESCE(MAX(attempts), 0) FROM audit_outbox").await, 0);
}

/// Each row goes to the stream (on NATS, the subject) its own values render from the template.
async fn rows_are_routed_per_row_by_the_stream_template(chain: Chain) {
    let env = &chain.env;
    env.insert_events("u", "user", 30).await;
    env.insert_events("o", "order", 20).await;
    let _relay = Handoff::run(&chain.relay_config("", ""));
    env.await_delivered(50).await;
    let (users, orders) = (chain.event_ids_in("user").await, chain.event_ids_in("order").await);
    assert!(users.len() == 30 && users.iter().all(|id| id.starts_with("u-")), "{users:?}");
    assert!(orders.len() == 20 && orders.iter().all(|id| id.starts_with("o-")), "{orders:?}");
}

on_both_brokers!(rows_are_routed_per_row_by_the_stream_template);

async fn sigkill_between_append_and_settle_loses_nothing(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    env.insert_events("k", "user", 50).await;
    let mut first = Handoff::run_paused(&env.config(env.parking_loops()), "after_append");
    first.await_paused().await;
    // Appended but not settled: the process dies holding the claim. Each claim loop parks its own
    // batch, and the loops may have split the rows, so wait for all of them.
    eventually("every row appended and parked in flight", || async {
        (env.stream_event_ids(&env.stream("user")).await.len() == 50 && env.count("IN_FLIGHT").await == 50)
            .then_some(())
    })
    .await;
    first.kill();

    let _second = Handoff::run(&env.config(""));
    env.await_delivered(50).await;
    // Each row is settled with an entry that is in the stream and carries that row's event (the
    // first relay's appends are there too, so the stream alone would prove nothing).
    let entries: HashMap<String, String> = env
        .stream_entries(&env.stream("user"))
        .await
        .into_iter()
        .map(|(entry_id, fields)| (entry_id, fields["event_id"].clone()))
        .collect();
    for row in settled_rows(&env).await {
        let (event, entry) = (row[0].clone().unwrap(), row[1].clone().unwrap_or_default());
        assert_eq!(entries.get(&entry), Some(&event), "{event} settled with entry {entry:?}, which holds it");
    }
    // The takeover was counted against each row at claim time, not as an append failure.
    let counted = env.scalar("SELECT COUNT(*) FROM audit_outbox WHERE expired_claims = 1 AND attempts = 0").await;
    assert_eq!(counted, 50);
}

async fn an_expired_lease_under_a_stopped_relay_is_fenced(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    env.insert_events("f", "user", 20).await;
    // Renewal every lease/3 would keep the claim alive; SIGSTOP freezes renewal too.
    let slow = Handoff::run_paused(&env.config(env.parking_loops()), "after_append");
    slow.await_paused().await;
    slow.signal("STOP");
    eventually("the stopped relay's leases to expire", || async {
        let live =
            env.scalar(&format!("SELECT COUNT(*) FROM audit_outbox WHERE lease_expires_at > {}", env.now())).await;
        (live == 0).then_some(())
    })
    .await;

    let takeover = Handoff::run(&env.config(""));
    env.await_delivered(20).await;
    drop(takeover);
    let before = settled_rows(&env).await;

    slow.resume();
    slow.signal("CONT");
    // Each claim loop settles its own share of the 20 rows; every one of them is refused.
    eventually("every late settle refused by the fence", || async {
        let refused: u64 = slow
            .logs()
            .lines()
            .filter(|l| l.contains("settle refused by the fence"))
            .filter_map(|l| l.split("refused=").nth(1)?.split_whitespace().next()?.parse::<u64>().ok())
            .sum();
        (refused == 20).then_some(())
    })
    .await;
    let after = settled_rows(&env).await;
    assert_eq!(before, after, "the late settle changed nothing");
}

async fn settled_rows(env: &DbEnv) -> Vec<Vec<Option<String>>> {
    env.text_rows("SELECT event_id, stream_entry_id, claim_token FROM audit_outbox ORDER BY id").await
}

async fn two_replicas_on_one_table_deliver_each_row_once(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    // A lease long enough that a busy machine cannot let one lapse (which would allow a second
    // delivery): the test is about concurrent claims, not takeovers.
    let config = env.config("batch_size = 100\nconcurrency = 2\nlease = \"20s\"");
    let a = Handoff::run(&config);
    let b = Handoff::run(&config);
    a.await_log("relay started").await;
    b.await_log("relay started").await;
    for chunk in 0..4 {
        env.insert_events(&format!("r{chunk}"), "user", 1000).await;
    }
    env.await_delivered(4000).await;
    let ids = env.stream_event_ids(&env.stream("user")).await;
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(ids.len(), 4000, "no duplicates without a crash");
    assert_eq!(distinct.len(), 4000);
    let claimants = env
        .scalar(env.pick(
            "SELECT count(DISTINCT split_part(claimed_by, '#', 1)) FROM audit_outbox",
            "SELECT COUNT(DISTINCT SUBSTRING_INDEX(claimed_by, '#', 1)) FROM audit_outbox",
        ))
        .await;
    assert_eq!(claimants, 2, "both replicas took part");
}

crate::on_both_dialects!(
    delivers_every_row_with_its_fields_and_records_the_entry_id,
    sigkill_between_append_and_settle_loses_nothing,
    an_expired_lease_under_a_stopped_relay_is_fenced,
    two_replicas_on_one_table_deliver_each_row_once,
);

#[tokio::test]
async fn a_row_that_keeps_killing_its_claimant_turns_dead() {
    let env = TestEnv::new().await;
    env.insert_events("c", "user", 1).await;
    let config = env.config("max_expired_claims = 2");
    env.kill_claimants_until_dead(&config, 2).await;
}

#[tokio::test]
async fn appends_authenticate_and_go_to_the_database_the_url_names() {
    let redis = common::redis_server::RedisServer::start_with(&[
        "--requirepass",
        "not-the-default",
        "--user",
        "relay",
        "on",
        ">s3cret-pass",
        "~*",
        "+@all",
    ])
    .await;
    let url = format!("redis://relay:s3cret-pass@127.0.0.1:{}/3", redis.port);
    let env = TestEnv::with_redis(&url).await;
    env.insert_events("e", "user", 50).await;
    let relay = Handoff::run(&env.config(""));
    env.await_delivered(50).await;

    let stream = env.stream("user");
    let in_db = |db: &str| {
        let auth = ["--user", "relay", "--pass", "s3cret-pass", "--no-auth-warning", "-n", db, "xlen", &stream];
        common::redis_server::redis_cli(redis.port, &auth).trim().to_owned()
    };
    assert_eq!(in_db("3"), "50", "every entry is in database 3");
    assert_eq!(in_db("0"), "0", "none in the default database");
    assert!(!relay.logs().contains("s3cret-pass"), "the password is never logged");
}
