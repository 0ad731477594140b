//! `/metrics` figures move with the events, `/readyz` follows the broker, `/healthz` stays up.

use crate::common;

use common::http::{get, sample};
use common::process::Handoff;
use common::redis_server::RedisServer;
use common::{TestEnv, eventually};
use fred::prelude::*;

async fn scrape_until(address: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
    eventually(what, || async {
        let (status, body) = get(address, "/metrics");
        (status == 200 && check(&body)).then_some(body)
    })
    .await
}

fn value(metrics: &str, series: &str) -> f64 {
    sample(metrics, series).unwrap_or_else(|| panic!("{series} missing from:\n{metrics}"))
}

#[tokio::test]
async fn metrics_follow_the_events() {
    let env = TestEnv::new().await;
    let _: () = env.redis.set(env.stream("bad"), "not a stream", None, None, false).await.unwrap();
    env.insert_events("a", "user", 30).await;
    let relay = Handoff::run_paused(&env.config("max_attempts = 1"), "before_append");
    let address = relay.telemetry_address().await;
    relay.await_paused().await;

    // Parked with 30 rows claimed: nothing published, the backlog is visible and ageing.
    let parked = scrape_until(&address, "in-flight rows sampled", |m| {
        sample(m, r#"handoff_relay_in_flight_rows{relay="relay"}"#) == Some(30.0)
            && sample(m, r#"handoff_relay_oldest_pending_age_seconds{relay="relay"}"#).is_some_and(|v| v > 0.0)
    })
    .await;
    assert_eq!(value(&parked, r#"handoff_relay_published_total{relay="relay"}"#), 0.0);

    relay.resume();
    env.await_delivered(30).await;
    let flowed = scrape_until(&address, "published total at 30 and the backlog gone", |m| {
        sample(m, r#"handoff_relay_published_total{relay="relay"}"#) == Some(30.0)
            && sample(m, r#"handoff_relay_oldest_pending_age_seconds{relay="relay"}"#) == Some(0.0)
    })
    .await;
    assert_eq!(value(&flowed, r#"handoff_relay_dwell_seconds_count{relay="relay"}"#), 30.0);
    assert_eq!(value(&flowed, r#"handoff_relay_dead_rows{relay="relay"}"#), 0.0);

    env.insert_events("bad", "bad", 1).await;
    env.insert_events("b", "user", 20).await;
    let failed = scrape_until(&address, "one DEAD row counted and sampled, 50 published", |m| {
        sample(m, r#"handoff_relay_dead_rows{relay="relay"}"#) == Some(1.0)
            && sample(m, r#"handoff_relay_published_total{relay="relay"}"#) == Some(50.0)
    })
    .await;
    assert_eq!(value(&failed, r#"handoff_relay_dead_total{reason="attempts_exhausted",relay="relay"}"#), 1.0);
    assert_eq!(value(&failed, r#"handoff_relay_publish_failures_total{reason="rejected",relay="relay"}"#), 1.0);
    assert_eq!(value(&failed, r#"handoff_relay_dwell_seconds_count{relay="relay"}"#), 50.0);
    assert_eq!(env.count("DEAD").await, 1);
}

#[tokio::test]
async fn readiness_follows_redis_and_liveness_stays_up() {
    let mut redis = RedisServer::start().await;
    let env = TestEnv::with_redis(&redis.url()).await;
    let relay = Handoff::run(&env.config(""));
    let address = relay.telemetry_address().await;
    eventually("ready", || async { (get(&address, "/readyz").0 == 200).then_some(()) }).await;

    redis.stop();
    let body = eventually("not ready while redis is down", || async {
        let (status, body) = get(&address, "/readyz");
        (status == 503).then_some(body)
    })
    .await;
    assert!(body.contains("redis unreachable"), "{body}");
    assert_eq!(get(&address, "/healthz").0, 200, "a broker outage is not a reason to restart the pod");
    let metrics = get(&address, "/metrics").1;
    assert_eq!(value(&metrics, r#"handoff_relay_stream_up{relay="relay"}"#), 0.0);

    redis.restart().await;
    eventually("ready again after redis returns", || async { (get(&address, "/readyz").0 == 200).then_some(()) }).await;
}

/// A client that never finishes its request is cut off after `header_read_timeout`; clients
/// beyond `max_connections` are closed on accept; the listener serves again afterwards.
#[tokio::test]
async fn slow_clients_cannot_hold_the_telemetry_listener() {
    use std::io::{Read, Write};
    let env = TestEnv::new().await;
    let config = env.config("").replace(
        "sample_interval = \"100ms\"",
        "sample_interval = \"100ms\"\nheader_read_timeout = \"300ms\"\nmax_connections = 2",
    );
    let relay = Handoff::run(&config);
    let address = relay.telemetry_address().await;
    let slow: Vec<std::net::TcpStream> = (0..2)
        .map(|_| {
            let mut stream = std::net::TcpStream::connect(&address).unwrap();
            stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").unwrap();
            stream
        })
        .collect();
    // A whole request over the limit is not served: the connection is closed unanswered.
    let mut extra = std::net::TcpStream::connect(&address).unwrap();
    extra.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let _ = extra.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut answer = Vec::new();
    let _ = extra.read_to_end(&mut answer);
    assert!(answer.is_empty(), "served over the limit: {}", String::from_utf8_lossy(&answer));
    for mut stream in slow {
        stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
        let mut rest = Vec::new();
        // Cut off by the server (perhaps after a 408): the read ends, it does not time out.
        stream.read_to_end(&mut rest).expect("the server closes a connection whose headers never finish");
        assert!(!String::from_utf8_lossy(&rest).contains("200 OK"), "the unfinished request was not served");
    }
    eventually("the listener serving again", || async { (get(&address, "/metrics").0 == 200).then_some(()) }).await;
}
