//! The relay on Apache Kafka (`broker = "kafka"`), on the KRaft broker `scripts/services` starts,
//! each test on topics of its own: each row one message (value the payload, key the aggregate
//! id, fields as headers, the event id in its header) whose `partition:offset` the row stores;
//! a row over the topic's `max.message.bytes` turns DEAD alone; a cluster that does not answer
//! burns no attempt; a relay killed between the produce and the settle produces again (Kafka
//! keeps no dedupe window: the duplicates carry the same event id for the inbox to collapse);
//! `handoff verify` finds a lost topic's messages missing and `--repair` re-drives them.

use crate::common;

use std::collections::{HashMap, HashSet};

use common::kafka::{self, Read};
use common::process::{Handoff, run_to_end};

/// One relay on the reference outbox producing to `<id>.audit.<type>` on the test broker.
fn kafka_relay_config(env: &common::TestEnv, extra: &str, bootstrap: &str) -> String {
    // The default look-back: a topic made again lost what it held, however long ago it was
    // delivered, and the relay looks back as far as max_window for it.
    let relay = env.config(&format!(
        "broker = \"kafka\"\nstream = \"{}.audit.{{aggregate_type}}\"\nbatch_size = 25\n{extra}\n[relay.broker_loss]\ncheck_interval = \"200ms\"",
        env.id
    ));
    format!("{relay}\n[kafka]\nbootstrap_servers = \"{bootstrap}\"\ntimeout = \"5s\"\ndelivery_timeout = \"5s\"\n")
}

fn topic(env: &common::TestEnv) -> String {
    format!("{}.audit.user", env.id)
}

async fn stored_entry_ids(env: &common::TestEnv) -> HashMap<String, String> {
    let rows = env.db.query("SELECT event_id, stream_entry_id FROM audit_outbox WHERE status = 'DELIVERED'", &[]);
    rows.await.unwrap().iter().map(|r| (r.get(0), r.get(1))).collect()
}

#[tokio::test]
async fn each_row_is_one_message_keyed_by_its_aggregate_whose_partition_and_offset_the_row_stores() {
    let env = common::TestEnv::new().await;
    kafka::create_topic(&topic(&env), 3, &[]).await;
    env.insert_events("k", "user", 60).await;
    let _relay = Handoff::run(&kafka_relay_config(&env, "", &kafka::bootstrap()));
    env.await_delivered(60).await;

    let messages = kafka::read_all(&topic(&env)).await;
    assert_eq!(messages.len(), 60);
    let stored = stored_entry_ids(&env).await;
    for Read { partition, offset, key, value, headers } in &messages {
        let event_id = &headers["event_id"];
        assert_eq!(stored[event_id], format!("{partition}:{offset}"), "the row stores its message's place");
        let n = event_id.strip_prefix("k-").unwrap();
        assert_eq!(key.as_deref(), Some(format!("agg-{n}").as_str()), "keyed by aggregate_id");
        assert_eq!(headers["aggregate_id"], format!("agg-{n}"));
        assert_eq!(headers["event_type"], "user.changed");
        let body: serde_json::Value = serde_json::from_str(value).unwrap();
        assert_eq!(body["auditId"], *event_id, "the payload is the value");
        assert!(!headers.contains_key("payload"));
    }
    let partitions: HashSet<i32> = messages.iter().map(|m| m.partition).collect();
    assert!(partitions.len() > 1, "60 keys spread over the topic's partitions: {partitions:?}");
}

#[tokio::test]
async fn a_row_over_the_topics_max_message_bytes_turns_dead_alone() {
    let env = common::TestEnv::new().await;
    kafka::create_topic(&topic(&env), 1, &[("max.message.bytes", "2048")]).await;
    let retry = "max_attempts = 2\nbackoff = { initial = \"50ms\", max = \"50ms\", multiplier = 1.0, jitter = 0.0 }";
    let config = kafka_relay_config(&env, retry, &kafka::bootstrap());
    env.insert_events("before", "user", 10).await;
    env.db
        .execute(
            "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers)
             VALUES ('big', 'user', 'u', 'user.changed', jsonb_build_object('blob', repeat('x', 5000)), '{}')",
            &[],
        )
        .await
        .unwrap();
    env.insert_events("after", "user", 10).await;
    let _relay = Handoff::run(&config);
    env.await_delivered(20).await;
    common::eventually("the large row DEAD", || async { (env.count("DEAD").await == 1).then_some(()) }).await;
    let error: String =
        env.db.query_one("SELECT last_error FROM audit_outbox WHERE event_id = 'big'", &[]).await.unwrap().get(0);
    assert!(error.contains("kafka") && error.to_lowercase().contains("too large"), "{error}");
    assert_eq!(kafka::read_all(&topic(&env)).await.len(), 20, "every other row was produced");
}

