//! NATS JetStream behind the broker seams, what only NATS has (the scenarios both brokers share
//! are in `both_brokers.rs`): `check` on a bridge's subjects and what the configuration refuses
//! on NATS; the server killed and restarted with its store mid-chain; a replay within the
//! stream's duplicate window; a three-server cluster whose R3 stream leader is killed mid-run;
//! the whole chain on MariaDB as on Postgres. Nothing lost, one inbox row per event.

use crate::common;

use std::time::Duration;

use async_nats::jetstream::stream::Config;
use common::brokers::Chain;
use common::db_env::{DbEnv, Dialect};
use common::nats_cluster::NatsCluster;
use common::nats_server::NatsServer;
use common::process::Handoff;
use common::{TestEnv, eventually};

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

/// `config` without its `[redis]` table.
fn without_redis(config: &str) -> String {
    let start = config.find("[redis]").expect("a [redis] table");
    let end = config[start..].find("\n\n").map_or(config.len(), |i| start + i);
    format!("{}{}", &config[..start], &config[end..])
}

/// A relay publishing `audit.{aggregate_type}` to `server` (`relay_extra` in its table), the
/// bridge and the worker, without `[redis]`; `more` sections after them.
fn chain_config(env: &TestEnv, server: &NatsServer, relay_extra: &str, more: &str) -> String {
    let relay = env.config(&format!("broker = \"nats\"\nstream = \"audit.{{aggregate_type}}\"\n{relay_extra}"));
    without_redis(&format!(
        "{relay}{}{}{}{more}",
        bridge_section(""),
        TestEnv::worker_section(""),
        nats_section(server)
    ))
}

/// Runs `config` until the `n` events inserted are applied and every message acknowledged.
async fn run_until_applied(env: &TestEnv, server: &NatsServer, config: &str, n: i64) -> Handoff {
    let handoff = Handoff::run(config);
    eventually("every event applied", || async {
        (env.scalar_i64("SELECT count(*) FROM audit_logs").await == n).then_some(())
    })
    .await;
    await_acknowledged(&server.url()).await;
    handoff
}

/// (delivered and not acknowledged, not yet delivered) of the bridge's durable consumer.
async fn consumer_state(url: &str) -> Option<(usize, u64)> {
    let client = async_nats::connect(url).await.ok()?;
    let stream = async_nats::jetstream::new(client).get_stream("AUDIT").await.ok()?;
    let info = stream.consumer_info("admin-audit_user").await.ok()?;
    Some((info.num_ack_pending, info.num_pending))
}

/// Every message of `audit.user` delivered to the bridge and acknowledged.
async fn await_acknowledged(url: &str) {
    eventually("every message acknowledged", || async { (consumer_state(url).await == Some((0, 0))).then_some(()) })
        .await;
}

