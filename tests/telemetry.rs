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

/// A client that never finishes its request is cut off after `header_read_timeout`, and one
/// beyond `max_connections` makes room by closing the oldest connection without a request in
/// progress: the new request is served.
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
    let (status, _) = common::http::try_get(&address, "/healthz").expect("a request over the limit makes room");
    assert_eq!(status, 200);
    for mut stream in slow {
        stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
        let mut rest = Vec::new();
        // Cut off by the server (to make room, or after a 408): the read ends, it does not time
        // out. A server that closes while part of the request is still unread in its socket
        // resets the connection instead of closing it: cut off just the same.
        match stream.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("the server closes a connection whose headers never finish: {e}"),
        }
        assert!(!String::from_utf8_lossy(&rest).contains("200 OK"), "the unfinished request was not served");
    }
    eventually("the listener serving again", || async { (get(&address, "/metrics").0 == 200).then_some(()) }).await;
}

/// The kubelet's probes are answered within their timeout (1 s) whatever else is connected:
/// 50 idle keep-alive scrapers and 200 clients that never finish their headers, against the
/// default limits.
#[tokio::test]
async fn probes_are_answered_beside_fifty_idle_scrapers_and_two_hundred_slow_clients() {
    use std::io::{BufRead, BufReader, Write};
    let env = TestEnv::new().await;
    let relay = Handoff::run(&env.config(""));
    let address = relay.telemetry_address().await;
    let mut idle = Vec::new();
    for _ in 0..50 {
        let mut stream = std::net::TcpStream::connect(&address).unwrap();
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut status = String::new();
        let _ = BufReader::new(stream.try_clone().unwrap()).read_line(&mut status);
        idle.push(stream);
    }
    let slow: Vec<std::net::TcpStream> = (0..200)
        .map(|_| {
            let mut stream = std::net::TcpStream::connect(&address).unwrap();
            stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
            stream
        })
        .collect();
    for probe in 0..20 {
        let path = if probe % 2 == 0 { "/healthz" } else { "/readyz" };
        let answer = tokio::task::spawn_blocking({
            let address = address.clone();
            move || common::http::try_get(&address, path)
        })
        .await
        .unwrap();
        assert!(answer.is_some(), "probe {probe} ({path}) unanswered within 1 s");
    }
    drop((idle, slow));
}

/// `GET path` over TLS (trusting `ca`, server name `localhost`) with an optional
/// `Authorization` header: the status code.
async fn tls_get(address: &str, ca: &std::path::Path, path: &str, authorization: Option<&str>) -> u16 {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(ca).unwrap()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(handoff::tls_provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)).connect(name, tcp).await.unwrap();
    let header = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{header}Connection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    let _ = tls.read_to_string(&mut response).await;
    response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// `/metrics` over TLS with a bearer token from a file, as Prometheus exporters offer: without
/// the token 401, with it 200; the probes need none; plain HTTP is not served.
#[tokio::test]
async fn metrics_can_ask_for_a_bearer_token_over_tls_and_the_probes_stay_open() {
    let env = TestEnv::new().await;
    let pki = common::pki::Pki::new();
    let token = pki.dir.path().join("metrics-token");
    std::fs::write(&token, "t0ken-0123456789\n").unwrap();
    let telemetry = format!(
        "sample_interval = \"100ms\"\n[telemetry.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n\
         [telemetry.auth]\nbearer_token_file = \"{}\"\n",
        pki.server_cert.display(),
        pki.server_key.display(),
        token.display()
    );
    let relay = Handoff::run(&env.config("").replace("sample_interval = \"100ms\"\n", &telemetry));
    let address = relay.telemetry_address().await;
    assert_eq!(tls_get(&address, &pki.ca, "/metrics", None).await, 401);
    assert_eq!(tls_get(&address, &pki.ca, "/metrics", Some("Bearer wrong")).await, 401);
    assert_eq!(tls_get(&address, &pki.ca, "/metrics", Some("Bearer t0ken-0123456789")).await, 200);
    assert_eq!(tls_get(&address, &pki.ca, "/healthz", None).await, 200);
    assert_eq!(common::http::try_get(&address, "/healthz").map(|(s, _)| s), None, "no plain HTTP on a TLS listener");
    assert!(!relay.logs().contains("t0ken"), "the token is never logged");
}
