//! The inbox bridge: takeover before acknowledgement, the poison path, crashes and recovery.
//! The scenarios that hold on either broker run on both, in both of the bridge's modes
//! (`taken_in::redis::…`, `applied::nats::…`: rows left for a worker, or the handler applied at
//! take-over; with the chain's own in `both_brokers.rs`); the full validation corpus (raw bytes that NATS headers
//! cannot carry), a replay with other content (JetStream drops a repeated message id within its
//! duplicate window) and Redis's consumer-group mechanics (a restarted instance's own pending
//! entries read first, deliveries counted by XCLAIM, idle consumers) run on Redis.

use crate::common;

use common::brokers::{Chain, TRACEPARENT, in_both_modes_on_both_brokers, in_both_modes_on_kafka};
use common::http::{get, sample};
use common::process::Handoff;
use common::{TestEnv, eventually};
use fred::prelude::*;

// On Kafka (kafka_bridge.rs has its own forms of the rest): not the group deleted at runtime
// (a group with members cannot be) nor SIGTERM's (only committed offsets show from outside a
// member).
in_both_modes_on_kafka!(
    valid_entries_are_taken_over_then_acknowledged,
    a_crash_before_the_insert_commits_redelivers_and_takes_over_once,
    an_entry_that_kills_the_bridge_every_time_goes_to_poison_at_the_limit,
);

in_both_modes_on_both_brokers!(
    valid_entries_are_taken_over_then_acknowledged,
    a_crash_before_the_insert_commits_redelivers_and_takes_over_once,
    a_group_deleted_at_runtime_is_recreated,
    an_entry_that_kills_the_bridge_every_time_goes_to_poison_at_the_limit,
    sigterm_takes_over_every_entry_already_read_before_exiting,
    a_broken_inbox_schema_poisons_nothing_and_a_refused_entry_comes_back_with_poison_retry,
);

