//! NATS JetStream behind the broker seam, consumer side (`[[bridge]] broker = "nats"`), on a
//! nats-server of the test's own: the chain outbox → JetStream → inbox → handler applies each
//! event once; a bridge killed after its commit and before its acknowledgement gets the
//! messages again after `ack_wait` and recognises them; malformed messages go to poison and
//! their neighbours on; through an inbox outage and restarts nothing is acknowledged and no
//! delivery counts towards `max_deliveries`, however often JetStream delivered.

use crate::common;

use std::time::Duration;

use async_nats::jetstream::stream::Config;
use common::http::{get, sample};
use common::nats_cluster::NatsCluster;
use common::nats_server::NatsServer;
use common::process::Handoff;
use common::proxy::Proxy;
use common::{TestEnv, eventually};
use handoff::config::NatsConfig;
use handoff::stream::nats::NatsStream;
use handoff::stream::{AppendOptions, AppendOutcome, Entry, EventStream};

async fn create_stream(server: &NatsServer) {
    let client = async_nats::connect(server.url()).await.unwrap();
    async_nats::jetstream::new(client)
        .create_stream(Config {
            name: "AUDIT".into(),
            subjects: vec!["audit.>".into()],
            duplicate_window: Duration::from_secs(3600),
            ..Default::default()
        })
        .await
        .unwrap();
}

fn nats_section(server: &NatsServer) -> String {
    nats_section_for(&server.url())
}

fn nats_section_for(url: &str) -> String {
    format!("\n[nats]\nurl = \"{url}\"\nstream = \"AUDIT\"\ntimeout = \"2s\"\n")
}

/// A bridge (consumer `admin`) reading `audit.user` from JetStream; `extra` goes into it.
fn bridge_section(extra: &str) -> String {
    format!(
        "\n[[bridge]]\nname = \"bridge\"\nconsumer = \"admin\"\nbroker = \"nats\"\ninstance = \"b1\"\nstreams = [{{ key = \"audit.user\", owner = \"relay\" }}]\nblock = \"200ms\"\nclaim_idle = \"1s\"\n{extra}\n"
    )
}