#[tokio::test]
async fn a_cluster_that_does_not_answer_burns_no_attempt_and_the_rows_go_once_it_does() {
    let env = common::TestEnv::new().await;
    kafka::create_topic(&topic(&env), 1, &[]).await;
    env.insert_events("o", "user", 10).await;
    // Nothing listens on this port: every produce times out (delivery_timeout 5s).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = closed.local_addr().unwrap().to_string();
    drop(closed);
    let down = Handoff::run(&kafka_relay_config(&env, "max_attempts = 1", &nowhere));
    // The batch's produces time out, and the relay hands the rows back.
    down.await_log("stream unavailable; releasing rows without counting an attempt").await;
    assert_eq!(env.count("DEAD").await, 0, "max_attempts = 1, yet an outage burns none");
    assert_eq!(env.scalar_i64("SELECT coalesce(max(attempts), 0)::bigint FROM audit_outbox").await, 0);
    drop(down);

    let _up = Handoff::run(&kafka_relay_config(&env, "max_attempts = 1", &kafka::bootstrap()));
    env.await_delivered(10).await;
    assert_eq!(kafka::read_all(&topic(&env)).await.len(), 10);
}

#[tokio::test]
async fn a_relay_killed_between_produce_and_settle_produces_again_with_the_same_event_ids() {
    let env = common::TestEnv::new().await;
    kafka::create_topic(&topic(&env), 2, &[]).await;
    env.insert_events("c", "user", 50).await;
    let config = kafka_relay_config(&env, "", &kafka::bootstrap());
    let mut crashed = Handoff::run_paused(&config, "after_append");
    crashed.await_paused().await;
    crashed.kill();
    let produced = kafka::read_all(&topic(&env)).await.len();
    assert!(produced >= 1, "a batch was produced");
    assert_eq!(env.count("DELIVERED").await, 0, "and not settled");

    let _restarted = Handoff::run(&config);
    env.await_delivered(50).await;
    let messages = kafka::read_all(&topic(&env)).await;
    assert_eq!(messages.len(), 50 + produced, "the unsettled batch went twice: Kafka keeps no dedupe window");
    let ids: HashSet<&str> = messages.iter().map(|m| m.headers["event_id"].as_str()).collect();
    assert_eq!(ids.len(), 50, "every event, each repeat under its own event id for the inbox to collapse");
    let stored = stored_entry_ids(&env).await;
    assert_eq!(stored.values().collect::<HashSet<_>>().len(), 50, "each row stores the message that settled it");
}

#[tokio::test]
async fn verify_reports_a_lost_topics_messages_missing_and_repair_produces_them_again() {
    let env = common::TestEnv::new().await;
    kafka::create_topic(&topic(&env), 2, &[]).await;
    env.insert_events("v", "user", 20).await;
    let config = kafka_relay_config(&env, "", &kafka::bootstrap());
    let relay = Handoff::run(&config);
    env.await_delivered(20).await;
    drop(relay);
    let (ok, out) = run_to_end(&config, &["verify", "--since", "10m"]);
    assert!(ok && out.contains(&format!("stream {}: 20 checked, 0 trimmed, 0 missing", topic(&env))), "{out}");

    // The topic is lost (deleted and made again empty): its offsets start over, and those the
    // rows stored either lie past the new end or hold other events.
    kafka::delete_topic(&topic(&env)).await;
    kafka::create_topic(&topic(&env), 2, &[]).await;
    let (ok, out) = run_to_end(&config, &["verify", "--since", "10m"]);
    assert!(!ok && out.contains("20 missing"), "{out}");
    let (ok, out) = run_to_end(&config, &["verify", "--since", "10m", "--repair"]);
    assert!(ok && out.contains("20 re-driven"), "{out}");
    assert_eq!(env.count("PENDING").await, 20, "the lost rows are due again");
    let _relay = Handoff::run(&config);
    env.await_delivered(20).await;
    assert_eq!(kafka::read_all(&topic(&env)).await.len(), 20);
}

