//! What the broker-side safeguards cost: the relay with and without the durability gate against
//! a private primary + replica (AOF on, `appendfsync everysec`), and the bridge's peak RSS on a
//! stream of entries at `payload_max_bytes`. Each runs on redis-servers of its own on spare
//! ports, so the shared instance keeps neither a replica nor 800 MiB of entries.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::env::{BenchEnv, resources, stop, time_until};
use crate::relay::{Run, throughput};
use handoff::RedisStream;
use handoff::load_str;
use handoff::{AppendOptions, Entry, EventStream};

/// A redis-server of the benchmark's own, killed when dropped.
pub struct PrivateRedis {
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl PrivateRedis {
    pub async fn start(dir: &Path, extra: &[&str]) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir = dir.join(format!("redis-{port}"));
        std::fs::create_dir_all(&dir)?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(extra)
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let server = Self { port, child, dir };
        time_until(Duration::from_secs(10), || async { Ok(cli(port, &["ping"]).contains("PONG")) }).await?;
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `redis-cli -p <port> <args>`'s output (empty if it could not run).
pub fn cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Relay throughput (batch 500, default concurrency) against a primary with one replica, AOF
/// on: without the gate, then with `replicas = 1`. Returns (ungated, gated).
pub async fn gate_cost(
    database_url: &str,
    binary: &Path,
    dir: &Path,
    n: usize,
    repeat: usize,
) -> anyhow::Result<(Vec<Run>, Vec<Run>)> {
    let aof = ["--appendonly", "yes", "--appendfsync", "everysec"];
    let primary = PrivateRedis::start(dir, &aof).await?;
    let primary_port = primary.port.to_string();
    let replica_args = [&aof[..], &["--replicaof", "127.0.0.1", &primary_port]].concat();
    let replica = PrivateRedis::start(dir, &replica_args).await?;
    time_until(Duration::from_secs(30), || async {
        Ok(cli(replica.port, &["info", "replication"]).contains("master_link_status:up"))
    })
    .await?;
    let env = BenchEnv::new(database_url, &primary.url(), binary.to_owned(), dir.to_owned()).await?;
    let mut plain = Vec::new();
    let mut gated = Vec::new();
    for _ in 0..repeat {
        plain.push(throughput(&env, n, 500, 1, "").await?);
        gated.push(throughput(&env, n, 500, 1, "[relay.durability]\nreplicas = 1\ntimeout = \"1s\"").await?);
    }
    env.drop_schema().await?;
    Ok((plain, gated))
}

/// The bridge's peak RSS (MiB) over `entries` entries of `size` bytes with
/// `payload_max_bytes` just above it and `batch_bytes` as given.
pub async fn bridge_large_entries(
    database_url: &str,
    binary: &Path,
    dir: &Path,
    entries: usize,
    size: usize,
    batch_bytes: usize,
    poison: bool,
) -> anyhow::Result<(f64, f64)> {
    let redis = PrivateRedis::start(dir, &["--appendonly", "no"]).await?;
    let env = BenchEnv::new(database_url, &redis.url(), binary.to_owned(), dir.to_owned()).await?;
    let config = load_str(&env.base_config())?;
    let (stream, _) = RedisStream::connect(&config.redis).await?;
    let blob = "x".repeat(size - 100);
    for i in 0..entries {
        let id = format!("big-{i}");
        let entry = Entry {
            stream: env.stream("user"),
            fields: vec![
                ("event_id".into(), id.clone().into()),
                ("event_type".into(), "auth.mfa_policy_changed".into()),
                ("payload".into(), format!(r#"{{"auditId":"{id}","blob":"{blob}"}}"#).into()),
                ("owner".into(), "bench".into()),
            ],
            event_id: id,
            run: None,
            trace: None,
        };
        stream.append(&[entry], &AppendOptions::default()).await;
    }
    // Valid entries (payload_max_bytes above their size), or poison ones (the default limit).
    let limit =
        if poison { String::new() } else { format!("[bridge.validate]\npayload_max_bytes = {}\n", size + (1 << 20)) };
    let section = format!(
        "[[bridge]]\nname = \"bench\"\nconsumer = \"admin\"\nstreams = [{{ key = \"{}\", owner = \"bench\" }}]\nbatch_bytes = {batch_bytes}\nblock = \"100ms\"\n{limit}",
        env.stream("user"),
    );
    let mut child = env.spawn("bridge-large", &format!("{}{section}", env.base_config()))?;
    let table = if poison { "consumer_inbox_poison" } else { "consumer_inbox" };
    let done = time_until(Duration::from_secs(600), || async {
        Ok(env.scalar(&format!("SELECT count(*) FROM {table}")).await? >= entries as i64)
    })
    .await;
    let (peak_kb, _) = resources(child.id());
    // What it keeps once the stream is quiet again (it reconnects once the stream is quiet for 5 s after large entries).
    tokio::time::sleep(Duration::from_secs(8)).await;
    let retained_kb = rss_kb(child.id());
    stop(&mut child);
    done?;
    env.drop_schema().await?;
    Ok((peak_kb as f64 / 1024.0, retained_kb as f64 / 1024.0))
}

/// `VmRSS` of a process, in KiB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
