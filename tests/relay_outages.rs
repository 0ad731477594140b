//! Outages are not the row's fault: no attempts burned, nothing DEAD, delivery resumes by itself.
//! The scenario under `on_both_dialects!` runs on Postgres and on MariaDB; dropped broker
//! connections on Redis and on NATS JetStream.

use crate::common;

use common::brokers::{Broker, Chain};
use common::db_env::{DbEnv, Dialect};
use common::process::Handoff;
use common::redis_server::RedisServer;
use common::{TestEnv, eventually};

async fn redis_outage_burns_no_attempts_and_delivery_resumes(dialect: Dialect) {
    let mut redis = RedisServer::start().await;
    let env = DbEnv::with_redis(dialect, &redis.url()).await;
    env.insert_events("before", "user", 100).await;
    let relay = Handoff::run(&env.config("max_attempts = 2"));
    env.await_delivered(100).await;

    redis.stop();
    env.insert_events("during", "user", 300).await;
    relay.await_log("stream unavailable; releasing rows").await;
    eventually("the claimed rows to be handed back", || async {
        (env.count("PENDING").await == 300 && env.count("IN_FLIGHT").await == 0).then_some(())
    })
    .await;
    assert_eq!(env.count("DEAD").await, 0);
    assert_eq!(env.scalar("SELECT COALESCE(MAX(attempts), 0) FROM audit_outbox").await, 0);

    redis.restart().await;
    env.await_delivered(400).await;
    assert_eq!(env.count("DEAD").await, 0);
    assert_eq!(env.scalar("SELECT COALESCE(MAX(attempts), 0) FROM audit_outbox").await, 0);
    let ids = env.stream_event_ids(&env.stream("user")).await;
    for i in 1..=300 {
        assert!(ids.contains(&format!("during-{i}")), "during-{i} reached the restarted Redis");
    }
}

crate::on_both_dialects!(redis_outage_burns_no_attempts_and_delivery_resumes);

#[tokio::test]
async fn dropped_database_connections_are_replaced() {
    let env = TestEnv::new().await;
    env.insert_events("a", "user", 100).await;
    let relay = Handoff::run(&env.config(""));
    env.await_delivered(100).await;

    let terminated = env
        .scalar_i64(&format!(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = 'handoff-{}' AND pid <> pg_backend_pid()) t",
            env.id
        ))
        .await;
    assert!(terminated > 0, "the relay's connections were found and cut");
    env.insert_events("b", "user", 100).await;
    env.await_delivered(200).await;
    assert_eq!(env.count("DEAD").await, 0);
    assert_eq!(env.scalar_i64("SELECT coalesce(max(attempts), 0)::int8 FROM audit_outbox").await, 0);
    drop(relay);
}

/// Every connection the relay holds to the broker, its idle append connections among them, cut
/// (as an idle timeout or a proxy would): the next batch must not count as an outage.
async fn dropped_broker_connections_are_replaced_without_releasing_rows(chain: Chain) {
    let env = &chain.env;
    env.insert_events("a", "user", 100).await;
    let relay = Handoff::run(&chain.relay_config("", ""));
    env.await_delivered(100).await;

    chain.cut_connections();
    if matches!(chain.broker, Broker::Nats(_)) {
        relay.await_log("nats connection lost").await;
    }
    env.insert_events("b", "user", 100).await;
    env.await_delivered(200).await;
    assert!(!relay.logs().contains("stream unavailable"), "no batch was released: {}", relay.logs());
    assert_eq!(chain.stream_event_ids().await.len(), 200);
}

mod dropped_broker_connections_are_replaced_without_releasing_rows {
    use super::Chain;

    #[tokio::test]
    async fn redis() {
        super::dropped_broker_connections_are_replaced_without_releasing_rows(Chain::redis().await).await
    }

    #[tokio::test]
    async fn nats() {
        super::dropped_broker_connections_are_replaced_without_releasing_rows(Chain::nats_via_proxy().await).await
    }
}

/// The sum of `family`'s samples whose labels include `label` (e.g. `kind="permission"`).
fn sum_of(metrics: &str, family: &str, label: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with(&format!("{family}{{")) && line.contains(label))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A database that refuses the relay's statements for reasons not of the rows — a role without
/// the UPDATE privilege on the outbox (42501), then sessions that are read-only (25006) — is an
/// outage: every row stays PENDING with no attempt counted and nothing DEAD, each refusal is
/// counted by its kind, and delivery resumes once the role may write again.
#[tokio::test]
async fn a_database_refusing_a_privilege_or_writes_burns_no_attempts() {
    let env = TestEnv::new().await;
    env.insert_events("p", "user", 20).await;
    let role = format!("handoff_limited_{}", env.id);
    env.db
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN;
             GRANT USAGE, CREATE ON SCHEMA {schema} TO {role};
             GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {role};
             GRANT ALL ON ALL SEQUENCES IN SCHEMA {schema} TO {role};
             REVOKE UPDATE ON audit_outbox FROM {role};",
            schema = env.schema
        ))
        .await
        .unwrap();
    let url = env.database_url.replacen("://postgres@", &format!("://{role}@"), 1);
    assert_ne!(url, env.database_url, "the test database URL names user postgres");
    let backoff = "outage_backoff = { initial = \"50ms\", max = \"200ms\", multiplier = 2.0, jitter = 0.0 }";
    let config = env.config(&format!("max_attempts = 2\n{backoff}")).replace(&env.database_url, &url);
    let relay = Handoff::run(&config);
    let address = relay.telemetry_address().await;
    let family = "handoff_relay_statement_failures_total";
    let refused = |kind: &'static str| {
        let address = address.clone();
        async move {
            eventually(&format!("the relay's statements refused ({kind}) twice"), || async {
                let metrics = common::http::get(&address, "/metrics").1;
                (sum_of(&metrics, family, &format!("kind=\"{kind}\"")) >= 2.0).then_some(())
            })
            .await
        }
    };
    let untouched = || async {
        assert_eq!(env.count("PENDING").await, 20, "every row stays pending");
        assert_eq!(env.scalar_i64("SELECT coalesce(max(attempts), 0)::int8 FROM audit_outbox").await, 0);
    };
    refused("permission").await;
    untouched().await;
    // Every new session read-only, the relay's sessions cut (so each it opens is), and only then
    // the privilege back: no session can write in between.
    let cut = format!(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = '{role}' AND pid <> pg_backend_pid()"
    );
    env.db.batch_execute(&format!("ALTER ROLE {role} SET default_transaction_read_only = on")).await.unwrap();
    env.scalar_i64(&cut).await;
    env.db.batch_execute(&format!("GRANT UPDATE ON audit_outbox TO {role}")).await.unwrap();
    refused("read_only").await;
    untouched().await;
    env.db.batch_execute(&format!("ALTER ROLE {role} RESET default_transaction_read_only")).await.unwrap();
    env.scalar_i64(&cut).await;
    env.await_delivered(20).await;
    assert_eq!(env.count("DEAD").await, 0);
    assert_eq!(env.scalar_i64("SELECT coalesce(max(attempts), 0)::int8 FROM audit_outbox").await, 0);
    drop(relay);
    // Roles outlive the test's schema; one left behind by a failed run is harmless.
    let _ = env.db.batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}")).await;
}
