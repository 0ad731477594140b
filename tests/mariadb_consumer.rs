//! The bridge and worker on MariaDB where their tests are written for it alone: takeover before
//! acknowledgement across two crashes in a row, the poison path, atomicity with the operator
//! commands, the inbox columns `check` reads from the catalog, `max_allowed_packet`. (The worker
//! killed mid-handler and the seed's chain end to end run on both dialects, in `worker.rs` and
//! `end_to_end.rs`.)

use crate::common;

use common::db_env::MARIADB_HANDLER as HANDLER;
use common::eventually;
use common::mysql::MyEnv;
use common::process::Handoff;
use fred::prelude::*;

fn bridge(env: &MyEnv, instance: &str) -> String {
    format!(
        "{}\n[[bridge]]\nname = \"bridge\"\nconsumer = \"admin\"\ninstance = \"{instance}\"\nstreams = [{{ key = \"{}\", owner = \"relay\" }}]\nblock = \"200ms\"\nclaim_idle = \"1s\"\n[bridge.validate]\npayload_id_field = \"auditId\"\n",
        env.base_config(),
        env.stream("user")
    )
}

fn worker(env: &MyEnv, sql: &[&str]) -> String {
    let sql: Vec<String> = sql.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "{}\n[[worker]]\nname = \"worker\"\nconsumer = \"admin\"\npoll_interval = \"50ms\"\nlease = \"2s\"\n[[worker.handler]]\nevent_types = [\"*\"]\nsql = [{}]\n",
        env.base_config(),
        sql.join(", ")
    )
}

