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
