//! Each component under a database user made from `handoff grants` alone, on Postgres and on
//! MariaDB: the relay, the bridge and the worker of one chain deliver and apply every event, and
//! a user holds nothing of the other side's tables. The operator commands (which the admin API
//! runs too), `reshard` included, work with `--role operator`'s grants alone (`bridge rewind` on
//! Redis touches no table; on NATS it reads the pauses: tests/nats_bridge.rs runs it as the
//! operator's user).

use mysql_async::prelude::Queryable;

use crate::common;

use common::db_env::MARIADB_HANDLER;
use common::mysql::MyEnv;
use common::process::{Handoff, run_to_end};
use common::{TestEnv, eventually};

/// A login role granted exactly what `handoff grants --role <role>` prints for `config` (and
/// `extra`), and `config` connecting as it.
pub(crate) async fn as_granted_user(env: &TestEnv, config: &str, role: &str, extra: &[&str]) -> (String, String) {
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

/// A MariaDB user granted exactly what `handoff grants --role <role>` prints for `config` (and
/// `extra`), and `config` connecting as it. The printed grants name `'user'@'%'`; the user is
/// made for `localhost` too, where a server's anonymous `''@'localhost'` (MariaDB's installer
/// makes one) would otherwise match a local connection first.
async fn as_granted_mariadb_user(env: &MyEnv, config: &str, role: &str, extra: &[&str]) -> (String, String) {
    let user = format!("{}_{role}", env.id);
    let (ok, out) = run_to_end(config, &["grants", "--role", role, "--user", &user]);
    assert!(ok, "{out}");
    let grants: Vec<String> = out.lines().filter(|l| l.starts_with("GRANT ")).map(str::to_owned).collect();
    assert!(!grants.is_empty() && grants.iter().all(|g| g.ends_with(&format!("TO '{user}'@'%';"))), "{out}");
    let extra = extra.iter().map(|g| g.replace("$USER", &format!("'{user}'@'%'")));
    let mut admin = env.db.get_conn().await.unwrap();
    for host in ["%", "localhost"] {
        admin.query_drop(format!("CREATE USER '{user}'@'{host}'")).await.unwrap();
        for statement in grants.iter().cloned().chain(extra.clone()) {
            let statement = statement.replace("'@'%'", &format!("'@'{host}'"));
            admin.query_drop(&statement).await.unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
    }
    assert!(env.database_url.contains("://root@"), "{}", env.database_url);
    (user.clone(), config.replace("://root@", &format!("://{user}@")))
}

/// Every operator command that writes, with what it acts on: a relay with a DEAD row, a
/// bridge's poison table, a worker's inbox. Each must succeed as the operator's user.
fn operator_commands(stream: &str) -> Vec<Vec<String>> {
    let commands: [&[&str]; 8] = [
        &["pause", "--relay", "relay", "--reason", "least privilege"],
        &["resume", "--relay", "relay"],
        &["dead", "retry", "--relay", "relay"],
        &["dead", "purge", "--worker", "worker"],
        &["poison", "retry", "--bridge", "bridge"],
        &["replay", "--relay", "relay", "--since", "1h", "--to-stream", stream],
        &["inbox", "reprocess", "--worker", "worker", "--since", "1h"],
        &["verify", "--relay", "relay", "--since", "1h"],
    ];
    commands.iter().map(|c| c.iter().map(|a| a.to_string()).collect()).collect()
}

/// A config with a relay, a bridge and a worker, for the operator commands.
fn operator_config(relay: &str, id: &str, worker_section: &str) -> String {
    format!("{}{worker_section}", common::bridge_config(relay, id, "b1", &["user"], ""))
}

#[tokio::test]
async fn the_operator_commands_run_with_the_operator_grants_alone() {
    let env = TestEnv::new().await;
    env.insert_events("o", "user", 3).await;
    env.db
        .batch_execute("UPDATE audit_outbox SET status = 'DEAD', dead_at = now() WHERE event_id = 'o-1'")
        .await
        .unwrap();
    let config = operator_config(&env.config(""), &env.id, &TestEnv::worker_section(""));
    let (user, config) = as_granted_user(&env, &config, "operator", &[]).await;
    for command in operator_commands(&format!("{}:replayed", env.id)) {
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        let (ok, out) = run_to_end(&config, &args);
        assert!(ok, "{command:?} as the operator's user:\n{out}");
    }
    assert_eq!(env.scalar_i64("SELECT count(*) FROM audit_outbox WHERE status = 'DEAD'").await, 0, "dead retry ran");

    // Nothing more: no new outbox rows, no bridge bookkeeping.
    let url = env.database_url.replace("://postgres@", &format!("://{user}@"));
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let denied = tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE;
    let insert = "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
                  VALUES ('x', 'user', 'a', 't', '{}')";
    for sql in [insert, "SELECT 1 FROM consumer_inbox_deliveries LIMIT 1"] {
        let refused = client.batch_execute(&format!("SET search_path = {}; {sql}", env.schema)).await.unwrap_err();
        assert_eq!(refused.code(), Some(&denied), "{sql}: {refused}");
    }

    // The admin API runs these commands as the service's user: with [admin], the grants printed
    // without --role include the operator's.
    let token = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token.path(), "a-write-token-of-32-characters-x").unwrap();
    let admin = format!(
        "{}\n[admin]\nlisten = \"127.0.0.1:0\"\n[[admin.token]]\nname = \"ops\"\nscope = \"write\"\ntoken_file = \"{}\"\n",
        env.config(""),
        token.path().display()
    );
    let (ok, out) = run_to_end(&admin, &["grants", "--user", "svc", "--schema", &env.schema]);
    assert!(ok && out.contains("GRANT SELECT, INSERT, UPDATE ON \"handoff_replays\""), "{out}");
}

#[tokio::test]
async fn on_mariadb_the_operator_commands_run_with_the_operator_grants_alone() {
    let env = MyEnv::new().await;
    let _users = Users(env.id.clone(), &["operator"]);
    env.insert_events("o", "user", 3).await;
    env.exec("UPDATE audit_outbox SET status = 'DEAD', dead_at = NOW(3) WHERE event_id = 'o-1'").await;
    let worker = common::worker_section_with("", MARIADB_HANDLER);
    let config = operator_config(&env.config(""), &env.id, &worker);
    let (user, config) = as_granted_mariadb_user(&env, &config, "operator", &[]).await;
    for command in operator_commands(&format!("{}:replayed", env.id)) {
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        let (ok, out) = run_to_end(&config, &args);
        assert!(ok, "{command:?} as the operator's user:\n{out}");
    }
    assert_eq!(env.count("DEAD").await, 0, "dead retry ran");

    let pool = mysql_async::Pool::new(env.database_url.replace("://root@", &format!("://{user}@")).as_str());
    let mut conn = pool.get_conn().await.unwrap();
    let insert = "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
                  VALUES ('x', 'user', 'a', 't', '{}')";
    for sql in [insert, "SELECT 1 FROM consumer_inbox_deliveries LIMIT 1"] {
        let refused = conn.query_drop(sql).await;
        // ER_TABLEACCESS_DENIED_ERROR
        assert!(matches!(&refused, Err(mysql_async::Error::Server(e)) if e.code == 1142), "{sql}: {refused:?}");
    }
    drop(conn);
    pool.disconnect().await.unwrap();
}

/// Drops a test's MariaDB users however the test ends (users are the server's, not the test
/// database's, so dropping the database leaves them).
struct Users(String, &'static [&'static str]);