#[tokio::test]
async fn check_names_a_subject_the_stream_does_not_capture_and_the_configuration_refuses_what_nats_cannot_do() {
    let env = TestEnv::new().await;
    let server = NatsServer::start().await;
    server.create_audit_stream().await;
    // No [redis]: on NATS alone nothing asks for it.
    let config = format!("{}{}{}", without_redis(&env.base_config()), bridge_section(""), nats_section(&server));
    let (ok, out) = common::process::run_to_end(&config, &["check"]);
    assert!(ok && out.contains("bridge `bridge`: JetStream stream AUDIT captures `audit.user`"), "{out}");
    assert!(!out.contains("redis"), "{out}");
    assert!(out.contains("(nats-server 2."), "the server's version: {out}");

    let elsewhere = config.replace("key = \"audit.user\"", "key = \"billing.user\"");
    let (ok, out) = common::process::run_to_end(&elsewhere, &["check"]);
    assert!(!ok && out.contains("bridge `bridge`.streams[0].key: `billing.user` is not captured"), "{out}");

    let refused = format!(
        "{}{}{}",
        env.base_config(),
        bridge_section("start = \"1700000000000-0\"\ndead_letter_stream = \"audit.*\""),
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
    server.create_audit_stream().await;
    env.insert_events("r", "user", 100).await;
    // No [redis]: the process opens no client to a Redis.
    let config = chain_config(&env, &server, "batch_size = 25", "");
    let handoff = Handoff::run(&config);
    eventually("part of the chain applied", || async {
        (env.scalar_i64("SELECT count(*) FROM audit_logs").await >= 1).then_some(())
    })
    .await;
    server.stop();
    // Written while the broker is down: the relay waits, nothing is lost.
    env.insert_events("s", "user", 100).await;
    let address = handoff.telemetry_address().await;
    let reasons = eventually("not ready, naming the broker that is down", || async {
        let (status, body) = common::http::get(&address, "/readyz");
        (status == 503 && body.contains("bridge bridge audit.user: nats unreachable")).then_some(body)
    })
    .await;
    assert!(!reasons.contains("redis") && !reasons.contains("worker"), "{reasons}");
    server.restart().await;
    env.await_delivered(200).await;
    eventually("every event applied", || async {
        (env.scalar_i64("SELECT count(*) FROM audit_logs").await == 200).then_some(())
    })
    .await;
    await_acknowledged(&server.url()).await;
    assert_eq!(env.inbox_count("PROCESSED").await, 200, "one inbox row per event");
    assert!(!handoff.logs().contains("redis"), "{}", handoff.logs());
    // Ready again, the worker included (it uses no broker).
    eventually("ready once the broker is back", || async {
        (common::http::get(&address, "/readyz").0 == 200).then_some(())
    })
    .await;
    // `handoff status` reads the bridge's figures from its durable consumer.
    let (ok, out) = common::process::run_to_end(&config, &["status", "--json"]);
    assert!(ok, "{out}");
    // The JSON document (stdout) comes first; log lines may follow.
    let lines: serde_json::Value =
        serde_json::Deserializer::from_str(&out).into_iter().next().expect("a JSON document").unwrap();
    let bridge = lines.as_array().unwrap().iter().find(|l| l["component"] == "bridge bridge audit.user").unwrap();
    assert_eq!(
        (&bridge["lag"], &bridge["in_flight"], &bridge["error"]),
        (&0.into(), &0.into(), &serde_json::Value::Null),
        "{out}"
    );
}

/// Messages the `AUDIT` stream holds.
async fn stream_messages(url: &str) -> Option<u64> {
    let client = async_nats::connect(url).await.ok()?;
    let mut stream = async_nats::jetstream::new(client).get_stream("AUDIT").await.ok()?;
    Some(stream.info().await.ok()?.state.messages)
}

/// `handoff replay` on a relay that publishes to JetStream, within the stream's duplicate
/// window: every event is published again (its message id is scoped to the replay job, so the
/// server does not drop it as a repeat of the first delivery), the bridge reads it and the
/// inbox keeps each effect once.
#[tokio::test]
async fn a_replay_to_jetstream_within_the_duplicate_window_publishes_every_event_again_and_consumers_apply_it_once() {
    let env = TestEnv::new().await;
    let server = NatsServer::start().await;
    server.create_audit_stream().await;
    env.insert_events("r", "user", 50).await;
    let config = chain_config(&env, &server, "batch_size = 20", "");
    let handoff = run_until_applied(&env, &server, &config, 50).await;
    assert_eq!(stream_messages(&server.url()).await, Some(50));

    let (ok, out) = common::process::run_to_end(&config, &["replay", "--relay", "relay", "--batch", "20"]);
    assert!(ok, "{out}");
    assert_eq!(stream_messages(&server.url()).await, Some(100), "published again, not dropped as duplicates");
    await_acknowledged(&server.url()).await;
    let address = handoff.telemetry_address().await;
    let duplicates = r#"handoff_bridge_duplicates_total{bridge="bridge",stream="audit.user"}"#;
    eventually("the replayed events recognised by the inbox", || async {
        (common::http::sample(&common::http::get(&address, "/metrics").1, duplicates) == Some(50.0)).then_some(())
    })
    .await;
    assert_eq!(env.scalar_i64("SELECT count(*) FROM audit_logs").await, 50, "each effect once");
    assert_eq!(env.inbox_count("PROCESSED").await, 50);
}

/// `handoff bridge rewind` on JetStream: refused while the bridge runs (recreating its durable
/// consumer would race the bridge's own), and with the bridge paused it recreates the consumer
/// from the start: every event is delivered again and the inbox keeps each effect once. The
/// operator runs pause, rewind and resume as a database user with `grants --role operator`
/// alone. The admin API's status then shows the bridge caught up.
#[tokio::test]
async fn a_paused_bridge_rewound_on_jetstream_reads_every_event_again_and_applies_each_once() {
    let env = TestEnv::new().await;
    let server = NatsServer::start().await;
    server.create_audit_stream().await;
    env.insert_events("w", "user", 30).await;
    let secrets = tempfile::tempdir().unwrap();
    let token_file = secrets.path().join("write");
    std::fs::write(&token_file, "write-token-0123456789").unwrap();
    let admin = format!(
        "\n[admin]\nlisten = \"127.0.0.1:0\"\n[[admin.token]]\nname = \"ops\"\nscope = \"write\"\ntoken_file = \"{}\"\n",
        token_file.display()
    );
    let config = chain_config(&env, &server, "", &format!("\n[pause]\npoll_interval = \"100ms\"\n{admin}"));
    let handoff = run_until_applied(&env, &server, &config, 30).await;
    let (_, operator) = crate::least_privilege::as_granted_user(&env, &config, "operator", &[]).await;

    let rewind = ["bridge", "rewind", "--bridge", "bridge", "--to", "0"];
    let (ok, out) = common::process::run_to_end(&operator, &rewind);
    assert!(!ok && out.contains("pause it first (handoff pause --bridge bridge)"), "{out}");
    let (ok, out) = common::process::run_to_end(&operator, &["pause", "--bridge", "bridge"]);
    assert!(ok, "{out}");
    let address = handoff.telemetry_address().await;
    eventually("the bridge paused", || async {
        common::http::get(&address, "/readyz").1.contains("bridge bridge audit.user").then_some(())
    })
    .await;
    let (ok, out) = common::process::run_to_end(&operator, &[&rewind[..], &["--json"]].concat());
    assert!(ok, "{out}");
    assert_eq!(consumer_state(&server.url()).await, Some((0, 30)), "the consumer starts again before every message");
    let (ok, out) = common::process::run_to_end(&operator, &["resume", "--bridge", "bridge"]);
    assert!(ok, "{out}");

    await_acknowledged(&server.url()).await;
    let duplicates = r#"handoff_bridge_duplicates_total{bridge="bridge",stream="audit.user"}"#;
    eventually("every event recognised as a duplicate", || async {
        (common::http::sample(&common::http::get(&address, "/metrics").1, duplicates) == Some(30.0)).then_some(())
    })
    .await;
    assert_eq!(env.scalar_i64("SELECT count(*) FROM audit_logs").await, 30, "each effect once");

    // The admin API's status reads the bridge's figures from its durable consumer.
    let admin_address = handoff.admin_address().await;
    let auth = [("Authorization", "Bearer write-token-0123456789")];
    let (status, body) = common::http::request(&admin_address, "GET", "/api/status", &auth, "");
    assert_eq!(status, 200, "{body}");
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    let bridge = doc["components"].as_array().unwrap().iter().find(|c| c["component"] == "bridge bridge audit.user");
    let bridge = bridge.unwrap_or_else(|| panic!("{body}"));
    assert_eq!(
        (&bridge["lag"], &bridge["in_flight"], &bridge["error"]),
        (&0.into(), &0.into(), &serde_json::Value::Null),
        "{body}"
    );
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

/// The chain through JetStream on either dialect: outbox → NATS → inbox → `audit_logs` (on
/// MariaDB the worker applies; apply at take-over is Postgres's), each event applied once.
async fn the_chain_through_jetstream_applies_each_event_once(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    let server = NatsServer::start().await;
    server.create_audit_stream().await;
    env.insert_events("c", "user", 50).await;
    let relay = env.config("broker = \"nats\"\nstream = \"audit.{aggregate_type}\"\nbatch_size = 20\n");
    let config = format!(
        "{relay}\n[[bridge]]\nname = \"bridge\"\nconsumer = \"admin\"\ninstance = \"b1\"\nbroker = \"nats\"\n\
         streams = [{{ key = \"audit.user\", owner = \"relay\" }}]\nblock = \"200ms\"\nclaim_idle = \"1s\"\n{}\n\
         [nats]\nurl = \"{}\"\nstream = \"AUDIT\"\ntimeout = \"2s\"\n",
        env.worker_section(""),
        server.url()
    );
    let _handoff = Handoff::run(&config);
    env.await_delivered(50).await;
    eventually("every event applied", || async { (env.inbox_count("PROCESSED").await == 50).then_some(()) }).await;
    assert_eq!(env.scalar("SELECT COUNT(*) FROM audit_logs").await, 50);
    assert_eq!(env.scalar("SELECT COUNT(DISTINCT stream_entry_id) FROM consumer_inbox").await, 50);
}

crate::on_both_dialects!(the_chain_through_jetstream_applies_each_event_once);

/// `poison retry` on NATS publishes a re-drive under an id of its own: run again after its count
/// was lost (the command died between publish and count), the same re-drive is neither published
/// nor counted twice; the next retry is a new re-drive.
#[tokio::test]
async fn poison_retry_publishes_each_re_drive_once_and_counts_it_once() {
    let chain = Chain::nats().await;
    let env = &chain.env;
    chain.publish("p", 3, &[2]).await;
    let config = chain.bridge_config("b1", "", "");
    let bridge = Handoff::run(&config);
    chain.await_acknowledged().await;
    eventually("the malformed entry poisoned", || async { (env.poison().await.len() == 1).then_some(()) }).await;
    drop(bridge);
    let redrives = || env.scalar_i64("SELECT max(redrives)::int8 FROM consumer_inbox_poison");
    let retry = || common::process::run_to_end(&config, &["poison", "retry", "--bridge", "bridge"]);

    let (ok, out) = retry();
    assert!(ok && out.contains("re-appended: 1 record(s)"), "{out}");
    assert_eq!((chain.stream_event_ids().await.len(), redrives().await), (4, 1));
    env.db.execute("UPDATE consumer_inbox_poison SET redrives = 0", &[]).await.unwrap();
    let (ok, out) = retry();
    assert!(ok, "{out}");
    assert_eq!((chain.stream_event_ids().await.len(), redrives().await), (4, 1), "published once, counted once");
    let (ok, out) = retry();
    assert!(ok, "{out}");
    assert_eq!((chain.stream_event_ids().await.len(), redrives().await), (5, 2), "a later retry is a new re-drive");
}

/// Publishes one message with these raw header lines on `subject`, over the NATS protocol itself
/// (the client library refuses such names; the server does not).
async fn publish_raw_headers(port: u16, subject: &str, header_lines: &str, payload: &str) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let info = lines.next_line().await.unwrap().unwrap();
    assert!(info.starts_with("INFO"), "{info}");
    let headers = format!("NATS/1.0\r\n{header_lines}\r\n");
    let total = headers.len() + payload.len();
    let frame = format!(
        "CONNECT {{\"verbose\":false,\"headers\":true,\"no_responders\":true}}\r\nHPUB {subject} _INBOX.raw {} {total}\r\n{headers}{payload}\r\nPING\r\n",
        headers.len()
    );
    write.write_all(frame.as_bytes()).await.unwrap();
    loop {
        let line = lines.next_line().await.unwrap().expect("the server answers");
        assert!(!line.starts_with("-ERR"), "{line}");
        if line == "PONG" {
            break;
        }
    }
}

/// A message whose header name the client library cannot take (a space in it) is published by
/// another client: async-nats ends its connection on reading it, so the bridge finds it after the
/// reconnect, sends it to poison with the reason and the header lines, and terminates it; its
/// neighbours are taken in, and the connection stays up (nothing is redelivered, the later
/// events flow).
#[tokio::test]
async fn a_message_with_a_header_name_the_client_refuses_goes_to_poison_and_its_neighbours_go_on() {
    let chain = Chain::nats().await;
    let common::brokers::Broker::Nats(server) = &chain.broker else { unreachable!() };
    chain.publish("a", 3, &[]).await;
    let headers = "Nats-Msg-Id: bad-1\r\nevent_id: bad-1\r\nbad name: x\r\nowner: relay\r\n";
    publish_raw_headers(server.port, "audit.user", headers, "{}").await;
    chain.publish("b", 3, &[]).await;
    let bridge = Handoff::run(&chain.bridge_config("b1", "", ""));
    eventually("the message poisoned", || async { (!chain.env.poison().await.is_empty()).then_some(()) }).await;
    assert_eq!(chain.env.poison().await, vec![("unreadable_message".to_owned(), Some("bad-1".to_owned()))]);
    let (detail, fields): (String, serde_json::Value) = {
        let row = chain.env.db.query_one("SELECT detail, fields FROM consumer_inbox_poison", &[]).await.unwrap();
        (row.get(0), row.get(1))
    };
    assert!(detail.contains("header name `bad name`"), "{detail}");
    assert_eq!(fields["bad name"], "x", "{fields}");
    await_acknowledged(&server.url()).await;
    chain.publish("c", 3, &[]).await;
    await_acknowledged(&server.url()).await;
    assert_eq!(chain.taken_in().await, 9, "every neighbour taken in");
    let reconnects = bridge.logs().matches("nats connection lost").count();
    chain.publish("d", 3, &[]).await;
    await_acknowledged(&server.url()).await;
    assert_eq!(
        bridge.logs().matches("nats connection lost").count(),
        reconnects,
        "no reconnect once it was terminated"
    );
}
