//! The bridge on Kafka, where it differs from Redis and NATS (the scenarios it shares with them
//! run from `bridge.rs` and `both_brokers.rs`): what SIGTERM leaves is seen in the group's
//! committed offsets; an entry that kills every bridge reading it is counted from its first
//! read after a restart and reaches the delivery limit; `handoff status` shows the group's lag;
//! a topic deleted and made again is read from its start; `poison retry` keeps a message's key.

use crate::common;

use common::brokers::Chain;
use common::eventually;
use common::kafka::{commit, committed, create_topic, delete_topic, produce_keyed, read_all};
use common::process::{Handoff, run_to_end};

/// Whatever a bridge read is taken over and committed before SIGTERM lets it leave: the
/// group's committed offsets are exactly past what the inbox holds, and a restart takes the rest
/// in, each event once.
#[tokio::test]
async fn sigterm_commits_every_entry_already_read_before_exiting() {
    let chain = Chain::kafka().await;
    chain.publish("t", 3000, &[]).await;
    let config = chain.bridge_config("b1", "batch_size = 50", "");
    let mut bridge = Handoff::run(&config);
    eventually("the bridge under way", || async { (chain.taken_in().await >= 100).then_some(()) }).await;
    bridge.signal("TERM");
    let exit = bridge.await_exit().await;
    assert!(exit.success(), "{exit:?}: {}", bridge.logs());
    let taken = chain.taken_in().await;
    assert!(taken < 3000, "stopped before the end ({taken})");
    assert_eq!(chain.kafka_lag().await, Some(3000 - taken as u64), "committed exactly what was taken in");
    let _restarted = Handoff::run(&config);
    chain.await_acknowledged().await;
    chain.assert_taken_in_once(3000).await;
}

/// `handoff status` reads a Kafka bridge's lag from its group's committed offsets.
#[tokio::test]
async fn status_shows_a_kafka_groups_lag_from_its_committed_offsets() {
    let chain = Chain::kafka().await;
    chain.publish("s", 12, &[]).await;
    let config = chain.bridge_config("b1", "", "");
    let (ok, out) = run_to_end(&config, &["status"]);
    assert!(ok, "{out}");
    let line = out.lines().find(|l| l.contains(&format!("bridge bridge {}", chain.user_stream()))).unwrap_or_default();
    assert!(line.contains("12"), "nothing committed yet: all 12 behind: {out}");
    let bridge = Handoff::run(&config);
    chain.await_acknowledged().await;
    drop(bridge);
    let (ok, out) = run_to_end(&config, &["status", "--json"]);
    assert!(ok, "{out}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    let lines = status.as_array().or_else(|| status["components"].as_array()).cloned().unwrap_or_default();
    let bridge = lines.iter().find(|l| l.to_string().contains(&chain.user_stream())).unwrap_or_else(|| panic!("{out}"));
    assert_eq!(bridge["lag"], 0, "{bridge}");
}

/// `bridge rewind --to 1h` on Kafka moves the group's committed offsets back to the first
/// message of that time on every partition: each entry is read again and recognised by the inbox
/// (effects once). Kafka takes the offsets only from a group without members: refused while the
/// bridge runs, and an entry id (one partition's offset) is not a position on Kafka.
#[tokio::test]
async fn rewind_moves_the_groups_offsets_back_to_a_time_once_the_bridge_is_stopped() {
    let chain = Chain::kafka().await.applying();
    chain.publish("r", 20, &[]).await;
    let config = chain.bridge_config("b1", "", "");
    let rewind = |to: &str| run_to_end(&config, &["bridge", "rewind", "--bridge", "bridge", "--to", to, "--json"]);
    let mut bridge = Handoff::run(&config);
    chain.await_acknowledged().await;
    chain.assert_taken_in_once(20).await;
    let (ok, out) = rewind("1h");
    assert!(!ok && out.contains("stop the bridge's processes"), "a group with a member: {out}");
    let (ok, out) = rewind("1700000000000-0");
    assert!(!ok && out.contains("on Kafka, rewind to a time"), "{out}");
    bridge.signal("TERM");
    assert!(bridge.await_exit().await.success());

    let (ok, out) = rewind("1h");
    assert!(ok, "{out}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}"));
    let moved = &doc["streams"][0];
    assert_eq!(moved["stream"], chain.user_stream().as_str());
    assert!(moved["to"].as_str().unwrap().split(',').all(|p| p.ends_with(":0")), "to each partition's start: {out}");
    assert_eq!(chain.kafka_lag().await, Some(20), "every entry to be read again");
    let _bridge = Handoff::run(&config);
    chain.await_acknowledged().await;
    chain.assert_taken_in_once(20).await;
}