impl Drop for Users {
    fn drop(&mut self) {
        let (id, roles) = (self.0.clone(), self.1);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        std::thread::spawn(move || {
            runtime.block_on(async move {
                let admin = mysql_async::Pool::new(common::mysql::base_mysql_url().as_str());
                if let Ok(mut conn) = admin.get_conn().await {
                    for role in roles {
                        let drop = format!("DROP USER IF EXISTS '{id}_{role}'@'%', '{id}_{role}'@'localhost'");
                        let _ = conn.query_drop(drop).await;
                    }
                }
            })
        })
        .join()
        .ok();
    }
}

#[tokio::test]
async fn on_mariadb_too_each_component_needs_only_its_printed_grants() {
    let env = MyEnv::new().await;
    let _users = Users(env.id.clone(), &["relay", "bridge", "worker"]);
    let relay = env.config("");
    let bridge = common::bridge_config(&env.base_config(), &env.id, "b1", &["user"], "");
    let worker = format!("{}{}", env.base_config(), common::worker_section_with("", MARIADB_HANDLER));
    let users = async |config: &str, role: &str, extra: &[&str]| {
        let (user, config) = as_granted_mariadb_user(&env, config, role, extra).await;
        let (ok, out) = run_to_end(&config, &["check"]);
        assert!(ok, "{role}: check passes with the printed grants alone:\n{out}");
        (user, config)
    };
    let (relay_user, relay) = users(&relay, "relay", &[]).await;
    let (_, bridge) = users(&bridge, "bridge", &[]).await;
    // The handler inserts into audit_logs with ON DUPLICATE KEY UPDATE: UPDATE too.
    let (worker_user, worker) =
        users(&worker, "worker", &["GRANT SELECT, INSERT, UPDATE ON audit_logs TO $USER"]).await;

    let _processes = [Handoff::run(&relay), Handoff::run(&bridge), Handoff::run(&worker)];
    env.insert_events("p", "user", 20).await;
    eventually("every event applied", || async {
        (env.scalar("SELECT COUNT(*) FROM consumer_inbox WHERE status = 'PROCESSED'").await == 20).then_some(())
    })
    .await;
    assert_eq!(env.scalar("SELECT COUNT(*) FROM audit_logs").await, 20);

    // Nothing of the other side: the relay's user cannot read the inbox, the worker's the outbox.
    for (user, table) in [(&relay_user, "consumer_inbox"), (&worker_user, "audit_outbox")] {
        let url = env.database_url.replace("://root@", &format!("://{user}@"));
        let pool = mysql_async::Pool::new(url.as_str());
        let refused = pool.get_conn().await.unwrap().query_drop(format!("SELECT 1 FROM {table} LIMIT 1")).await;
        // ER_TABLEACCESS_DENIED_ERROR
        assert!(
            matches!(&refused, Err(mysql_async::Error::Server(e)) if e.code == 1142),
            "{user} on {table}: {refused:?}"
        );
        pool.disconnect().await.unwrap();
    }
}