/// Raw entry fields, as `xadd_raw` takes them.
type Fields = Vec<(&'static str, Vec<u8>)>;

fn payload(id: &str) -> String {
    format!(r#"{{"auditId":"{id}","actor":"admin"}}"#)
}

async fn add_events(env: &TestEnv, stream: &str, prefix: &str, n: usize) {
    for i in 1..=n {
        let id = format!("{prefix}-{i}");
        env.xadd_event(stream, &id, &payload(&id)).await;
    }
}

async fn await_inbox(env: &TestEnv, n: i64) {
    eventually(&format!("{n} inbox rows"), || async { (env.inbox_count("PENDING").await == n).then_some(()) }).await;
}

/// `n` events taken in (one inbox row each, whatever its state).
async fn await_taken_in(chain: &Chain, n: i64) {
    eventually(&format!("{n} inbox rows"), || async { (chain.taken_in().await == n).then_some(()) }).await;
}

async fn await_acknowledged(env: &TestEnv, stream: &str) {
    eventually("every entry acknowledged", || async { env.group_caught_up(stream).await.then_some(()) }).await;
}

async fn valid_entries_are_taken_over_then_acknowledged(chain: Chain) {
    let env = &chain.env;
    chain.publish("v", 20, &[]).await;
    let _bridge = Handoff::run(&chain.bridge_config("b1", "", ""));
    await_taken_in(&chain, 20).await;
    chain.await_acknowledged().await;
    chain.assert_taken_in_once(20).await;
    let row = env
        .db
        .query_one("SELECT event_type, owner, payload->>'auditId', headers->>'traceparent', stream FROM consumer_inbox WHERE event_id = 'v-1'", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "user.changed");
    assert_eq!(row.get::<_, String>(1), "relay");
    assert_eq!(row.get::<_, String>(2), "v-1");
    assert_eq!(row.get::<_, String>(3), TRACEPARENT);
    assert_eq!(row.get::<_, String>(4), chain.user_stream());
}

async fn a_crash_before_the_insert_commits_redelivers_and_takes_over_once(chain: Chain) {
    chain.publish("c", 30, &[]).await;
    let config = chain.bridge_config("b1", "", "");
    let mut crashed = Handoff::run_paused(&config, "bridge_before_commit");
    crashed.await_paused().await;
    crashed.kill();
    assert_eq!(chain.taken_in().await, 0, "nothing committed");
    // A bridge reads a few entries at first (one, then two, …): what it read is pending.
    assert!(chain.unacknowledged().await.is_some_and(|n| n >= 1), "nothing acknowledged");

    // The same instance restarts (a pod keeps its name) and reads its own pending entries.
    let _restarted = Handoff::run(&config);
    await_taken_in(&chain, 30).await;
    chain.assert_taken_in_once(30).await;
    chain.await_acknowledged().await;
}

#[tokio::test]
async fn malformed_entries_land_in_poison_with_their_reason_and_valid_neighbours_go_on() {
    let env = TestEnv::new().await;
    let schema_dir = tempfile::tempdir().unwrap();
    let schema = schema_dir.path().join("strict.json");
    std::fs::write(&schema, r#"{"type":"object","required":["actor"],"properties":{"actor":{"type":"string"}}}"#)
        .unwrap();
    let ok = |id: &str| {
        vec![
            ("event_id", id.as_bytes().to_vec()),
            ("event_type", b"user.changed".to_vec()),
            ("payload", payload(id).into_bytes()),
            ("owner", b"relay".to_vec()),
        ]
    };
    let with = |id: &str, name: &'static str, value: &[u8]| {
        let mut fields: Vec<(&str, Vec<u8>)> = ok(id).into_iter().filter(|(k, _)| *k != name).collect();
        fields.push((name, value.to_vec()));
        fields
    };
    let without = |id: &str, name: &str| ok(id).into_iter().filter(|(k, _)| *k != name).collect::<Vec<_>>();
    let huge = format!(r#"{{"auditId":"big","actor":"a","blob":"{}"}}"#, "x".repeat(5000));
    let corpus: Vec<(&str, Fields)> = vec![
        ("missing_field", without("m1", "event_id")),
        ("ok", ok("good-1")),
        ("invalid_event_id", with("x", "event_id", b"")),
        ("invalid_event_id", with("x", "event_id", "y".repeat(300).as_bytes())),
        ("invalid_event_id", with("x", "event_id", b"has spaces/and;semicolons")),
        ("missing_field", without("m2", "payload")),
        ("invalid_payload", with("np", "payload", b"{not json")),
        ("invalid_payload", with("arr", "payload", b"[1,2,3]")),
        ("ok", ok("good-2")),
        ("payload_too_large", with("big", "payload", huge.as_bytes())),
        ("owner_mismatch", with("own", "owner", b"mallory")),
        ("id_mismatch", with("idm", "payload", br#"{"auditId":"someone-else","actor":"a"}"#)),
        ("not_utf8", with("bin", "payload", &[0xff, 0xfe, 0xfd, 0x00, 0x80])),
        ("nul_byte", with("nul", "event_type", b"user\0changed")),
        ("unknown_event_type", with("typ", "event_type", b"billing.charged")),
        ("invalid_headers", with("hdr", "headers", b"[]")),
        ("schema_violation", with("sch", "payload", br#"{"auditId":"sch","actor":42}"#)),
        ("ok", ok("good-3")),
    ];
    for (_, fields) in &corpus {
        env.xadd_raw("user", fields.clone()).await;
    }
    let extra = format!(
        "[bridge.validate]\nevent_types = [\"user.*\"]\npayload_max_bytes = 4096\npayload_id_field = \"auditId\"\nschemas = {{ \"user.changed\" = \"{}\" }}",
        schema.display()
    );
    let bridge = Handoff::run(&env.bridge_config("b1", &["user"], &extra));
    await_acknowledged(&env, "user").await;
    await_inbox(&env, 3).await;
    let expected: Vec<&str> = corpus.iter().map(|(r, _)| *r).filter(|r| *r != "ok").collect();
    let reasons: Vec<String> = env.poison().await.into_iter().map(|(r, _)| r).collect();
    assert_eq!(reasons, expected);
    let address = bridge.telemetry_address().await;
    assert_eq!(get(&address, "/healthz").0, 200, "the bridge is alive and well");
    let stored: serde_json::Value = env
        .db
        .query_one("SELECT fields FROM consumer_inbox_poison WHERE reason = 'not_utf8'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored["payload"]["base64"], "//79AIA=", "the original bytes are kept");
}

/// `unknown_types = "ignore"`: an event of a type the bridge does not list is kept as IGNORED
/// (never handled) and counted in `handoff_bridge_ignored_total`, besides the inserted ones.
#[tokio::test]
async fn events_of_unlisted_types_are_kept_as_ignored_and_counted() {
    let env = TestEnv::new().await;
    let validate = "[bridge.validate]\nevent_types = [\"user.*\"]\nunknown_types = \"ignore\"\n";
    let bridge = Handoff::run(&env.bridge_config("b1", &["user"], validate));
    add_events(&env, "user", "u", 3).await;
    for i in 1..=2 {
        let id = format!("x-{i}");
        let fields: Fields = vec![
            ("event_id", id.clone().into_bytes()),
            ("event_type", b"billing.charged".to_vec()),
            ("payload", payload(&id).into_bytes()),
            ("owner", b"relay".to_vec()),
        ];
        env.xadd_raw("user", fields).await;
    }
    await_acknowledged(&env, "user").await;
    assert_eq!((env.inbox_count("PENDING").await, env.inbox_count("IGNORED").await), (3, 2));
    let metrics = get(&bridge.telemetry_address().await, "/metrics").1;
    let series = |name: &str| format!(r#"{name}{{bridge="bridge",stream="{}:user"}}"#, env.id);
    assert_eq!(sample(&metrics, &series("handoff_bridge_ignored_total")), Some(2.0), "{metrics}");
    assert_eq!(sample(&metrics, &series("handoff_bridge_inserted_total")), Some(5.0), "{metrics}");
}

#[tokio::test]
async fn a_replay_with_other_content_is_recorded_as_a_conflict() {
    let env = TestEnv::new().await;
    env.xadd_event("user", "same", &payload("same")).await;
    env.xadd_event("user", "same", r#"{"auditId":"same","actor":"someone else"}"#).await;
    let _bridge = Handoff::run(&env.bridge_config("b1", &["user"], ""));
    await_acknowledged(&env, "user").await;
    await_inbox(&env, 1).await;
    assert_eq!(env.poison().await, vec![("payload_conflict".to_owned(), Some("same".to_owned()))]);
    // A later replay (another batch) is compared against the stored row.
    env.xadd_event("user", "same", r#"{"auditId":"same","actor":"third"}"#).await;
    env.xadd_event("user", "same", &payload("same")).await;
    eventually("the second conflict", || async { (env.poison().await.len() == 2).then_some(()) }).await;
    await_acknowledged(&env, "user").await;
    assert_eq!(env.inbox_count("PENDING").await, 1);
}

async fn a_group_deleted_at_runtime_is_recreated(chain: Chain) {
    chain.publish("g", 10, &[]).await;
    let _bridge = Handoff::run(&chain.bridge_config("b1", "", ""));
    await_taken_in(&chain, 10).await;
    chain.delete_group().await;
    chain.publish("h", 10, &[]).await;
    await_taken_in(&chain, 20).await;
    chain.await_acknowledged().await;
    chain.assert_taken_in_once(20).await;
}

/// An entry the bridge dies on every time it handles it: each redelivery that reaches the inbox
/// is counted in the inbox database, and at `max_deliveries` the entry goes to poison instead of
/// killing the bridge again. (Which entries come back with it, and in what order, is the
/// broker's: on Redis a restarted instance reads its own pending entries first, below.)
async fn an_entry_that_kills_the_bridge_every_time_goes_to_poison_at_the_limit(chain: Chain) {
    let env = &chain.env;
    chain.publish("killer", 1, &[]).await;
    let config = chain.bridge_config("b1", "max_deliveries = 3", "");
    let counts = || env.scalar_i64("SELECT coalesce(sum(deliveries), 0) FROM consumer_inbox_deliveries");
    // The first delivery is never counted; each one after it is, before it is handled. Kafka
    // cannot tell a first delivery from a second: a partition's first read after it is assigned
    // (where a member that died left off) is counted, so the limit comes one death sooner.
    let counted: &[i64] = if chain.is_kafka() { &[1, 2] } else { &[0, 1, 2] };
    for &counted in counted {
        let mut victim = Handoff::run_paused(&config, "bridge_before_commit");
        victim.await_paused().await;
        victim.kill();
        assert_eq!(counts().await, counted);
    }
    let _bridge = Handoff::run(&config);
    eventually("the entry to be poisoned", || async { (!env.poison().await.is_empty()).then_some(()) }).await;
    assert_eq!(env.poison().await, vec![("delivery_limit".to_owned(), Some("killer-1".to_owned()))]);
    chain.await_acknowledged().await;
    assert_eq!(chain.taken_in().await, 0);
    assert_eq!(counts().await, 0, "counts of entries with a verdict are forgotten");
}

/// On Redis, step by step: a restarted instance reads its own pending entries first, one at a
/// time after a death, so the entry it died on is isolated from the neighbours read with it.
#[tokio::test]
async fn the_entry_a_bridge_keeps_dying_on_goes_to_poison_and_its_batch_neighbours_do_not() {
    let env = TestEnv::new().await;
    add_events(&env, "user", "n", 4).await;
    let config = env.bridge_config("b1", &["user"], "max_deliveries = 3");
    let counts = || env.scalar_i64("SELECT coalesce(sum(deliveries), 0) FROM consumer_inbox_deliveries");
    // 1: the bridge dies with its first read in hand; a first delivery is never counted.
    let mut victim = Handoff::run_paused(&config, "bridge_before_commit");
    victim.await_paused().await;
    victim.kill();
    assert_eq!(counts().await, 0);
    // 2: the batch comes back from the pending list, read one entry first (a bridge killed by
    // what it read must not die on all of it again); that one is counted, then the bridge dies.
    let mut victim = Handoff::run_paused(&config, "bridge_before_commit");
    victim.await_paused().await;
    victim.kill();
    assert_eq!(counts().await, 1, "the delivery that reached the inbox is counted, the others were not read");
    // 3: the same entry comes first again; counted before, it is a suspect, counted again and
    // taken over alone; the bridge dies on it once more.
    let mut victim = Handoff::run_paused(&config, "bridge_before_commit");
    victim.await_paused().await;
    victim.kill();
    assert_eq!(counts().await, 2, "only the entry being handled was counted again");
    // Next: the entry it died on reaches the limit; the others go in.
    let _bridge = Handoff::run(&config);
    await_inbox(&env, 3).await;
    eventually("the entry to be poisoned", || async { (!env.poison().await.is_empty()).then_some(()) }).await;
    assert_eq!(env.poison().await, vec![("delivery_limit".to_owned(), Some("n-1".to_owned()))]);
    await_acknowledged(&env, "user").await;
    assert_eq!(counts().await, 0, "counts of entries with a verdict are forgotten");
}

#[tokio::test]
async fn an_entry_whose_counted_redeliveries_reach_the_limit_goes_to_poison() {
    let env = TestEnv::new().await;
    let id = env.xadd_event("user", "hot", &payload("hot")).await;
    let key = env.stream("user");
    let _: Value = env.redis.xgroup_create(&key, "admin", "0", true).await.unwrap();
    let _: Value = env.redis.xreadgroup("admin", "b1", None, None, false, &key, ">").await.unwrap();
    // Two earlier redeliveries of the entry reached the inbox and ended without a verdict.
    env.db
        .execute(
            "INSERT INTO consumer_inbox_deliveries (consumer, stream, stream_entry_id, deliveries) VALUES ('admin', $1, $2, 2)",
            &[&key, &id],
        )
        .await
        .unwrap();
    let _bridge = Handoff::run(&env.bridge_config("b1", &["user"], "max_deliveries = 3"));
    eventually("the hot entry to be poisoned", || async { (!env.poison().await.is_empty()).then_some(()) }).await;
    assert_eq!(env.poison().await, vec![("delivery_limit".to_owned(), Some("hot".to_owned()))]);
    await_acknowledged(&env, "user").await;
    assert_eq!(env.inbox_count("PENDING").await, 0);
}

#[tokio::test]
async fn deliveries_that_never_reached_the_inbox_do_not_count_towards_the_limit() {
    let env = TestEnv::new().await;
    let id = env.xadd_event("user", "cold", &payload("cold")).await;
    let key = env.stream("user");
    let _: Value = env.redis.xgroup_create(&key, "admin", "0", true).await.unwrap();
    // Six deliveries Redis counted (a read and five claims) by consumers that never got as far
    // as the inbox: what restarts during an inbox outage leave behind.
    let _: Value = env.redis.xreadgroup("admin", "ghost", None, None, false, &key, ">").await.unwrap();
    for _ in 0..5 {
        let _: Value = env.redis.xclaim(&key, "admin", "ghost", 0, &id, None, None, None, false, false).await.unwrap();
    }
    let _bridge = Handoff::run(&env.bridge_config("b1", &["user"], "max_deliveries = 3"));
    await_inbox(&env, 1).await;
    await_acknowledged(&env, "user").await;
    assert!(env.poison().await.is_empty(), "a valid entry, never looked at, is not poison");
}

#[tokio::test]
async fn idle_consumers_left_by_dead_instances_are_deleted() {
    let env = TestEnv::new().await;
    add_events(&env, "user", "i", 3).await;
    let key = env.stream("user");
    let _: Value = env.redis.xgroup_create(&key, "admin", "0", true).await.unwrap();
    let _: Value = env.redis.xgroup_createconsumer(&key, "admin", "ghost-pod").await.unwrap();
    let _bridge = Handoff::run(&env.bridge_config("b1", &["user"], "delete_idle_consumers_after = \"300ms\""));
    await_inbox(&env, 3).await;
    eventually("the idle consumer to be deleted", || async {
        let consumers: Value = env
            .redis
            .custom(
                fred::types::CustomCommand::new_static("XINFO", fred::types::ClusterHash::Offset(1), false),
                vec!["CONSUMERS".to_owned(), key.clone(), "admin".to_owned()],
            )
            .await
            .unwrap();
        let listed = format!("{consumers:?}");
        (!listed.contains("ghost-pod") && listed.contains("b1")).then_some(())
    })
    .await;
}

async fn sigterm_takes_over_every_entry_already_read_before_exiting(chain: Chain) {
    chain.publish("t", 3000, &[]).await;
    let config = chain.bridge_config("b1", "batch_size = 50", "");
    let mut bridge = Handoff::run(&config);
    eventually("the bridge under way", || async { (chain.taken_in().await >= 100).then_some(()) }).await;
    bridge.signal("TERM");
    assert!(bridge.await_exit().await.success());
    // The bridge reads the next batch while it takes one over; whatever it read is taken over
    // and acknowledged before it leaves, so nothing stays pending under its name.
    assert_eq!(chain.unacknowledged().await, Some(0), "entries left unacknowledged");
    let taken = chain.taken_in().await;
    assert!(taken < 3000, "stopped before the end ({taken})");
    let _restarted = Handoff::run(&config);
    await_taken_in(&chain, 3000).await;
    chain.assert_taken_in_once(3000).await;
}

/// A schema or permission problem on the inbox is an outage of the inbox, not the entries'
/// fault: they stay pending, unacknowledged and unpoisoned, until it is fixed. A refusal of an
/// entry's own data still poisons that entry alone, with every field, and `poison retry` brings
/// it back through the bridge once the cause is gone.
async fn a_broken_inbox_schema_poisons_nothing_and_a_refused_entry_comes_back_with_poison_retry(chain: Chain) {
    let env = &chain.env;
    let bridge = Handoff::run(&chain.bridge_config("b1", "", ""));
    let address = bridge.telemetry_address().await;
    chain.publish("before", 5, &[]).await;
    await_taken_in(&chain, 5).await;
    if chain.applying {
        // The worker checks its statements once, at its start (a schema broken then stops the
        // process): the schema breaks below after that, while everything runs.
        bridge.await_log("worker started").await;
    }

    env.db.batch_execute("ALTER TABLE consumer_inbox RENAME COLUMN headers TO headers_moved").await.unwrap();
    chain.publish("during", 10, &[]).await;
    let series = format!(
        r#"handoff_bridge_inbox_unavailable_total{{bridge="bridge",kind="schema",stream="{}"}}"#,
        chain.user_stream()
    );
    eventually("the inbox outage counted", || async {
        (sample(&get(&address, "/metrics").1, &series).unwrap_or(0.0) >= 1.0).then_some(())
    })
    .await;
    let (status, body) = get(&address, "/readyz");
    assert!(status == 503 && body.contains("database refuses the work"), "{status} {body}");
    let (read, pending) = chain.read_and_pending().await;
    assert!(
        pending >= 1 && read - pending == 5,
        "entries read meanwhile stay pending ({read} read, {pending} pending)"
    );
    assert!(env.poison().await.is_empty(), "nothing poisoned for a schema problem");
    assert_eq!(chain.taken_in().await, 5);

    env.db.batch_execute("ALTER TABLE consumer_inbox RENAME COLUMN headers_moved TO headers").await.unwrap();
    await_taken_in(&chain, 15).await;
    chain.await_acknowledged().await;
    assert!(env.poison().await.is_empty());

    // The inbox refuses one event's data (a rule of the consumer's): only that entry is poisoned.
    env.db
        .batch_execute("ALTER TABLE consumer_inbox ADD CONSTRAINT no_evil CHECK (aggregate_id <> 'evil')")
        .await
        .unwrap();
    chain
        .publish_fields(&[
            ("event_id", "evil-1"),
            ("event_type", "user.changed"),
            ("aggregate_type", "user"),
            ("aggregate_id", "evil"),
            ("payload", &payload("evil-1")),
            ("headers", "{}"),
            ("owner", "relay"),
            ("tenant", "acme"),
        ])
        .await;
    chain.publish("after", 2, &[]).await;
    await_taken_in(&chain, 17).await;
    chain.await_acknowledged().await;
    assert_eq!(env.poison().await, [("rejected_by_database".to_owned(), Some("evil-1".to_owned()))]);
    let fields: serde_json::Value =
        env.db.query_one("SELECT fields FROM consumer_inbox_poison", &[]).await.unwrap().get(0);
    for name in ["event_id", "event_type", "aggregate_type", "aggregate_id", "payload", "headers", "owner", "tenant"] {
        assert!(fields.get(name).is_some(), "the poison record keeps `{name}`: {fields}");
    }

    env.db.batch_execute("ALTER TABLE consumer_inbox DROP CONSTRAINT no_evil").await.unwrap();
    let (ok, out) = common::process::run_with_path(&bridge.config_path(), &["poison", "retry", "--bridge", "bridge"]);
    assert!(ok && out.contains("re-appended: 1 record(s)"), "{out}");
    await_taken_in(&chain, 18).await;
    chain.assert_taken_in_once(18).await;
    let redrives: i32 = env.db.query_one("SELECT redrives FROM consumer_inbox_poison", &[]).await.unwrap().get(0);
    assert_eq!(redrives, 1);
}