/// A relay left running whose topic is deleted and made again empty after it delivered: its
/// broker-loss watch sees the topic's new id (or its partitions ending before the offsets it
/// appended) and produces the lost rows again, with nothing else happening: no produce fails,
/// no node changes. The checks run every 5 s here, so the topic is lost before the watch's
/// first regular look: it looks at a stream when first appended to, and a first look compares
/// each partition's end with what the relay appended to it (before, it had nothing to compare
/// a first look with, and missed such a loss for good).
#[tokio::test]
async fn a_running_relay_whose_topic_is_made_again_empty_produces_its_rows_again() {
    let env = common::TestEnv::new().await;
    let (bootstrap, topic) = (kafka::bootstrap(), topic(&env));
    kafka::create_topic_led_by(&bootstrap, &topic, &[1], &[]).await;
    env.insert_events("v", "user", 20).await;
    let config =
        kafka_relay_config(&env, "", &bootstrap).replace("check_interval = \"200ms\"", "check_interval = \"5s\"");
    let _relay = Handoff::run(&config);
    env.await_delivered(20).await;
    // Deleted and made again until it stays made: the relay's next produce may have the broker
    // auto-create it meanwhile.
    kafka::remake_topic_led_by(&bootstrap, &topic, &[1], &[]).await;
    common::eventually("the lost rows produced again", || async {
        let messages = kafka::read_all(&topic).await;
        let ids: HashSet<&str> = messages.iter().map(|m| m.headers["event_id"].as_str()).collect();
        (ids.len() == 20).then_some(())
    })
    .await;
}

/// The partition leader of an R3 topic (`min.insync.replicas = 2`) killed mid-run on a cluster
/// of three: the relay waits out the election (no attempt burned) and every row is delivered,
/// each stored entry holding its own event (`handoff verify` finds none missing).
#[tokio::test]
async fn the_partition_leader_killed_mid_run_loses_nothing() {
    let env = common::TestEnv::new().await;
    let cluster = kafka::KafkaCluster::start().await;
    kafka::create_topic_on(&cluster.bootstrap, &topic(&env), (1, 3), &[("min.insync.replicas", "2")]).await;
    env.insert_events("f", "user", 600).await;
    let config = kafka_relay_config(&env, "max_attempts = 1", &cluster.bootstrap)
        .replace("delivery_timeout = \"5s\"", "delivery_timeout = \"60s\"");
    let _relay = Handoff::run(&config);
    common::eventually("some rows delivered", || async { (env.count("DELIVERED").await >= 100).then_some(()) }).await;
    let leader = kafka::leader(&cluster.bootstrap, &topic(&env), 0).await;
    cluster.node(leader, "stop").await;
    env.await_delivered(600).await;
    assert_eq!(env.count("DEAD").await, 0);

    let messages = kafka::read_all_on(&cluster.bootstrap, &topic(&env)).await;
    let ids: HashSet<&str> = messages.iter().map(|m| m.headers["event_id"].as_str()).collect();
    assert_eq!(ids.len(), 600, "every event in the topic ({} messages)", messages.len());
    // A verify that could not read the cluster yet (the killed node was just listed) says so
    // and claims nothing: asked again.
    let out = common::eventually("verify reads the cluster", || async {
        let (ok, out) = run_to_end(&config, &["verify", "--since", "10m"]);
        (ok || out.contains(" checked, ")).then_some(out)
    })
    .await;
    assert!(out.contains("600 checked, 0 trimmed, 0 missing"), "{out}");
}

/// A topic deleted and made again after its partition's leader moved: the new topic's leader
/// epochs start again at 0, which librdkafka takes for stale metadata, so a producer that knew
/// the old topic goes on sending to the old topic's leader. The relay replaces a producer whose
/// message timed out: the rows it had delivered to the old topic (found lost by its broker-loss
/// watch, whose client also knew the old topic) and the rows inserted after the topic came back
/// are all in the new topic, however long ago the first were delivered. (The loss after a node
/// crash is what a chaos run did.)
#[tokio::test]
async fn a_topic_made_again_after_its_leader_moved_is_produced_to() {
    let env = common::TestEnv::new().await;
    let cluster = kafka::KafkaCluster::start().await;
    let (bootstrap, topic) = (cluster.bootstrap.clone(), topic(&env));
    kafka::create_topic_led_by(&bootstrap, &topic, &[1, 2, 3], &[("min.insync.replicas", "2")]).await;
    env.insert_events("a", "user", 30).await;
    // A one-second look-back: the rows delivered first are found lost only because a topic made
    // again is looked back on as far as max_window.
    let config = kafka_relay_config(&env, "", &bootstrap)
        .replace("check_interval = \"200ms\"", "check_interval = \"200ms\"\nlookback = \"1s\"");
    let _relay = Handoff::run(&config);
    env.await_delivered(30).await;
    cluster.node(1, "stop").await;
    common::eventually("the leader moved", || async { (kafka::leader(&bootstrap, &topic, 0).await > 1).then_some(()) })
        .await;
    env.insert_events("b", "user", 30).await;
    env.await_delivered(60).await;
    cluster.node(1, "start").await;
    common::eventually("node 1 back in sync", || async {
        kafka::in_sync(&bootstrap, &topic, 0).await.contains(&1).then_some(())
    })
    .await;

    kafka::remake_topic_led_by(&bootstrap, &topic, &[1, 2, 3], &[("min.insync.replicas", "2")]).await;
    env.insert_events("c", "user", 30).await;
    common::eventually("the lost rows and those inserted after the topic came back are in it", || async {
        let messages = kafka::read_all_on(&bootstrap, &topic).await;
        let ids: HashSet<&str> = messages.iter().map(|m| m.headers["event_id"].as_str()).collect();
        let every = ["a", "b", "c"].iter().all(|p| (1..=30).all(|i| ids.contains(format!("{p}-{i}").as_str())));
        every.then_some(())
    })
    .await;
}