/// `reshard` records a new shard count for a drained relay: with the operator's grants alone
/// (`UPDATE` on `handoff_stream_shards`). The count was first recorded by a relay as the owner.
#[tokio::test]
async fn reshard_runs_with_the_operator_grants_alone() {
    let env = TestEnv::new().await;
    let sharded = |shards: u32| {
        env.config(&format!("stream = \"{}:{{aggregate_type}}:{{shard(aggregate_id, {shards})}}\"\n", env.id))
    };
    env.insert_events("r", "user", 5).await;
    let mut relay = Handoff::run(&sharded(4));
    env.await_delivered(5).await;
    relay.kill();
    let (_, config) = as_granted_user(&env, &sharded(8), "operator", &[]).await;
    let (ok, out) = run_to_end(&config, &["reshard", "--relay", "relay"]);
    assert!(ok && out.contains("8 shards recorded (was 4)"), "{out}");
}

#[tokio::test]
async fn on_mariadb_reshard_runs_with_the_operator_grants_alone() {
    let env = MyEnv::new().await;
    let _users = Users(env.id.clone(), &["operator"]);
    let sharded = |shards: u32| {
        env.config(&format!("stream = \"{}:{{aggregate_type}}:{{shard(aggregate_id, {shards})}}\"\n", env.id))
    };
    env.insert_events("r", "user", 5).await;
    let mut relay = Handoff::run(&sharded(4));
    env.await_delivered(5).await;
    relay.kill();
    let (_, config) = as_granted_mariadb_user(&env, &sharded(8), "operator", &[]).await;
    let (ok, out) = run_to_end(&config, &["reshard", "--relay", "relay"]);
    assert!(ok && out.contains("8 shards recorded (was 4)"), "{out}");
}

