//! NATS JetStream beside Redis: the relay publishing to JetStream against JetStream's own
//! publish-with-ack limit (the same batches, no database), and the bridge reading from a durable
//! pull consumer against JetStream's own pull + double-ack limit (no database) — each on a
//! nats-server of the benchmark's own (never the machine's on 4222), the same machine.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{AckPolicy, pull};
use bytes::Bytes;
use futures_util::StreamExt;

use crate::consumer::valid_entry;
use crate::env::{BenchEnv, postgres_cpu_seconds, resources, stop};
use crate::relay::Run;
use handoff::NatsConfig;
use handoff::NatsStream;
use handoff::{AppendOptions, Entry, EventStream};

const STREAM: &str = "BENCH";

pub struct NatsServer {
    child: Child,
    pub port: u16,
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl NatsServer {
    /// A nats-server with JetStream (its file store a fresh `nats` under `dir`) on a spare port,
    /// once it answers.
    pub async fn start(dir: &std::path::Path) -> anyhow::Result<Self> {
        let binary = if std::path::Path::new("/usr/sbin/nats-server").exists() {
            "/usr/sbin/nats-server"
        } else {
            "nats-server"
        };
        let store = dir.join("nats");
        let _ = std::fs::remove_dir_all(&store);
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(binary)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string()])
            .arg("-sd")
            .arg(&store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("nats-server ({binary}): {e}; scripts/services installs it"))?;
        let server = Self { child, port };
        let started = Instant::now();
        while async_nats::connect(server.url()).await.is_err() {
            anyhow::ensure!(started.elapsed() < Duration::from_secs(20), "nats-server did not answer");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn cpu_seconds(&self) -> f64 {
        resources(self.child.id()).1
    }

    fn section(&self) -> String {
        format!("[nats]\nurl = \"{}\"\nstream = \"{STREAM}\"\n", self.url())
    }

    async fn jetstream(&self) -> anyhow::Result<async_nats::jetstream::Context> {
        Ok(async_nats::jetstream::new(async_nats::connect(self.url()).await?))
    }

    /// An empty stream `BENCH` on `bench.>` (file storage, a one-hour duplicate window).
    async fn fresh_stream(&self) -> anyhow::Result<()> {
        let js = self.jetstream().await?;
        let _ = js.delete_stream(STREAM).await;
        js.create_stream(async_nats::jetstream::stream::Config {
            name: STREAM.into(),
            subjects: vec!["bench.>".into()],
            duplicate_window: Duration::from_secs(3600),
            ..Default::default()
        })
        .await?;
        Ok(())
    }

    async fn messages(&self, js: &async_nats::jetstream::Context) -> anyhow::Result<u64> {
        Ok(js.get_stream(STREAM).await?.info().await?.state.messages)
    }
}

/// The relay (the default config: locked claim, concurrency 2) publishing `n` filled rows to
/// JetStream, timed from its first message until all are stored and no row is open.
pub async fn relay(env: &BenchEnv, server: &NatsServer, n: usize, batch: u32) -> anyhow::Result<Run> {
    env.reset().await?;
    env.fill(n, "t").await?;
    server.fresh_stream().await?;
    let config = format!(
        "{}{}[[relay]]\nname = \"bench\"\nbroker = \"nats\"\nstream = \"bench.{{aggregate_type}}\"\nbatch_size = {batch}\npoll_interval = \"50ms\"\nconcurrency = 2\n",
        env.base_config(),
        server.section()
    );
    let js = server.jetstream().await?;
    let (pg_cpu, nats_cpu) = (postgres_cpu_seconds(), server.cpu_seconds());
    let mut child = env.spawn("relay-nats", &config)?;
    let started = Instant::now();
    let mut first: Option<(Instant, u64)> = None;
    let rows_per_sec = loop {
        let stored = server.messages(&js).await?;
        let now = Instant::now();
        if first.is_none() && stored > 0 {
            anyhow::ensure!(stored < n as u64, "all {n} messages stored before a first look; use more events");
            first = Some((now, stored));
        }
        if let Some((at, from)) = first
            && stored >= n as u64
            && env.open_rows().await? == 0
        {
            break (n as u64 - from) as f64 / (Instant::now() - at).as_secs_f64();
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(600), "the relay to NATS did not finish");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let (peak_rss_kb, cpu_seconds) = resources(child.id());
    let pg_cpu_seconds = postgres_cpu_seconds() - pg_cpu;
    let broker_cpu = server.cpu_seconds() - nats_cpu;
    stop(&mut child);
    env.ensure_none_dead().await?;
    Ok(Run { rows_per_sec, peak_rss_kb, cpu_seconds, pg_cpu_seconds, redis_cpu_seconds: broker_cpu, ..Run::default() })
}

/// An entry as the relay makes one from a filled row: the payload is the body, the other
/// columns headers, the event id `Nats-Msg-Id`.
fn entry(i: usize) -> Entry {
    let id = format!("l-{i}");
    let body = format!(
        r#"{{"auditId":"{id}","actor":"admin@example.com","userId":"user-{}","policy":"mfa_required","reason":"{}"}}"#,
        i % 1000,
        "0123456789abcdef0123456789abcdef".repeat(5)
    );
    let fields: [(&str, String); 7] = [
        ("event_id", id.clone()),
        ("event_type", "auth.mfa_policy_changed".into()),
        ("aggregate_type", "user".into()),
        ("aggregate_id", format!("user-{}", i % 1000)),
        ("owner", "bench".into()),
        ("headers", r#"{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}"#.into()),
        ("payload", body),
    ];
    Entry {
        stream: "bench.user".into(),
        fields: fields.into_iter().map(|(k, v)| (Bytes::from_static(k.as_bytes()), Bytes::from(v))).collect(),
        event_id: id,
        run: None,
        trace: None,
    }
}

/// JetStream's own limit for what the relay does per batch, through the relay's own publish
/// path (the same connection, the same batches, no database): `batch` messages with ids, all in
/// flight, every PubAck awaited, next batch. Returns messages/s and this process's CPU seconds
/// for them (the publishing alone).
pub async fn publish_limit(server: &NatsServer, n: usize, batch: usize) -> anyhow::Result<(f64, f64)> {
    server.fresh_stream().await?;
    let config = NatsConfig { timeout: Duration::from_secs(10), ..NatsConfig::new(&server.url(), STREAM) };
    let stream = NatsStream::connect(&config, "payload").await?;
    let batches: Vec<Vec<Entry>> =
        (0..n).step_by(batch).map(|start| (start..(start + batch).min(n)).map(entry).collect()).collect();
    let cpu = resources(std::process::id()).1;
    let started = Instant::now();
    for entries in &batches {
        let outcomes = stream.append(entries, &AppendOptions::default()).await;
        anyhow::ensure!(
            outcomes.iter().all(|o| matches!(o, handoff::AppendOutcome::Appended(_))),
            "publishing failed: {:?}",
            outcomes.iter().find(|o| !matches!(o, handoff::AppendOutcome::Appended(_)))
        );
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    Ok((rate, resources(std::process::id()).1 - cpu))
}

/// Publishes `n` messages of valid events for the bridge (as the relay would).
async fn publish_events(server: &NatsServer, n: usize) -> anyhow::Result<()> {
    server.fresh_stream().await?;
    let config = NatsConfig { timeout: Duration::from_secs(10), ..NatsConfig::new(&server.url(), STREAM) };
    let stream = NatsStream::connect(&config, "payload").await?;
    for start in (0..n).step_by(1000) {
        let entries: Vec<Entry> = (start..(start + 1000).min(n)).map(|i| valid_entry(i, "bench.user")).collect();
        let outcomes = stream.append(&entries, &AppendOptions::default()).await;
        anyhow::ensure!(
            outcomes.iter().all(|o| matches!(o, handoff::AppendOutcome::Appended(_))),
            "publishing the bridge's input failed"
        );
    }
    Ok(())
}

/// One bridge reading `n` messages from JetStream into the inbox (the worker applies nothing:
/// `apply = "off"`), timed by the database's clock as the Redis bridge is.
pub async fn bridge(env: &BenchEnv, server: &NatsServer, n: usize, batch: u32) -> anyhow::Result<Run> {
    env.reset().await?;
    publish_events(server, n).await?;
    let config = format!(
        "{}{}[[bridge]]\nname = \"bench\"\nconsumer = \"admin\"\nbroker = \"nats\"\nstreams = [{{ key = \"bench.user\", owner = \"bench\" }}]\nbatch_size = {batch}\nblock = \"100ms\"\napply = \"off\"\n",
        env.base_config(),
        server.section()
    );
    let (pg_cpu, nats_cpu) = (postgres_cpu_seconds(), server.cpu_seconds());
    let mut child = env.spawn("bridge-nats", &config)?;
    let last = format!("consumer = 'admin' AND event_id = 'c-{}'", n - 1);
    let rate = env.written_rate(Duration::from_secs(600), n as i64, "consumer_inbox", "received_at", &last).await;
    let (peak_rss_kb, cpu_seconds) = resources(child.id());
    let (pg_cpu_seconds, broker_cpu) = (postgres_cpu_seconds() - pg_cpu, server.cpu_seconds() - nats_cpu);
    stop(&mut child);
    Ok(Run {
        rows_per_sec: rate?,
        peak_rss_kb,
        cpu_seconds,
        pg_cpu_seconds,
        redis_cpu_seconds: broker_cpu,
        ..Run::default()
    })
}

/// JetStream's own limit for what the bridge does per batch: fetch `batch` messages from a
/// durable pull consumer, double-ack them all (in flight at once), next batch; no database.
pub async fn pull_limit(server: &NatsServer, n: usize, batch: usize) -> anyhow::Result<f64> {
    publish_events(server, n).await?;
    let js = server.jetstream().await?;
    let client = async_nats::connect(server.url()).await?;
    let config = pull::Config {
        durable_name: Some("limit".into()),
        ack_policy: AckPolicy::Explicit,
        max_ack_pending: -1,
        ..Default::default()
    };
    let consumer = js.get_stream(STREAM).await?.create_consumer(config).await?;
    let started = Instant::now();
    let mut done = 0;
    while done < n {
        let mut messages = consumer.fetch().max_messages(batch).messages().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut replies = Vec::with_capacity(batch);
        while let Some(message) = messages.next().await {
            let message = message.map_err(|e| anyhow::anyhow!("{e}"))?;
            replies.extend(message.reply.clone());
        }
        done += replies.len();
        let acks = replies.into_iter().map(|reply| client.request(reply, Bytes::from_static(b"+ACK")));
        for ack in futures_util::future::join_all(acks).await {
            ack?;
        }
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}
