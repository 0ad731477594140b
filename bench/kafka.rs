//! Apache Kafka beside Redis: the relay producing to Kafka against the Kafka producer's own limit
//! for the same work (the same client and settings — idempotent, `acks=all` — batches of 500 in
//! flight, every delivery report awaited before the next batch; no database), on the broker
//! `scripts/services up kafka` starts (`HANDOFF_KAFKA_BOOTSTRAP`, default 127.0.0.1:19092), the
//! same machine. Each run produces to a topic of its own (3 partitions).

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::env::{BenchEnv, postgres_cpu_seconds, resources, stop};
use crate::relay::Run;

pub fn bootstrap() -> String {
    std::env::var("HANDOFF_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:19092".into())
}

/// The broker's CPU seconds so far (its pid as `scripts/services` recorded it); 0 if unknown.
pub fn broker_cpu_seconds() -> f64 {
    let pid = std::fs::read_to_string("target/services/kafka/kafka.pid").ok().and_then(|p| p.trim().parse().ok());
    pid.map_or(0.0, |pid| resources(pid).1)
}

/// A fresh topic `<prefix>.user` with 3 partitions; returns the prefix.
async fn fresh_topic() -> anyhow::Result<String> {
    let prefix = format!("kbench{:08x}", rand::random::<u32>());
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap()).create()?;
    let name = format!("{prefix}.user");
    let topic = NewTopic::new(&name, 3, TopicReplication::Fixed(1)).set("retention.ms", "600000");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.create_topics([&topic], &options).await? {
        result.map_err(|(name, code)| anyhow::anyhow!("creating topic {name}: {code:?}"))?;
    }
    Ok(prefix)
}

/// Messages stored in `topic` (the sum of its partitions' high watermarks; a fresh topic).
fn stored(consumer: &BaseConsumer, topic: &str) -> anyhow::Result<u64> {
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else { return Ok(0) };
    let mut total = 0;
    for partition in found.partitions() {
        total += consumer.fetch_watermarks(topic, partition.id(), Duration::from_secs(10))?.1 as u64;
    }
    Ok(total)
}

/// The relay (the default config: locked claim, concurrency 2) producing `n` filled rows to
/// Kafka, timed from its first message until all are stored and no row is open.
pub async fn relay(env: &BenchEnv, n: usize, batch: u32) -> anyhow::Result<Run> {
    env.reset().await?;
    env.fill(n, "t").await?;
    let prefix = fresh_topic().await?;
    let config = format!(
        "{}[kafka]\nbootstrap_servers = \"{}\"\n[[relay]]\nname = \"bench\"\nbroker = \"kafka\"\nstream = \"{prefix}.{{aggregate_type}}\"\nbatch_size = {batch}\npoll_interval = \"50ms\"\nconcurrency = 2\n",
        env.base_config(),
        bootstrap()
    );
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap()).create()?;
    let topic = format!("{prefix}.user");
    let (pg_cpu, broker_cpu) = (postgres_cpu_seconds(), broker_cpu_seconds());
    let mut child = env.spawn("relay-kafka", &config)?;
    let started = Instant::now();
    let mut first: Option<(Instant, u64)> = None;
    let rows_per_sec = loop {
        let stored = stored(&consumer, &topic)?;
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
        anyhow::ensure!(started.elapsed() < Duration::from_secs(600), "the relay to Kafka did not finish");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let (peak_rss_kb, cpu_seconds) = resources(child.id());
    let pg_cpu_seconds = postgres_cpu_seconds() - pg_cpu;
    let broker_cpu = broker_cpu_seconds() - broker_cpu;
    stop(&mut child);
    env.ensure_none_dead().await?;
    Ok(Run { rows_per_sec, peak_rss_kb, cpu_seconds, pg_cpu_seconds, redis_cpu_seconds: broker_cpu, ..Run::default() })
}

/// The Kafka producer's own limit for what the relay does per batch, in this process: `batch`
/// messages as the relay builds a filled row (the payload as the value, the other columns as
/// headers, keyed by aggregate) handed over at once, every delivery report awaited, next batch.
/// Returns messages/s and this process's CPU seconds for them.
pub async fn produce_limit(n: usize, batch: usize) -> anyhow::Result<(f64, f64)> {
    let prefix = fresh_topic().await?;
    let topic = format!("{prefix}.user");
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()?;
    let cpu = resources(std::process::id()).1;
    let started = Instant::now();
    for start in (0..n).step_by(batch) {
        let messages: Vec<(String, OwnedHeaders, String)> = (start..(start + batch).min(n)).map(message).collect();
        let sends = messages.iter().map(|(key, headers, value)| {
            let record = FutureRecord::to(&topic).key(key).payload(value).headers(headers.clone());
            producer.send(record, Duration::from_secs(30))
        });
        for report in futures_util::future::join_all(sends).await {
            report.map_err(|(e, _)| e)?;
        }
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    Ok((rate, resources(std::process::id()).1 - cpu))
}

/// A filled row as the relay produces it: key, headers, value.
fn message(i: usize) -> (String, OwnedHeaders, String) {
    let id = format!("l-{i}");
    let aggregate = format!("user-{}", i % 1000);
    let fields = [
        ("event_type", "auth.mfa_policy_changed"),
        ("aggregate_type", "user"),
        ("aggregate_id", aggregate.as_str()),
        ("owner", "bench"),
        ("headers", r#"{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}"#),
        ("event_id", id.as_str()),
    ];
    let headers =
        fields.iter().fold(OwnedHeaders::new(), |h, (key, value)| h.insert(Header { key, value: Some(*value) }));
    let body = format!(
        r#"{{"auditId":"{id}","actor":"admin@example.com","userId":"user-{}","policy":"mfa_required","reason":"{}"}}"#,
        i % 1000,
        "0123456789abcdef0123456789abcdef".repeat(5)
    );
    (aggregate, headers, body)
}