/// The Redis users the deployment reference documents (its `ACL SETUSER` lines), for this test:
/// named after it, on its streams' keys. Returns the URL to connect as each role's user.
async fn documented_redis_users(env: &TestEnv) -> Vec<(String, String)> {
    let page = include_str!("../docs/reference/deployment.md");
    let mut users = Vec::new();
    for line in page.lines().filter(|l| l.starts_with("ACL SETUSER handoff-")) {
        let role = line.split_whitespace().nth(2).unwrap().trim_start_matches("handoff-").to_owned();
        let user = format!("{}-{role}", env.id);
        let password = format!("{}-secret", env.id);
        let rules = line
            .replacen(&format!("handoff-{role}"), &user, 1)
            .replace(&format!(">{}_PASSWORD", role.to_uppercase()), &format!(">{password}"))
            .replace("~audit:*", &format!("~{}:*", env.id));
        let args: Vec<String> = rules.split_whitespace().skip(1).map(str::to_owned).collect();
        let command = fred::types::CustomCommand::new_static("ACL", fred::types::ClusterHash::Random, false);
        let _: fred::types::Value = fred::interfaces::ClientLike::custom(&env.redis, command, args).await.unwrap();
        let url = env.redis_url.replacen("redis://", &format!("redis://{user}:{password}@"), 1);
        assert_ne!(url, env.redis_url, "the test's Redis URL takes a user");
        users.push((role, url));
    }
    assert_eq!(users.len(), 2, "the reference documents a relay user and a bridge user: {users:?}");
    users
}

/// What Redis refused the test's users (`ACL LOG`), as text.
async fn acl_denials(env: &TestEnv) -> Vec<String> {
    let command = fred::types::CustomCommand::new_static("ACL", fred::types::ClusterHash::Random, false);
    let log: fred::types::Value =
        fred::interfaces::ClientLike::custom(&env.redis, command, vec!["LOG", "128"]).await.unwrap();
    let fred::types::Value::Array(entries) = log else { return Vec::new() };
    let mut denied = Vec::new();
    for entry in entries {
        let fred::types::Value::Array(fields) = entry else { continue };
        let text: Vec<String> = fields.iter().map(|v| v.as_string().unwrap_or_default()).collect();
        let field = |name: &str| text.iter().position(|t| t == name).and_then(|i| text.get(i + 1)).cloned();
        let (Some(user), Some(object)) = (field("username"), field("object")) else { continue };
        // `check` asks CONFIG GET save and says, when refused, that it cannot tell (documented).
        if user.starts_with(&env.id) && object != "config|get" {
            denied.push(format!("{user}: {object}"));
        }
    }
    denied
}

#[tokio::test]
async fn the_relay_and_the_bridge_run_as_the_documented_redis_users() {
    let env = TestEnv::new().await;
    let users = documented_redis_users(&env).await;
    let url_of = |role: &str| users.iter().find(|(r, _)| r == role).unwrap().1.clone();
    let as_user = |config: String, role: &str| config.replacen(&env.redis_url, &url_of(role), 1);
    // The trim and the loss check run often, so that their commands run too.
    let relay = as_user(
        env.config("[relay.trim]\nacknowledged = true\ninterval = \"100ms\"\n[relay.broker_loss]\ncheck_interval = \"100ms\"\n"),
        "relay",
    );
    let bridge = as_user(env.bridge_config("b1", &["user"], ""), "bridge");
    for config in [&relay, &bridge] {
        let (ok, out) = run_to_end(config, &["check"]);
        assert!(ok, "check passes as the documented user:\n{out}");
    }
    let relay = Handoff::run(&relay);
    let _bridge_process = Handoff::run(&bridge);
    env.insert_events("r", "user", 20).await;
    eventually("every event in the inbox", || async { (env.inbox_count("PENDING").await == 20).then_some(()) }).await;
    // Two passes that began after the group existed: each read the group (XINFO GROUPS) and
    // trimmed (XTRIM).
    let passes = || relay.logs().matches("trimmed below what every group acknowledged").count();
    let before = passes();
    eventually("two trim passes after the group acknowledged", || async { (passes() >= before + 2).then_some(()) })
        .await;
    // The operator's rewind runs as the bridge's user (XGROUP SETID, TIME for `--to 1h`).
    let (ok, out) = run_to_end(&bridge, &["bridge", "rewind", "--bridge", "bridge", "--to", "1h"]);
    assert!(ok, "rewind as the bridge's user:\n{out}");
    assert_eq!(acl_denials(&env).await, Vec::<String>::new(), "Redis refused nothing the users asked");
    for (role, _) in &users {
        let command = fred::types::CustomCommand::new_static("ACL", fred::types::ClusterHash::Random, false);
        let _: fred::types::Value = fred::interfaces::ClientLike::custom(
            &env.redis,
            command,
            vec!["DELUSER".to_owned(), format!("{}-{role}", env.id)],
        )
        .await
        .unwrap();
    }
}
