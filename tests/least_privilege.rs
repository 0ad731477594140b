//! Each component under a database user made from `handoff grants` alone: the relay, the bridge
//! and the worker of one chain deliver and apply every event, and a user holds nothing of the
//! other side's tables.

use crate::common;

use common::process::{Handoff, run_to_end};
use common::{TestEnv, eventually};

/// A login role granted exactly what `handoff grants --role <role>` prints for `config` (and
/// `extra`), and `config` connecting as it.
async fn as_granted_user(env: &TestEnv, config: &str, role: &str, extra: &[&str]) -> (String, String) {
    let user = format!("{}_{role}", env.id);
    env.db.batch_execute(&format!("CREATE ROLE {user} LOGIN")).await.unwrap();
    let (ok, out) = run_to_end(config, &["grants", "--role", role, "--user", &user, "--schema", &env.schema]);
    assert!(ok, "{out}");
    let grants: Vec<&str> = out.lines().filter(|l| l.starts_with("GRANT ")).collect();
    assert!(!grants.is_empty(), "{out}");
    for statement in grants.iter().chain(extra) {
        env.db.batch_execute(&statement.replace("$USER", &user)).await.unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    assert!(env.database_url.contains("://postgres@"), "{}", env.database_url);
    (user.clone(), config.replace("://postgres@", &format!("://{user}@")))
}

#[tokio::test]
async fn the_chain_delivers_with_each_component_holding_only_its_printed_grants() {
    let env = TestEnv::new().await;
    let relay = env.config("");
    let bridge = env.bridge_config("b1", &["user"], "");
    let worker = format!("{}{}", env.base_config(), TestEnv::worker_section(""));
    let (relay_user, relay) = as_granted_user(&env, &relay, "relay", &[]).await;
    let (_, bridge) = as_granted_user(&env, &bridge, "bridge", &[]).await;
    // The handler writes audit_logs with ON CONFLICT (audit_id): it needs to read the key too.
    let handler = "GRANT SELECT, INSERT ON audit_logs TO $USER";
    let (worker_user, worker) = as_granted_user(&env, &worker, "worker", &[handler]).await;

    for config in [&relay, &bridge, &worker] {
        let (ok, out) = run_to_end(config, &["check"]);
        assert!(ok, "check passes with the printed grants alone:\n{out}");
    }
    let _processes = [Handoff::run(&relay), Handoff::run(&bridge), Handoff::run(&worker)];
    env.insert_events("p", "user", 20).await;
    eventually("every event applied", || async { (env.inbox_count("PROCESSED").await == 20).then_some(()) }).await;
    assert_eq!(env.scalar_i64("SELECT count(*) FROM audit_logs").await, 20);

    // Nothing of the other side: the relay's user cannot read the inbox, the worker's the outbox.
    for (user, table) in [(&relay_user, "consumer_inbox"), (&worker_user, "audit_outbox")] {
        let url = env.database_url.replace("://postgres@", &format!("://{user}@"));
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        let refused = client.query(&format!("SELECT 1 FROM {table} LIMIT 1"), &[]).await.unwrap_err();
        assert_eq!(refused.code(), Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE), "{user} on {table}");
    }
}