/// A topic deleted and made again under a running bridge (an operator's mistake, a cluster
/// rebuilt) starts again at offset 0, and the relay fills it again. The bridge reads it from its
/// start, though its position on the old topic lies inside the new one by then: librdkafka keeps
/// the old position, and reading on from it would skip everything below.
#[tokio::test]
async fn a_topic_made_again_under_a_running_bridge_is_read_from_its_start() {
    let chain = Chain::kafka().await;
    chain.publish("a", 30, &[]).await;
    let _bridge = Handoff::run(&chain.bridge_config("b1", "", ""));
    chain.await_acknowledged().await;
    delete_topic(&chain.user_stream()).await;
    create_topic(&chain.user_stream(), 3, &[]).await;
    chain.publish("b", 90, &[]).await;
    eventually("all 120 events taken in", || async { (chain.taken_in().await == 120).then_some(()) }).await;
    chain.await_acknowledged().await;
    chain.assert_taken_in_once(120).await;
}

/// Offsets committed on a topic since deleted and made again (a member's last commit, late,
/// or a group left while the topic was rebuilt) carry the old topic's id: a bridge that joins
/// reads those partitions from the new topic's start rather than from the old offsets.
#[tokio::test]
async fn offsets_committed_on_a_deleted_topic_are_not_taken_for_the_new_ones() {
    let chain = Chain::kafka().await;
    let (group, topic) = (chain.group(), chain.user_stream());
    chain.publish("a", 30, &[]).await;
    let config = chain.bridge_config("b1", "", "");
    let mut bridge = Handoff::run(&config);
    chain.await_acknowledged().await;
    bridge.signal("TERM");
    assert!(bridge.await_exit().await.success(), "{}", bridge.logs());
    let old = committed(&group, &topic, 3).await;
    assert!(old.iter().any(|(_, offset, _)| *offset == 30), "{old:?}");
    assert!(old.iter().all(|(_, _, id)| !id.is_empty()), "committed with the topic's id: {old:?}");

    delete_topic(&topic).await;
    create_topic(&topic, 3, &[]).await;
    chain.publish("b", 90, &[]).await;
    commit(&group, &topic, old).await;
    let _bridge = Handoff::run(&config);
    chain.await_acknowledged().await;
    chain.assert_taken_in_once(120).await;
}

/// `poison retry` on Kafka produces the entry again with the key its message had, though no
/// field holds it (a CloudEvents or Debezium layout keys by a field that is no header): the event
/// goes back to its aggregate's partition.
#[tokio::test]
async fn poison_retry_produces_the_entry_again_with_its_messages_own_key() {
    let chain = Chain::kafka().await;
    let topic = chain.user_stream();
    // No event id: poisoned. Keyed `order-7`, while its `aggregate_id` header says `agg`.
    let fields = [("event_type", "user.changed"), ("aggregate_type", "user"), ("aggregate_id", "agg")]
        .into_iter()
        .chain([("payload", r#"{"auditId":"k-1"}"#), ("owner", "relay")])
        .map(|(name, value)| (bytes::Bytes::from(name), bytes::Bytes::from(value)))
        .collect();
    produce_keyed(&topic, vec![(Some("order-7"), fields)]).await;
    let bridge = Handoff::run(&chain.bridge_config("b1", "", ""));
    eventually("the entry poisoned", || async { (!chain.env.poison().await.is_empty()).then_some(()) }).await;
    chain.await_acknowledged().await;

    let (ok, out) = common::process::run_with_path(&bridge.config_path(), &["poison", "retry", "--bridge", "bridge"]);
    assert!(ok && out.contains("re-appended: 1 record(s)"), "{out}");
    let messages = read_all(&topic).await;
    let keys: Vec<Option<&str>> = messages.iter().map(|m| m.key.as_deref()).collect();
    assert_eq!(keys, [Some("order-7"), Some("order-7")], "{messages:?}");
    assert!(messages.iter().all(|m| !m.headers.keys().any(|name| name.contains('\0'))), "{messages:?}");
}