/// `handoff check` on Kafka: a topic the configuration names must exist (handoff creates none);
/// one replica warns; a relay's `entry_max_bytes` over the topic's `max.message.bytes` fails.
#[tokio::test]
async fn check_names_a_missing_topic_a_single_replica_and_a_message_limit_below_entry_max_bytes() {
    let env = common::TestEnv::new().await;
    let fixed = format!("{}.audit.fixed", env.id);
    let relay = env.config(&format!("broker = \"kafka\"\nstream = \"{fixed}\"\n"));
    let config = format!("{relay}\n[kafka]\nbootstrap_servers = \"{}\"\ntimeout = \"5s\"\n", kafka::bootstrap());
    let (ok, out) = run_to_end(&config, &["check"]);
    assert!(!ok && out.contains(&format!("relay `relay`: topic {fixed} does not exist on the cluster")), "{out}");

    kafka::create_topic(&fixed, 2, &[("max.message.bytes", "2048")]).await;
    let (ok, out) = run_to_end(&config, &["check"]);
    assert!(
        !ok && out.contains(&format!(
            "relay `relay`.entry_max_bytes: 1048576 is over topic {fixed}'s max.message.bytes 2048"
        )),
        "{out}"
    );
    let relay = env.config(&format!(
        "broker = \"kafka\"\nstream = \"{fixed}\"\npayload_max_bytes = 1000\nentry_max_bytes = 1500\n"
    ));
    let config = format!("{relay}\n[kafka]\nbootstrap_servers = \"{}\"\ntimeout = \"5s\"\n", kafka::bootstrap());
    let (ok, out) = run_to_end(&config, &["check"]);
    assert!(ok && out.contains("kafka: reachable at"), "below the topic's limit now: {out}");
    assert!(out.contains(&format!("warn: relay `relay`: topic {fixed}: 2 partitions, 1 replicas")), "{out}");
}

/// `layout = "debezium"`: what Debezium's outbox event router writes by default, so a consumer
/// written for it reads handoff's messages unchanged: topic `outbox.event.<aggregate type>`, key
/// the aggregate id, value the payload as it is, and one header, `id`, the event id.
#[tokio::test]
async fn a_consumer_written_for_debeziums_outbox_event_router_reads_the_debezium_layout() {
    let env = common::TestEnv::new().await;
    let aggregate_type = format!("{}_user", env.id);
    let topic = format!("outbox.event.{aggregate_type}");
    kafka::create_topic(&topic, 2, &[]).await;
    env.insert_events("z", &aggregate_type, 12).await;
    let relay = env.config("broker = \"kafka\"\nstream = \"outbox.event.{aggregate_type}\"\n");
    let config = format!("{relay}\n[kafka]\nbootstrap_servers = \"{}\"\nlayout = \"debezium\"\n", kafka::bootstrap());
    let _relay = Handoff::run(&config);
    env.await_delivered(12).await;
    let messages = kafka::read_all(&topic).await;
    assert_eq!(messages.len(), 12);
    for Read { key, value, headers, .. } in &messages {
        let event_id = headers.get("id").unwrap_or_else(|| panic!("the router's `id` header: {headers:?}"));
        assert_eq!(headers.len(), 1, "no header but `id`: {headers:?}");
        let n = event_id.strip_prefix("z-").unwrap();
        assert_eq!(key.as_deref(), Some(format!("agg-{n}").as_str()), "keyed by the aggregate id");
        let payload: serde_json::Value = serde_json::from_str(value).unwrap();
        assert_eq!(payload["auditId"], *event_id, "the payload, as the row holds it");
    }
}