/// Publishes events `<prefix>-<i>` as the relay would (payload as the body, the rest headers,
/// the event id as `Nats-Msg-Id`); `malformed` ones lack their event id.
async fn publish(server: &NatsServer, prefix: &str, n: usize, malformed: &[usize]) {
    let config = NatsConfig { timeout: Duration::from_secs(2), ..NatsConfig::new(&server.url(), "AUDIT") };
    let stream = NatsStream::connect(&config, "payload").await.unwrap();
    let entries: Vec<Entry> = (1..=n)
        .map(|i| {
            let id = format!("{prefix}-{i}");
            let mut fields: Vec<(bytes::Bytes, bytes::Bytes)> = vec![
                ("event_type".into(), "user.changed".into()),
                ("aggregate_type".into(), "user".into()),
                ("aggregate_id".into(), "agg".into()),
                ("owner".into(), "relay".into()),
                ("payload".into(), format!(r#"{{"auditId":"{id}","actor":"ops"}}"#).into()),
            ];
            if !malformed.contains(&i) {
                fields.push(("event_id".into(), id.clone().into()));
            }
            Entry { stream: "audit.user".into(), fields, event_id: id, run: None, trace: None }
        })
        .collect();
    let outcomes = stream.append(&entries, &AppendOptions::default()).await;
    assert!(outcomes.iter().all(|o| matches!(o, AppendOutcome::Appended(_))), "{outcomes:?}");
}

/// (delivered and not acknowledged, not yet delivered) of the bridge's durable consumer.
async fn consumer_state(url: &str) -> Option<(usize, u64)> {
    let client = async_nats::connect(url).await.ok()?;
    let stream = async_nats::jetstream::new(client).get_stream("AUDIT").await.ok()?;
    let info = stream.consumer_info("admin-audit_user").await.ok()?;
    Some((info.num_ack_pending, info.num_pending))
}

/// Deliveries the bridge's durable consumer made, redeliveries included.
async fn deliveries(url: &str) -> Option<u64> {
    let client = async_nats::connect(url).await.ok()?;
    let stream = async_nats::jetstream::new(client).get_stream("AUDIT").await.ok()?;
    Some(stream.consumer_info("admin-audit_user").await.ok()?.delivered.consumer_sequence)
}

/// Every message of `audit.user` delivered to the bridge and acknowledged.
async fn await_acknowledged(url: &str) {
    eventually("every message acknowledged", || async { (consumer_state(url).await == Some((0, 0))).then_some(()) })
        .await;
}

fn series(name: &str) -> String {
    format!(r#"{name}{{bridge="bridge",stream="audit.user"}}"#)
}

#[tokio::test]
async fn the_chain_outbox_to_jetstream_to_the_handler_applies_each_event_once() {
    let env = TestEnv::new().await;
    let server = NatsServer::start().await;
    create_stream(&server).await;
    env.insert_events("c", "user", 60).await;
    let relay = env.config("broker = \"nats\"\nstream = \"audit.{aggregate_type}\"\nbatch_size = 25");
    let config = format!("{relay}{}{}{}", bridge_section(""), TestEnv::worker_section(""), nats_section(&server));
    let handoff = Handoff::run(&config);
    env.await_delivered(60).await;
    await_acknowledged(&server.url()).await;
    assert_eq!(env.scalar_i64("SELECT count(*) FROM audit_logs").await, 60);
    assert_eq!(env.inbox_count("PROCESSED").await, 60);
    let streams = env.scalar_i64("SELECT count(*) FROM consumer_inbox WHERE stream = 'audit.user'").await;
    assert_eq!(streams, 60, "each row names the subject it came from");
    let address = handoff.telemetry_address().await;
    let metrics = get(&address, "/metrics").1;
    let info = sample(&metrics, r#"handoff_bridge_info{bridge="bridge",broker="nats",stream="audit.user"}"#);
    assert_eq!(info, Some(1.0), "the broker label, by join: {metrics}");
    assert_eq!(sample(&metrics, r#"handoff_relay_info{broker="nats",relay="relay"}"#), Some(1.0), "{metrics}");
    // Applied at take-over by default (the one worker of this inbox, a SQL handler).
    assert_eq!(sample(&metrics, &series("handoff_bridge_applied_total")), Some(60.0), "{metrics}");
    let lag = eventually("the lag gauge from the consumer's info", || async {
        let body = get(&address, "/metrics").1;
        sample(&body, &series("handoff_bridge_lag_entries")).filter(|lag| *lag == 0.0)
    })
    .await;
    assert_eq!(lag, 0.0);
}

#[tokio::test]
async fn a_bridge_killed_after_its_commit_before_its_ack_gets_the_messages_again_and_recognises_them() {
    let env = TestEnv::new().await;
    let server = NatsServer::start().await;
    create_stream(&server).await;
    publish(&server, "k", 30, &[]).await;
    let config = format!("{}{}{}", env.base_config(), bridge_section(""), nats_section(&server));
    let mut crashed = Handoff::run_paused(&config, "bridge_before_ack");
    crashed.await_paused().await;
    crashed.kill();
    let committed = env.inbox_count("PENDING").await;
    assert!(committed >= 1, "a batch committed");
    let (unacknowledged, _) = consumer_state(&server.url()).await.unwrap();
    assert!(unacknowledged as i64 >= committed, "and was not acknowledged");

    let restarted = Handoff::run(&config);
    await_acknowledged(&server.url()).await;
    assert_eq!(env.inbox_count("PENDING").await, 30, "one row per event");
    let address = restarted.telemetry_address().await;
    eventually("the redelivered messages counted as duplicates", || async {
        let body = get(&address, "/metrics").1;
        (sample(&body, &series("handoff_bridge_duplicates_total")) == Some(committed as f64)).then_some(())
    })
    .await;
    let counts = env.scalar_i64("SELECT count(*) FROM consumer_inbox_deliveries").await;
    assert_eq!(counts, 0, "the counted redeliveries are forgotten once taken over");
}

#[tokio::test]
async fn a_malformed_message_goes_to_poison_with_its_reason_and_its_neighbours_go_on() {
    let env = TestEnv::new().await;
    let server = NatsServer::start().await;
    create_stream(&server).await;
    publish(&server, "m", 10, &[4]).await;
    let _handoff = Handoff::run(&format!("{}{}{}", env.base_config(), bridge_section(""), nats_section(&server)));
    await_acknowledged(&server.url()).await;
    assert_eq!(env.inbox_count("PENDING").await, 9);
    let poison = env.poison().await;
    assert_eq!(poison.len(), 1, "{poison:?}");
    assert_eq!(poison[0].0, "missing_field");
    let entry: String =
        env.db.query_one("SELECT stream_entry_id FROM consumer_inbox_poison", &[]).await.unwrap().get(0);
    assert_eq!(entry, "4", "the message's stream sequence");
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn database_port() -> u16 {
    let base = common::base_database_url();
    base.rsplit_once(':').and_then(|(_, rest)| rest.split('/').next()?.parse().ok()).unwrap_or(5432)
}

#[tokio::test]
async fn through_an_inbox_outage_and_restarts_nothing_is_acknowledged_and_no_delivery_counts() {
    let env = TestEnv::new().await;
    let server = NatsServer::start().await;
    create_stream(&server).await;
    // One message: every instance below reads that one.
    publish(&server, "o", 1, &[]).await;
    let proxy = Proxy::start(database_port()).await;
    let url = env.database_url.replacen(&format!(":{}/", database_port()), &format!(":{}/", proxy.port), 1);
    let config = format!("{}{}{}", env.base_config(), bridge_section("max_deliveries = 2"), nats_section(&server))
        .replace(&env.database_url, &url)
        .replace("pool_size = 4", "pool_size = 4\nconnect_timeout = \"1s\"");
    proxy.switch(dead_port());
    // Three instances in turn get the message during the outage (JetStream delivers it again
    // after each one's ack_wait): more deliveries than max_deliveries, none reached the inbox.
    for round in 1..=3 {
        let mut handoff = Handoff::run(&config);
        let address = handoff.telemetry_address().await;
        eventually(&format!("delivery {round} of the message"), || async {
            (deliveries(&server.url()).await == Some(round)).then_some(())
        })
        .await;
        eventually(&format!("instance {round} to hold the message it cannot take over"), || async {
            let body = get(&address, "/metrics").1;
            let failed =
                body.lines().any(|l| l.starts_with("handoff_bridge_inbox_unavailable_total{") && !l.ends_with(" 0"));
            failed.then_some(())
        })
        .await;
        assert_eq!(consumer_state(&server.url()).await, Some((1, 0)), "delivered, not acknowledged");
        handoff.kill();
    }
    proxy.switch(database_port());
    let _handoff = Handoff::run(&config);
    await_acknowledged(&server.url()).await;
    assert_eq!(env.inbox_count("PENDING").await, 1);
    assert!(
        env.poison().await.is_empty(),
        "deliveries during the outage count against nothing: {:?}",
        env.poison().await
    );
}

#[tokio::test]
async fn two_instances_share_the_durable_consumer_and_one_killed_mid_batch_leaves_its_messages_to_the_other() {
    let env = TestEnv::new().await;
    let server = NatsServer::start().await;
    create_stream(&server).await;
    publish(&server, "t", 40, &[]).await;
    let config = format!("{}{}{}", env.base_config(), bridge_section(""), nats_section(&server));
    let mut victim = Handoff::run_paused(&config, "bridge_before_commit");
    victim.await_paused().await;
    let (held, _) = consumer_state(&server.url()).await.unwrap();
    assert!(held >= 1, "the victim holds messages");
    victim.kill();
    let _survivor = Handoff::run(&config.replace("instance = \"b1\"", "instance = \"b2\""));
    await_acknowledged(&server.url()).await;
    assert_eq!(env.inbox_count("PENDING").await, 40, "one row per event");
    assert!(env.poison().await.is_empty());
}

#[tokio::test]
async fn check_names_a_subject_the_stream_does_not_capture_and_the_configuration_refuses_what_nats_cannot_do() {
    let env = TestEnv::new().await;
    let server = NatsServer::start().await;
    create_stream(&server).await;
    let config = format!("{}{}{}", env.base_config(), bridge_section(""), nats_section(&server));
    let (ok, out) = common::process::run_to_end(&config, &["check"]);
    assert!(ok && out.contains("bridge `bridge`: JetStream stream AUDIT captures `audit.user`"), "{out}");

    let elsewhere = config.replace("key = \"audit.user\"", "key = \"billing.user\"");
    let (ok, out) = common::process::run_to_end(&elsewhere, &["check"]);
    assert!(!ok && out.contains("bridge `bridge`.streams[0].key: `billing.user` is not captured"), "{out}");

    let refused = format!(
        "{}{}{}",
        env.base_config(),
        bridge_section("start = \"1700000000000-0\"\ndead_letter_stream = \"dead\""),
        nats_section(&server)
    )
    .replace("key = \"audit.user\"", "key = \"audit user\"");
    let (ok, out) = common::process::run_to_end(&refused, &["check"]);
    assert!(!ok, "{out}");
    for key in ["bridge[0].start", "bridge[0].dead_letter_stream", "bridge[0].streams[0].key"] {
        assert!(out.contains(key), "names {key}: {out}");
    }
    let without = format!("{}{}", env.base_config(), bridge_section(""));
    let (ok, out) = common::process::run_to_end(&without, &["check"]);
    assert!(!ok && out.contains("bridge[0].broker: \"nats\" needs a [nats] section"), "{out}");
}

#[tokio::test]
async fn a_server_killed_and_restarted_with_its_store_mid_chain_loses_nothing_and_applies_each_event_once() {
    let env = TestEnv::new().await;
    let mut server = NatsServer::start().await;
    create_stream(&server).await;
    env.insert_events("r", "user", 100).await;
    let relay = env.config("broker = \"nats\"\nstream = \"audit.{aggregate_type}\"\nbatch_size = 25");
    let config = format!("{relay}{}{}{}", bridge_section(""), TestEnv::worker_section(""), nats_section(&server));
    let _handoff = Handoff::run(&config);
    eventually("part of the chain applied", || async {
        (env.scalar_i64("SELECT count(*) FROM audit_logs").await >= 1).then_some(())
    })
    .await;
    server.stop();
    // Written while the broker is down: the relay waits, nothing is lost.
    env.insert_events("s", "user", 100).await;
    server.restart().await;
    env.await_delivered(200).await;
    eventually("every event applied", || async {
        (env.scalar_i64("SELECT count(*) FROM audit_logs").await == 200).then_some(())
    })
    .await;
    await_acknowledged(&server.url()).await;
    assert_eq!(env.inbox_count("PROCESSED").await, 200, "one inbox row per event");
}

/// Creates `AUDIT` as an R3 stream on the cluster; fails until the cluster has a JetStream
/// meta leader.
async fn create_r3_stream(url: &str) -> Option<()> {
    let client = async_nats::connect(url).await.ok()?;
    let config = Config {
        name: "AUDIT".into(),
        subjects: vec!["audit.>".into()],
        duplicate_window: Duration::from_secs(3600),
        num_replicas: 3,
        ..Default::default()
    };
    async_nats::jetstream::new(client).get_or_create_stream(config).await.ok().map(drop)
}

/// The name of the server leading the `AUDIT` stream's replicas.
async fn stream_leader(url: &str) -> Option<String> {
    let client = async_nats::connect(url).await.ok()?;
    let mut stream = async_nats::jetstream::new(client).get_stream("AUDIT").await.ok()?;
    stream.info().await.ok()?.cluster.as_ref()?.leader.clone()
}

#[tokio::test]
async fn on_a_three_server_cluster_the_r3_stream_leader_killed_mid_run_loses_nothing_and_applies_each_event_once() {
    let env = TestEnv::new().await;
    let mut cluster = NatsCluster::start().await;
    let url = cluster.live_url();
    eventually("an R3 stream on the cluster", || create_r3_stream(&url)).await;
    env.insert_events("l", "user", 300).await;
    let relay = env.config("broker = \"nats\"\nstream = \"audit.{aggregate_type}\"\nbatch_size = 25");
    let config =
        format!("{relay}{}{}{}", bridge_section(""), TestEnv::worker_section(""), nats_section_for(&cluster.url()));
    let _handoff = Handoff::run(&config);
    eventually("part of the chain applied", || async {
        (env.scalar_i64("SELECT count(*) FROM audit_logs").await >= 1).then_some(())
    })
    .await;
    let leader = eventually("the stream's leader", || stream_leader(&url)).await;
    cluster.kill(NatsCluster::node_named(&leader));
    // Written while the stream elects a new leader among the two left.
    env.insert_events("m", "user", 100).await;
    env.await_delivered(400).await;
    eventually("every event applied", || async {
        (env.scalar_i64("SELECT count(*) FROM audit_logs").await == 400).then_some(())
    })
    .await;
    await_acknowledged(&cluster.live_url()).await;
    assert_eq!(env.inbox_count("PROCESSED").await, 400, "one inbox row per event");
    let new_leader = stream_leader(&cluster.live_url()).await;
    assert!(new_leader.is_some_and(|l| l != leader), "another server leads the stream");
}
