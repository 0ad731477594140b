//! NATS JetStream behind the broker seam, owner side, on a nats-server of the test's own (Debian's
//! 2.9 with JetStream; never the machine's on 4222): publishes carry the event id as
//! `Nats-Msg-Id` and the PubAck's `duplicate` is handoff's Duplicate with the first entry's
//! sequence; an entry whose fields cannot be headers is rejected alone; an ordered run stops at
//! its first failure; the stream's state and entries survive a server restart with its store;
//! a server that is down makes every entry unavailable, none rejected. The relay on NATS: each
//! row one message (from Postgres and from MariaDB), kills, a lost stream, TLS, tokens, `check`
//! and `migrate`, and a row over the stream's `max_msg_size`.

use crate::common;

use std::time::Duration;

use async_nats::jetstream::stream::Config;
use common::db_env::{DbEnv, Dialect};
use common::eventually;
use common::nats_server::NatsServer;
use handoff::NatsConfig;
use handoff::NatsStream;
use handoff::{AppendOptions, AppendOutcome, Entry, EventStream};

const TIMEOUT: Duration = Duration::from_secs(2);

fn entry(subject: &str, event_id: &str, run: Option<u32>) -> Entry {
    Entry {
        stream: subject.into(),
        fields: vec![
            ("event_id".into(), event_id.to_owned().into()),
            ("event_type".into(), "user.changed".into()),
            ("payload".into(), format!(r#"{{"auditId":"{event_id}"}}"#).into()),
        ],
        event_id: event_id.into(),
        run,
        trace: None,
    }
}

async fn connect(server: &NatsServer) -> NatsStream {
    let config = NatsConfig { timeout: TIMEOUT, ..NatsConfig::new(&server.url(), "AUDIT") };
    NatsStream::connect(&config, "payload").await.unwrap()
}

fn sequences(outcomes: &[AppendOutcome]) -> Vec<String> {
    outcomes
        .iter()
        .map(|o| match o {
            AppendOutcome::Appended(id) => format!("appended {id}"),
            AppendOutcome::Duplicate(id) => format!("duplicate {id}"),
            other => format!("{other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn a_batch_is_published_with_its_event_ids_and_a_repeat_is_a_duplicate_of_the_first() {
    let server = NatsServer::start().await;
    server.create_audit_stream().await;
    let stream = connect(&server).await;
    let batch: Vec<Entry> = (1..=3).map(|i| entry("audit.user", &format!("e-{i}"), None)).collect();
    let first = stream.append(&batch, &AppendOptions::default()).await;
    assert_eq!(sequences(&first), ["appended 1", "appended 2", "appended 3"]);
    // The relay died before settling and appends the same rows again: the server drops them.
    let again = stream.append(&batch, &AppendOptions::default()).await;
    assert_eq!(sequences(&again), ["duplicate 1", "duplicate 2", "duplicate 3"]);

    // The message: the payload field as the body, the others as headers, the id as Nats-Msg-Id.
    let client = async_nats::connect(server.url()).await.unwrap();
    let audit = async_nats::jetstream::new(client).get_stream("AUDIT").await.unwrap();
    let message = audit.get_raw_message(2).await.unwrap();
    assert_eq!(message.subject.as_str(), "audit.user");
    assert_eq!(&message.payload[..], br#"{"auditId":"e-2"}"#);
    assert_eq!(message.headers.get("event_type").map(|v| v.as_str()), Some("user.changed"));
    assert_eq!(message.headers.get("Nats-Msg-Id").map(|v| v.as_str()), Some("e-2"));

    let state = stream.stream_state("audit.user").await.unwrap();
    assert!(state.exists);
    assert_eq!((state.length, state.entries_added), (Some(3), Some(3)));
    let ids: Vec<String> = ["1", "3", "4"].map(String::from).to_vec();
    assert_eq!(stream.entries_exist("audit.user", &ids).await.unwrap(), [true, true, false]);
    assert_eq!(stream.entries_exist("audit.order", &ids[..1]).await.unwrap(), [false], "another subject's");
}

#[tokio::test]
async fn an_entry_whose_fields_cannot_be_headers_is_rejected_alone_and_a_run_stops_at_its_first_failure() {
    let server = NatsServer::start().await;
    server.create_audit_stream().await;
    let stream = connect(&server).await;
    let mut bad = entry("audit.user", "bad", None);
    bad.fields.push(("note".into(), "two\r\nlines".into()));
    let mut bad_in_run = entry("audit.user", "r-2", Some(7));
    bad_in_run.fields.push(("a:b".into(), "x".into()));
    let batch = vec![
        entry("audit.user", "ok-1", None),
        bad,
        entry("audit.user", "r-1", Some(7)),
        bad_in_run,
        entry("audit.user", "r-3", Some(7)),
        entry("audit.user", "ok-2", None),
        // A subject rendered from a hostile row: a wildcard would reach other subjects.
        entry("audit.>", "wild", None),
        entry("audit.a b", "space", None),
    ];
    let outcomes = stream.append(&batch, &AppendOptions::default()).await;
    assert!(matches!(outcomes[0], AppendOutcome::Appended(_)), "{outcomes:?}");
    assert!(matches!(&outcomes[1], AppendOutcome::Rejected(e) if e.contains("note")), "{outcomes:?}");
    assert!(matches!(outcomes[2], AppendOutcome::Appended(_)), "{outcomes:?}");
    assert!(matches!(&outcomes[3], AppendOutcome::Rejected(e) if e.contains("a:b")), "{outcomes:?}");
    assert_eq!(outcomes[4], AppendOutcome::Skipped, "behind a failure of its run");
    assert!(matches!(outcomes[5], AppendOutcome::Appended(_)), "{outcomes:?}");
    assert!(
        outcomes[6..].iter().all(|o| matches!(o, AppendOutcome::Rejected(e) if e.contains("not a NATS subject"))),
        "{outcomes:?}"
    );
}

#[tokio::test]
async fn what_was_acknowledged_survives_a_restart_with_the_store_and_a_server_down_rejects_nothing() {
    let mut server = NatsServer::start().await;
    server.create_audit_stream().await;
    let stream = connect(&server).await;
    let batch: Vec<Entry> = (1..=5).map(|i| entry("audit.user", &format!("s-{i}"), None)).collect();
    // The client connects in the background (it retries an initial connect as any other).
    let before = common::eventually("the client to connect", || async { stream.servers().await.ok() }).await;
    assert!(
        sequences(&stream.append(&batch, &AppendOptions::default()).await).iter().all(|s| s.starts_with("appended"))
    );

    server.stop();
    let down = stream.append(&[entry("audit.user", "s-6", None)], &AppendOptions::default()).await;
    assert!(matches!(down[0], AppendOutcome::Unavailable(_)), "{down:?}");
    assert!(stream.ping().await.is_err());

    server.restart().await;
    common::eventually("the client to reconnect", || async { stream.ping().await.ok() }).await;
    let ids: Vec<String> = (1..=5).map(|i| i.to_string()).collect();
    assert_eq!(stream.entries_exist("audit.user", &ids).await.unwrap(), [true; 5], "kept by the store");
    let after = common::eventually("the restarted server's id", || async {
        stream.servers().await.ok().filter(|s| *s != before)
    })
    .await;
    assert_eq!(after.len(), 1, "a restart shows as a new server id: {before:?} → {after:?}");
    // Within the duplicate window the restarted server still knows the ids.
    let again = stream.append(&batch[..2], &AppendOptions::default()).await;
    assert_eq!(sequences(&again), ["duplicate 1", "duplicate 2"]);
}

/// A relay publishing to the NATS server: `[nats]` and `broker = "nats"`, subjects `audit.<type>`.
fn nats_relay_config(env: &common::TestEnv, server: &NatsServer) -> String {
    let relay = env.config(
        "broker = \"nats\"\nstream = \"audit.{aggregate_type}\"\nbatch_size = 25\n[relay.broker_loss]\ncheck_interval = \"200ms\"",
    );
    format!("{relay}\n[nats]\nurl = \"{}\"\nstream = \"AUDIT\"\ntimeout = \"2s\"\n", server.url())
}

async fn messages(server: &NatsServer) -> u64 {
    let client = async_nats::connect(server.url()).await.unwrap();
    let mut audit = async_nats::jetstream::new(client).get_stream("AUDIT").await.unwrap();
    audit.info().await.unwrap().state.messages
}

#[tokio::test]
async fn a_relay_with_broker_nats_delivers_each_row_as_one_message_whose_sequence_it_stores() {
    let env = common::TestEnv::new().await;
    let server = NatsServer::start().await;
    server.create_audit_stream().await;
    env.insert_events("n", "user", 60).await;
    let _relay = common::process::Handoff::run(&nats_relay_config(&env, &server));
    env.await_delivered(60).await;
    assert_eq!(messages(&server).await, 60);
    let ids = env.scalar_i64("SELECT count(DISTINCT stream_entry_id::bigint) FROM audit_outbox WHERE stream_entry_id::bigint BETWEEN 1 AND 60").await;
    assert_eq!(ids, 60, "each row stores its message's stream sequence");
    let client = async_nats::connect(server.url()).await.unwrap();
    let audit = async_nats::jetstream::new(client).get_stream("AUDIT").await.unwrap();
    let sequence: String =
        env.db.query_one("SELECT stream_entry_id FROM audit_outbox WHERE event_id = 'n-7'", &[]).await.unwrap().get(0);
    let message = audit.get_raw_message(sequence.parse().unwrap()).await.unwrap();
    assert_eq!(message.subject.as_str(), "audit.user");
    assert_eq!(message.headers.get("Nats-Msg-Id").map(|v| v.as_str()), Some("n-7"));
    let body: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
    assert_eq!(body["auditId"], "n-7");
}

#[tokio::test]
async fn a_relay_killed_between_publish_and_settle_publishes_again_and_the_stream_keeps_one_message_per_event() {
    let env = common::TestEnv::new().await;
    let server = NatsServer::start().await;
    server.create_audit_stream().await;
    env.insert_events("k", "user", 50).await;
    let config = nats_relay_config(&env, &server);
    let mut crashed = common::process::Handoff::run_paused(&config, "after_append");
    crashed.await_paused().await;
    crashed.kill();
    let published = messages(&server).await;
    assert!(published >= 1, "a batch was published");
    assert_eq!(env.count("DELIVERED").await, 0, "and not settled");

    let _restarted = common::process::Handoff::run(&config);
    env.await_delivered(50).await;
    assert_eq!(messages(&server).await, 50, "the republished batch was recognised by its ids");
}

/// The relay publishes to JetStream from either dialect: killed between publish and settle, it
/// publishes again and the stream keeps one message per event, each row storing its sequence.
async fn from_either_dialect_a_relay_killed_between_publish_and_settle_leaves_one_message_per_event(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    let server = NatsServer::start().await;
    server.create_audit_stream().await;
    env.insert_events("m", "user", 40).await;
    let relay = env.config(&format!(
        "broker = \"nats\"\nstream = \"audit.{{aggregate_type}}\"\nbatch_size = 20\n{}",
        env.parking_loops()
    ));
    let config = format!("{relay}\n[nats]\nurl = \"{}\"\nstream = \"AUDIT\"\ntimeout = \"2s\"\n", server.url());
    let mut crashed = common::process::Handoff::run_paused(&config, "after_append");
    crashed.await_paused().await;
    crashed.kill();
    assert!(messages(&server).await >= 1, "a batch was published");
    assert_eq!(env.count("DELIVERED").await, 0, "and not settled");

    let _restarted = common::process::Handoff::run(&config);
    env.await_delivered(40).await;
    assert_eq!(messages(&server).await, 40, "the republished batch was recognised by its ids");
    let sequences = env.scalar("SELECT COUNT(DISTINCT stream_entry_id) FROM audit_outbox").await;
    assert_eq!(sequences, 40, "each row stores its own message's sequence");
}

crate::on_both_dialects!(from_either_dialect_a_relay_killed_between_publish_and_settle_leaves_one_message_per_event);

#[tokio::test]
async fn a_stream_lost_and_recreated_is_noticed_and_its_delivered_rows_are_published_again() {
    let env = common::TestEnv::new().await;
    let server = NatsServer::start().await;
    server.create_audit_stream().await;
    env.insert_events("l", "user", 20).await;
    let _relay = common::process::Handoff::run(&nats_relay_config(&env, &server));
    env.await_delivered(20).await;
    assert_eq!(messages(&server).await, 20);
    // The stream is lost (deleted and created again empty, as an operator's mistake or a lost
    // store would leave it): the relay sees its counters go back and re-drives what is missing.
    let client = async_nats::connect(server.url()).await.unwrap();
    async_nats::jetstream::new(client).delete_stream("AUDIT").await.unwrap();
    server.create_audit_stream().await;
    common::eventually("the lost rows published again", || async { (messages(&server).await == 20).then_some(()) })
        .await;
    env.await_delivered(20).await;
}

/// `handoff verify` looks a NATS relay's delivered rows up in JetStream (by sequence, each
/// message's `Nats-Msg-Id` the row's event id), reports a lost stream's messages missing, and
/// `--repair` has the relay publish them again.
#[tokio::test]
async fn verify_finds_a_nats_relays_messages_reports_the_lost_ones_and_repairs_them() {
    let env = common::TestEnv::new().await;
    let server = NatsServer::start().await;
    server.create_audit_stream().await;
    env.insert_events("v", "user", 20).await;
    let config = nats_relay_config(&env, &server);
    let relay = common::process::Handoff::run(&config);
    env.await_delivered(20).await;
    drop(relay);
    let (ok, out) = common::process::run_to_end(&config, &["verify", "--since", "10m"]);
    assert!(ok && out.contains("stream audit.user: 20 checked, 0 trimmed, 0 missing"), "{out}");

    let client = async_nats::connect(server.url()).await.unwrap();
    async_nats::jetstream::new(client).delete_stream("AUDIT").await.unwrap();
    server.create_audit_stream().await;
    let (ok, out) = common::process::run_to_end(&config, &["verify", "--since", "10m"]);
    assert!(!ok && out.contains("20 missing"), "{out}");
    let (ok, out) = common::process::run_to_end(&config, &["verify", "--since", "10m", "--repair"]);
    assert!(ok && out.contains("20 re-driven"), "{out}");
    assert_eq!(env.count("PENDING").await, 20, "the lost rows are due again");
    let _relay = common::process::Handoff::run(&config);
    env.await_delivered(20).await;
    assert_eq!(messages(&server).await, 20);
}

#[tokio::test]
async fn tls_is_verified_against_the_configured_ca_and_a_server_it_cannot_verify_gets_nothing() {
    let pki = common::pki::Pki::new();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let (cert, key) = (path(&pki.server_cert), path(&pki.server_key));
    let server = NatsServer::start_with(&["--tls", "--tlscert", &cert, "--tlskey", &key]).await;
    // The certificate names localhost.
    let url = format!("tls://localhost:{}", server.port);
    let trusted = async_nats::ConnectOptions::new().add_root_certificates(pki.ca.clone());
    common::nats_server::create_audit_stream(trusted.connect(url.as_str()).await.unwrap()).await;

    let mut config = NatsConfig { timeout: TIMEOUT, ..NatsConfig::new(&url, "AUDIT") };
    config.tls.ca_file = Some(pki.ca.clone());
    let verified = NatsStream::connect(&config, "payload").await.unwrap();
    let outcomes = verified.append(&[entry("audit.user", "t-1", None)], &AppendOptions::default()).await;
    assert!(matches!(outcomes[0], AppendOutcome::Appended(_)), "{outcomes:?}");

    config.tls.ca_file = Some(pki.other_ca.clone());
    let unverifiable = NatsStream::connect(&config, "payload").await.unwrap();
    let outcomes = unverifiable.append(&[entry("audit.user", "t-2", None)], &AppendOptions::default()).await;
    assert!(matches!(outcomes[0], AppendOutcome::Unavailable(_)), "nothing sent to an unverified server: {outcomes:?}");
    assert!(unverifiable.ping().await.is_err());

    // By address, the certificate's name does not match, unless `server_name` says which to check.
    let by_address = format!("tls://127.0.0.1:{}", server.port);
    let mut config = NatsConfig { timeout: TIMEOUT, ..NatsConfig::new(&by_address, "AUDIT") };
    config.tls.ca_file = Some(pki.ca.clone());
    let mismatched = NatsStream::connect(&config, "payload").await.unwrap();
    let outcomes = mismatched.append(&[entry("audit.user", "t-3", None)], &AppendOptions::default()).await;
    assert!(matches!(outcomes[0], AppendOutcome::Unavailable(_)), "{outcomes:?}");
    config.tls.server_name = Some("localhost".into());
    let renamed = NatsStream::connect(&config, "payload").await.unwrap();
    let outcomes = renamed.append(&[entry("audit.user", "t-3", None)], &AppendOptions::default()).await;
    assert!(matches!(outcomes[0], AppendOutcome::Appended(_)), "{outcomes:?}");
}

#[tokio::test]
async fn the_token_is_read_from_its_file_and_without_it_the_server_is_unavailable() {
    let server = NatsServer::start_with(&["--auth", "s3cret-token"]).await;
    let admin = async_nats::ConnectOptions::with_token("s3cret-token".into());
    common::nats_server::create_audit_stream(admin.connect(server.url()).await.unwrap()).await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();

    let mut config = NatsConfig { timeout: TIMEOUT, ..NatsConfig::new(&server.url(), "AUDIT") };
    let anonymous = NatsStream::connect(&config, "payload").await.unwrap();
    let outcomes = anonymous.append(&[entry("audit.user", "a-1", None)], &AppendOptions::default()).await;
    assert!(matches!(outcomes[0], AppendOutcome::Unavailable(_)), "{outcomes:?}");

    config.token_file = Some(token_file);
    let authorized = NatsStream::connect(&config, "payload").await.unwrap();
    let outcomes = authorized.append(&[entry("audit.user", "a-1", None)], &AppendOptions::default()).await;
    assert!(matches!(outcomes[0], AppendOutcome::Appended(_)), "{outcomes:?}");

    config.token_file = Some(dir.path().join("missing"));
    let error = NatsStream::connect(&config, "payload").await.err().expect("an unreadable token file is an error");
    assert!(error.to_string().contains("nats.token_file"), "{error}");
}

#[tokio::test]
async fn a_subject_the_relay_may_not_publish_to_is_an_outage_for_its_rows_alone() {
    let dir = tempfile::tempdir().unwrap();
    let server_config = dir.path().join("nats.conf");
    let users = "authorization { users = [ { user: admin, password: a }, { user: relay, password: r, \
                 permissions: { publish: [\"audit.user\", \"$JS.API.>\"], subscribe: [\"_INBOX.>\"] } } ] }\n";
    std::fs::write(&server_config, users).unwrap();
    let server = NatsServer::start_with(&["-c", server_config.to_str().unwrap()]).await;
    let admin = async_nats::ConnectOptions::with_user_and_password("admin".into(), "a".into());
    common::nats_server::create_audit_stream(admin.connect(server.url()).await.unwrap()).await;
    let password_file = dir.path().join("password");
    std::fs::write(&password_file, "r").unwrap();
    let config = NatsConfig {
        timeout: TIMEOUT,
        user: Some("relay".into()),
        password_file: Some(password_file),
        ..NatsConfig::new(&server.url(), "AUDIT")
    };
    let stream = NatsStream::connect(&config, "payload").await.unwrap();
    let batch = [entry("audit.user", "p-1", None), entry("audit.order", "p-2", None), entry("audit.user", "p-3", None)];
    let outcomes = stream.append(&batch, &AppendOptions::default()).await;
    assert!(matches!(outcomes[0], AppendOutcome::Appended(_)), "{outcomes:?}");
    assert!(
        matches!(&outcomes[1], AppendOutcome::Unavailable(e) if e.contains("Permissions Violation")),
        "{outcomes:?}"
    );
    assert!(matches!(outcomes[2], AppendOutcome::Appended(_)), "the connection stays: {outcomes:?}");

    // Without subscribe on _INBOX.> no PubAck could come back: the connection is refused before
    // anything is sent.
    let no_inbox = dir.path().join("no-inbox.conf");
    std::fs::write(&no_inbox, users.replace("\"_INBOX.>\"", "\"audit.>\"")).unwrap();
    let server = NatsServer::start_with(&["-c", no_inbox.to_str().unwrap()]).await;
    let config = NatsConfig { url: server.url(), ..config };
    let stream = NatsStream::connect(&config, "payload").await.unwrap();
    let outcomes = stream.append(&[entry("audit.user", "p-4", None)], &AppendOptions::default()).await;
    assert!(matches!(&outcomes[0], AppendOutcome::Unavailable(e) if e.contains("Subscription")), "{outcomes:?}");
}

#[tokio::test]
async fn an_nkey_seed_and_a_user_password_each_authenticate_and_a_key_the_server_does_not_know_is_unavailable() {
    let key = nkeys::KeyPair::new_user();
    let dir = tempfile::tempdir().unwrap();
    let server_config = dir.path().join("nats.conf");
    let users = format!(
        "authorization {{ users = [ {{ nkey: {} }}, {{ user: relay, password: s3cret }} ] }}\n",
        key.public_key()
    );
    std::fs::write(&server_config, users).unwrap();
    let server = NatsServer::start_with(&["-c", server_config.to_str().unwrap()]).await;
    let admin = async_nats::ConnectOptions::with_user_and_password("relay".into(), "s3cret".into());
    common::nats_server::create_audit_stream(admin.connect(server.url()).await.unwrap()).await;
    let (seed_file, password_file) = (dir.path().join("seed"), dir.path().join("password"));
    std::fs::write(&seed_file, format!("{}\n", key.seed().unwrap())).unwrap();
    std::fs::write(&password_file, "s3cret\n").unwrap();
    let appended = |outcomes: Vec<AppendOutcome>| matches!(outcomes[0], AppendOutcome::Appended(_));

    let base = NatsConfig { timeout: TIMEOUT, ..NatsConfig::new(&server.url(), "AUDIT") };
    let by_key = NatsConfig { nkey_file: Some(seed_file.clone()), ..base.clone() };
    let by_key = NatsStream::connect(&by_key, "payload").await.unwrap();
    let outcomes = by_key.append(&[entry("audit.user", "k-1", None)], &AppendOptions::default()).await;
    assert!(appended(outcomes.clone()), "{outcomes:?}");
    let by_password = NatsConfig { user: Some("relay".into()), password_file: Some(password_file), ..base.clone() };
    let by_password = NatsStream::connect(&by_password, "payload").await.unwrap();
    let outcomes = by_password.append(&[entry("audit.user", "k-2", None)], &AppendOptions::default()).await;
    assert!(appended(outcomes.clone()), "{outcomes:?}");

    let stranger = dir.path().join("stranger");
    std::fs::write(&stranger, nkeys::KeyPair::new_user().seed().unwrap()).unwrap();
    let unknown = NatsStream::connect(&NatsConfig { nkey_file: Some(stranger), ..base.clone() }, "payload").await;
    let outcomes = unknown.unwrap().append(&[entry("audit.user", "k-3", None)], &AppendOptions::default()).await;
    assert!(matches!(&outcomes[0], AppendOutcome::Unavailable(e) if e.contains("Authorization")), "{outcomes:?}");

    std::fs::write(&seed_file, "not a seed").unwrap();
    let error = NatsStream::connect(&NatsConfig { nkey_file: Some(seed_file), ..base }, "payload").await.err();
    assert!(error.expect("a file without a seed is an error").to_string().contains("nats.nkey_file"));
}

#[tokio::test]
async fn check_names_a_missing_stream_and_a_duplicate_window_shorter_than_the_relays_retry_horizon() {
    let env = common::TestEnv::new().await;
    let server = NatsServer::start().await;
    let config = nats_relay_config(&env, &server);
    let (ok, out) = common::process::run_to_end(&config, &["check"]);
    assert!(!ok && out.contains("nats.stream: JetStream stream AUDIT does not exist"), "{out}");

    let client = async_nats::connect(server.url()).await.unwrap();
    let jetstream = async_nats::jetstream::new(client);
    let short = Config {
        name: "AUDIT".into(),
        subjects: vec!["audit.>".into()],
        duplicate_window: Duration::from_secs(5),
        ..Default::default()
    };
    jetstream.create_stream(short).await.unwrap();
    let (ok, out) = common::process::run_to_end(&config, &["check"]);
    assert!(!ok && out.contains("duplicate_window 5s is shorter than relay `relay`'s retry horizon"), "{out}");

    jetstream.delete_stream("AUDIT").await.unwrap();
    server.create_audit_stream().await;
    let (ok, out) = common::process::run_to_end(&config, &["check"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("relay `relay`: JetStream stream AUDIT captures `audit.*`, duplicate window 3600s, R1"),
        "{out}"
    );
}

/// A stream that stores smaller messages than the relay may send (`max_msg_size`): `check` names
/// `entry_max_bytes`, and a row over the stream's limit is the row's fault — retried and made
/// DEAD by its attempts like any refused entry — while the rows around it are published; it is
/// never taken for a broker outage that would hold the whole relay.
#[tokio::test]
async fn a_row_over_the_streams_max_message_size_turns_dead_alone_and_check_names_entry_max_bytes() {
    let env = common::TestEnv::new().await;
    let server = NatsServer::start().await;
    let client = async_nats::connect(server.url()).await.unwrap();
    let small = Config {
        name: "AUDIT".into(),
        subjects: vec!["audit.>".into()],
        duplicate_window: Duration::from_secs(3600),
        max_message_size: 2048,
        ..Default::default()
    };
    async_nats::jetstream::new(client).create_stream(small).await.unwrap();
    let config = nats_relay_config(&env, &server)
        .replace("batch_size = 25\n", "batch_size = 25\nmax_attempts = 2\nbackoff = { initial = \"50ms\", max = \"50ms\", multiplier = 1.0, jitter = 0.0 }\n");
    let (ok, out) = common::process::run_to_end(&config, &["check"]);
    assert!(
        !ok && out
            .contains("relay `relay`.entry_max_bytes: 1048576 is over JetStream stream AUDIT's max_msg_size 2048"),
        "{out}"
    );

    env.insert_events("before", "user", 10).await;
    env.db
        .execute(
            "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers)
             VALUES ('big', 'user', 'u', 'user.changed', jsonb_build_object('blob', repeat('x', 3000)), '{}')",
            &[],
        )
        .await
        .unwrap();
    env.insert_events("after", "user", 10).await;
    let _relay = common::process::Handoff::run(&config);
    env.await_delivered(20).await;
    eventually("the large row DEAD", || async { (env.count("DEAD").await == 1).then_some(()) }).await;
    let error: String =
        env.db.query_one("SELECT last_error FROM audit_outbox WHERE event_id = 'big'", &[]).await.unwrap().get(0);
    assert!(error.contains("stream rejected the entry") && error.contains("maximum"), "{error}");
    assert_eq!(messages(&server).await, 20, "every other row was published");
}

#[tokio::test]
async fn migrate_creates_a_missing_stream_that_check_then_accepts_and_leaves_an_existing_one_alone() {
    let env = common::TestEnv::new().await;
    let server = NatsServer::start().await;
    let config = nats_relay_config(&env, &server);
    let (ok, out) = common::process::run_to_end(&config, &["migrate"]);
    assert!(ok && out.contains("JetStream stream AUDIT (audit.*, duplicate window"), "{out}");
    let (ok, out) = common::process::run_to_end(&config, &["check"]);
    assert!(ok, "{out}");
    let (ok, out) = common::process::run_to_end(&config, &["migrate"]);
    assert!(ok && !out.contains("JetStream stream AUDIT"), "created once: {out}");
}

#[tokio::test]
async fn sequences_handed_out_again_after_a_lost_tail_are_not_taken_for_the_delivered_events() {
    // What a nats-server killed before its store had the last PubAck'd messages leaves: those
    // sequences held by other messages after the restart. Made here by hand: the stream emptied
    // and refilled to the same last sequence with other events, then the server restarted.
    let env = common::TestEnv::new().await;
    let mut server = NatsServer::start().await;
    server.create_audit_stream().await;
    env.insert_events("t", "user", 10).await;
    let _relay = common::process::Handoff::run(&nats_relay_config(&env, &server));
    env.await_delivered(10).await;
    let client = async_nats::connect(server.url()).await.unwrap();
    let jetstream = async_nats::jetstream::new(client);
    jetstream.delete_stream("AUDIT").await.unwrap();
    server.create_audit_stream().await;
    let stream = connect(&server).await;
    let others: Vec<Entry> = (1..=10).map(|i| entry("audit.user", &format!("other-{i}"), None)).collect();
    let outcomes = stream.append(&others, &AppendOptions::default()).await;
    assert_eq!(outcomes.last(), Some(&AppendOutcome::Appended("10".into())), "the same sequences, other events");
    server.stop();
    server.restart().await;
    // The restart makes the relay look its recent deliveries up: each sequence now holds
    // another event, so all ten are published again.
    common::eventually("the ten events published again", || async { (messages(&server).await == 20).then_some(()) })
        .await;
    let client = async_nats::connect(server.url()).await.unwrap();
    let audit = async_nats::jetstream::new(client).get_stream("AUDIT").await.unwrap();
    let mut ids = Vec::new();
    for sequence in 11..=20 {
        let message = audit.get_raw_message(sequence).await.unwrap();
        ids.push(message.headers.get("Nats-Msg-Id").map(|v| v.as_str().to_owned()).unwrap_or_default());
    }
    ids.sort();
    let mut expected: Vec<String> = (1..=10).map(|i| format!("t-{i}")).collect();
    expected.sort();
    assert_eq!(ids, expected);
}
