//! Servers that answer with what no honest server sends (a compromised host, or an attacker
//! intercepting a plain `redis://` connection): the process never aborts, nothing is counted
//! against the rows, and delivery resumes once honest answers come back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common;

use common::http::get;
use common::process::Handoff;
use common::{TestEnv, eventually};

/// A proxy in front of Redis that, while `hostile`, answers every request carrying an `XADD`
/// with 20,000 nested one-element arrays instead of forwarding it.
async fn intercepting_redis(upstream: u16, hostile: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else { continue };
            let hostile = hostile.clone();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else { return };
                let (mut from_client, to_client) = client.into_split();
                let (mut from_server, mut to_server) = server.into_split();
                let to_client = Arc::new(tokio::sync::Mutex::new(to_client));
                let answers = to_client.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n @ 1..) = from_server.read(&mut buf).await {
                        if answers.lock().await.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n @ 1..) = from_client.read(&mut buf).await {
                    let request = &buf[..n];
                    if hostile.load(Ordering::SeqCst) && request.windows(4).any(|w| w == b"XADD") {
                        let mut reply = "*1\r\n".repeat(20_000).into_bytes();
                        reply.extend_from_slice(b":1\r\n");
                        let _ = to_client.lock().await.write_all(&reply).await;
                        continue;
                    }
                    if to_server.write_all(request).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// A reply of 20,000 nested arrays to the relay's appends: refused as a protocol error (the
/// connection closed, the rows handed back untouched), never a stack overflow that aborts the
/// process; once the answers are honest again every row is delivered.
#[tokio::test]
async fn a_redis_reply_nested_twenty_thousand_deep_is_refused_without_aborting() {
    let env = TestEnv::new().await;
    let upstream = env.redis_url.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).unwrap();
    let hostile = Arc::new(AtomicBool::new(true));
    let port = intercepting_redis(upstream, hostile.clone()).await;
    let config = env.config("").replace(&env.redis_url, &format!("redis://127.0.0.1:{port}"));
    let mut relay = Handoff::run(&config);
    let address = relay.telemetry_address().await;
    env.insert_events("e", "user", 20).await;
    relay.await_log("arrays nested deeper than 8").await;
    assert!(relay.running(), "the process is alive: {}", relay.logs());
    assert_eq!(get(&address, "/healthz").0, 200);
    assert_eq!(env.count("DELIVERED").await, 0);
    assert_eq!(env.scalar_i64("SELECT coalesce(max(attempts), 0)::int8 FROM audit_outbox").await, 0);

    hostile.store(false, Ordering::SeqCst);
    env.await_delivered(20).await;
    assert_eq!(env.count("DEAD").await, 0);
    assert!(relay.running());
    eventually("every event in the stream once", || async {
        (env.stream_event_ids(&env.stream("user")).await.len() == 20).then_some(())
    })
    .await;
}