async fn add(env: &MyEnv, prefix: &str, n: usize) {
    for i in 1..=n {
        let id = format!("{prefix}-{i}");
        let fields: Vec<(&str, String)> = vec![
            ("event_id", id.clone()),
            ("event_type", "user.changed".into()),
            ("payload", format!(r#"{{"auditId":"{id}","actor":"admin"}}"#)),
            ("owner", "relay".into()),
        ];
        let _: String = env.redis.xadd(env.stream("user"), false, None::<()>, "*", fields).await.unwrap();
    }
}

async fn inbox(env: &MyEnv, status: &str) -> i64 {
    env.scalar(&format!("SELECT COUNT(*) FROM consumer_inbox WHERE status = '{status}'")).await
}

async fn pending_entries(env: &MyEnv) -> Option<u64> {
    let reply: Value = env
        .redis
        .custom(
            fred::types::CustomCommand::new_static("XPENDING", fred::types::ClusterHash::FirstKey, false),
            vec![env.stream("user"), "admin".to_owned()],
        )
        .await
        .ok()?;
    match reply {
        Value::Array(parts) => parts.first().and_then(|v| v.as_u64()),
        _ => None,
    }
}

async fn await_acknowledged(env: &MyEnv) {
    eventually("every entry acknowledged", || async {
        common::group_caught_up(&env.redis, &env.stream("user"), "admin").await.then_some(())
    })
    .await;
}

#[tokio::test]
async fn crashes_before_and_after_the_commit_still_give_one_inbox_row_per_event() {
    let env = MyEnv::new().await;
    add(&env, "c", 30).await;
    let mut before_commit = Handoff::run_paused(&bridge(&env, "b1"), "bridge_before_commit");
    before_commit.await_paused().await;
    before_commit.kill();
    assert_eq!(inbox(&env, "PENDING").await, 0);
    let mut before_ack = Handoff::run_paused(&bridge(&env, "b1"), "bridge_before_ack");
    before_ack.await_paused().await;
    before_ack.kill();
    // The restarted instance reads its own pending entries a few at a time (one, then two, …):
    // what it committed before the crash is not acknowledged.
    assert!(inbox(&env, "PENDING").await >= 1, "committed");
    assert!(pending_entries(&env).await.is_some_and(|n| n >= 1), "not acknowledged");
    let _bridge = Handoff::run(&bridge(&env, "b1"));
    await_acknowledged(&env).await;
    assert_eq!(inbox(&env, "PENDING").await, 30, "one row per event");
}

#[tokio::test]
async fn malformed_entries_go_to_poison_with_their_reason() {
    let env = MyEnv::new().await;
    add(&env, "ok", 2).await;
    for fields in [
        vec![("event_type", "user.changed".to_owned()), ("payload", "{}".into()), ("owner", "relay".into())],
        vec![
            ("event_id", "x".into()),
            ("event_type", "user.changed".into()),
            ("payload", "[1]".into()),
            ("owner", "relay".into()),
        ],
        vec![
            ("event_id", "y".into()),
            ("event_type", "user.changed".into()),
            ("payload", r#"{"auditId":"z"}"#.into()),
            ("owner", "relay".into()),
        ],
        vec![
            ("event_id", "w".into()),
            ("event_type", "user.changed".into()),
            ("payload", r#"{"auditId":"w"}"#.into()),
            ("owner", "mallory".into()),
        ],
    ] {
        let _: String = env.redis.xadd(env.stream("user"), false, None::<()>, "*", fields).await.unwrap();
    }
    let _bridge = Handoff::run(&bridge(&env, "b1"));
    // (Zero pending also holds before the bridge read anything: wait for what it does first.)
    eventually("two events taken over and four entries poisoned", || async {
        let poisoned = env.scalar("SELECT COUNT(*) FROM consumer_inbox_poison").await;
        (inbox(&env, "PENDING").await == 2 && poisoned == 4).then_some(())
    })
    .await;
    await_acknowledged(&env).await;
    let reasons: Vec<String> = env.rows("SELECT reason FROM consumer_inbox_poison ORDER BY id").await;
    assert_eq!(reasons, ["missing_field", "invalid_payload", "id_mismatch", "owner_mismatch"]);

    // The operator commands read and re-drive MariaDB's poison table too.
    let config = bridge(&env, "b1");
    let (ok, out) = common::process::run_to_end(&config, &["poison", "list", "--json", "--reason", "owner_mismatch"]);
    assert!(ok, "{out}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((doc["count"].as_u64(), doc["rows"][0]["event_id"].as_str()), (Some(1), Some("w")), "{doc}");
    let (ok, out) = common::process::run_to_end(&config, &["poison", "retry", "--event-id", "w"]);
    assert!(ok && out.contains("re-appended: 1 record(s)"), "{out}");
    // The cause is still there (the owner is wrong), so the re-appended entry is poisoned again.
    eventually("the re-appended entry recorded again", || async {
        (env.scalar("SELECT COUNT(*) FROM consumer_inbox_poison WHERE event_id = 'w'").await == 2).then_some(())
    })
    .await;
    let redrives: Vec<i64> =
        env.rows("SELECT redrives FROM consumer_inbox_poison WHERE event_id = 'w' ORDER BY id").await;
    assert_eq!(redrives, [1, 0], "the first record counts its re-drive");
}

async fn insert_inbox(env: &MyEnv, id: &str) {
    env.exec(&format!(
        "INSERT INTO consumer_inbox (consumer, event_id, event_type, owner, payload, content_hash, stream, stream_entry_id)
         VALUES ('admin', '{id}', 'auth.mfa_policy_changed', 'auth', JSON_OBJECT('actor', 'admin'), 'h', 's', '0-1')"
    ))
    .await;
}

#[tokio::test]
async fn effect_and_processed_commit_together_or_not_at_all() {
    let env = MyEnv::new().await;
    insert_inbox(&env, "z-1").await;
    insert_inbox(&env, "z-2").await;
    // The second statement fails for every row (a NOT NULL column): a data error, DEAD at once,
    // and the first statement's effect is rolled back with it.
    let failing = "INSERT INTO audit_logs (audit_id, source, action) VALUES (NULL, 'x', 'y')";
    let _worker = Handoff::run(&worker(&env, &[HANDLER, failing]));
    eventually("both rows DEAD", || async { (inbox(&env, "DEAD").await == 2).then_some(()) }).await;
    assert_eq!(env.scalar("SELECT COUNT(*) FROM audit_logs").await, 0);
    assert_eq!(env.scalar("SELECT MAX(attempts) FROM consumer_inbox").await, 1);

    // The operator commands see them on MariaDB too; a fixed handler applies them after a retry.
    let config = worker(&env, &[HANDLER]);
    let (ok, out) = common::process::run_to_end(&config, &["status", "--json"]);
    assert!(ok, "{out}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    let line = status.as_array().unwrap().iter().find(|l| l["component"] == "worker worker").unwrap();
    assert_eq!((line["dead"].as_i64(), line["pending"].as_i64()), (Some(2), Some(0)), "{status}");
    let (ok, out) = common::process::run_to_end(&config, &["dead", "retry", "--worker", "worker"]);
    assert!(ok && out.contains("re-driven: 2 row(s)"), "{out}");
}

/// MariaDB's PREPARE does not check an `INSERT … SELECT` column list, so `check` reads the
/// inbox's columns from the catalog and names the one missing.
#[tokio::test]
async fn check_names_an_inbox_column_the_takeover_needs() {
    let env = MyEnv::new().await;
    env.exec("ALTER TABLE consumer_inbox DROP COLUMN headers").await;
    let (ok, out) = common::process::run_to_end(&bridge(&env, "b1"), &["check"]);
    assert!(!ok && out.contains("table consumer_inbox lacks column(s) headers"), "{out}");
}

/// A value larger than the server's `max_allowed_packet` (the client learns it when it connects
/// and refuses to send more; here set lower in the URL) is that entry's data fault: the entry
/// goes to poison and the rest of its batch goes in, instead of the stream waiting for ever.
#[tokio::test]
async fn a_payload_over_max_allowed_packet_is_poison_and_its_neighbours_go_in() {
    let env = MyEnv::new().await;
    add(&env, "small", 3).await;
    let id = "big-1";
    let blob = "x".repeat(2 << 20);
    let fields: Vec<(&str, String)> = vec![
        ("event_id", id.into()),
        ("event_type", "user.changed".into()),
        ("payload", format!(r#"{{"auditId":"{id}","blob":"{blob}"}}"#)),
        ("owner", "relay".into()),
    ];
    let _: String = env.redis.xadd(env.stream("user"), false, None::<()>, "*", fields).await.unwrap();
    add(&env, "after", 3).await;
    let config = bridge(&env, "b1")
        .replace(&env.database_url, &format!("{}?max_allowed_packet=1048576", env.database_url))
        .replace("[bridge.validate]\n", "[bridge.validate]\npayload_max_bytes = 4194304\n");
    let _bridge = Handoff::run(&config);
    eventually("the neighbours taken over", || async { (inbox(&env, "PENDING").await == 6).then_some(()) }).await;
    await_acknowledged(&env).await;
    let poison: Vec<(String, Option<String>)> = env.rows("SELECT reason, event_id FROM consumer_inbox_poison").await;
    assert_eq!(poison, vec![("rejected_by_database".to_owned(), Some(id.to_owned()))]);
    let _: i64 = env.redis.del(env.stream("user")).await.unwrap();
}
