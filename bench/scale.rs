//! The scale run (`--only scale`, `scripts/bench --scale`): the deployment docs/scaling.md plans,
//! on one machine. Four owner databases (schemas of the local Postgres) with two relays each,
//! writing sharded streams (8 shards per family) to a Redis Cluster of three primaries of the
//! benchmark's own; two consumer groups, each with its own inbox database and two bridge
//! processes sharing the group's shards and applying the seed's handler at take-over (each
//! with its worker for retries). Every event must reach each group's audit log exactly once —
//! the run fails otherwise — and the measured CPU of each kind of process is printed beside
//! what the capacity model predicts at the rate the run reached. Every process runs the
//! defaults but for the bridges' `batch_size` (500, the batch the model's costs are measured
//! at): polling every 250 ms, reads blocking for 2 s.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::consumer::{BATCH_HANDLER, worker_section_with};
use crate::env::{BenchEnv, postgres_cpu_seconds, resources, stop, time_until};
use crate::plan::Costs;

const OWNERS: usize = 4;
const RELAYS_PER_OWNER: usize = 2;
const GROUPS: usize = 2;
const BRIDGES_PER_GROUP: usize = 2;
const SHARDS: u32 = 8;

/// A Redis Cluster of three primaries (no replicas) on spare ports, killed when dropped.
pub struct Cluster {
    pub ports: Vec<u16>,
    children: Vec<Child>,
    dir: std::path::PathBuf,
}

impl Cluster {
    pub async fn start(dir: &std::path::Path) -> anyhow::Result<Self> {
        let dir = dir.join(format!("cluster-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut cluster = Self { ports: Vec::new(), children: Vec::new(), dir: dir.clone() };
        while cluster.ports.len() < 3 {
            // The cluster bus listens on port + 10000: that port must be free too, and no node's
            // port another's bus port.
            let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let taken = cluster.ports.iter().any(|&p| p == port || p == port + 10000 || p + 10000 == port);
            if port >= 55000 || taken || std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_err() {
                continue;
            }
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--cluster-enabled", "yes", "--cluster-config-file", &format!("nodes-{port}.conf")])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            cluster.children.push(child);
            cluster.ports.push(port);
            time_until(Duration::from_secs(10), || async { Ok(cli(port, &["ping"]).contains("PONG")) }).await?;
        }
        let nodes: Vec<String> = cluster.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        anyhow::ensure!(created.success(), "redis-cli --cluster create failed");
        for &port in &cluster.ports {
            time_until(Duration::from_secs(30), || async move {
                let info = cli(port, &["cluster", "info"]);
                Ok(info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3"))
            })
            .await?;
        }
        Ok(cluster)
    }

    pub fn url(&self) -> String {
        let others: Vec<String> = self.ports[1..].iter().map(|p| format!("node=127.0.0.1:{p}")).collect();
        format!("redis-cluster://127.0.0.1:{}?{}", self.ports[0], others.join("&"))
    }

    /// CPU seconds each primary has used so far.
    fn cpu_seconds(&self) -> Vec<f64> {
        self.ports
            .iter()
            .map(|&port| {
                cli(port, &["info", "cpu"])
                    .lines()
                    .filter_map(|l| l.strip_prefix("used_cpu_sys:").or_else(|| l.strip_prefix("used_cpu_user:")))
                    .filter_map(|v| v.trim().parse::<f64>().ok())
                    .sum()
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// What the run measured: the rate, and CPU seconds per kind of process.
pub struct ScaleRun {
    pub events: usize,
    pub seconds: f64,
    pub relays_cpu: f64,
    pub bridges_cpu: f64,
    pub redis_cpu: Vec<f64>,
    pub postgres_cpu: f64,
    /// Events per takeover transaction (each writes its rows with one `received_at`), both groups.
    pub bridge_fill: f64,
    /// Rows per relay settle transaction (one `delivered_at` each), every owner.
    pub relay_fill: f64,
    /// Cores each kind of process used once everything was delivered.
    pub idle: Idle,
}

/// Cores per kind of process with nothing to do.
pub struct Idle {
    pub relays: f64,
    pub bridges: f64,
    pub redis: f64,
    pub postgres: f64,
}

impl ScaleRun {
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.seconds
    }
}

/// Runs the deployment until both groups' audit logs hold every event once.
pub async fn run(
    database_url: &str,
    binary: &std::path::Path,
    dir: &std::path::Path,
    events: usize,
) -> anyhow::Result<ScaleRun> {
    let cluster = Cluster::start(dir).await?;
    let url = cluster.url();
    let mut owners = Vec::new();
    for _ in 0..OWNERS {
        owners.push(BenchEnv::new(database_url, &url, binary.to_owned(), dir.to_owned()).await?);
    }
    let mut groups = Vec::new();
    for _ in 0..GROUPS {
        groups.push(BenchEnv::new(database_url, &url, binary.to_owned(), dir.to_owned()).await?);
    }
    let per_owner = events / OWNERS;
    for (k, owner) in owners.iter().enumerate() {
        owner.fill(per_owner, &format!("o{k}")).await?;
    }
    let total = per_owner * OWNERS;
    let streams: Vec<String> = owners
        .iter()
        .enumerate()
        .map(|(k, o)| format!("{{ key = \"{}\", shard_count = {SHARDS}, owner = \"o{k}\" }}", o.stream("user:{shard}")))
        .collect();

    let (pg_before, redis_before) = (postgres_cpu_seconds(), cluster.cpu_seconds());
    let started = Instant::now();
    let mut bridges = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        for b in 0..BRIDGES_PER_GROUP {
            let config = format!(
                "{}[[bridge]]\nname = \"g{g}\"\nconsumer = \"g{g}\"\ninstance = \"g{g}-{b}\"\napply = \"g{g}\"\n\
                 streams = [{}]\nbatch_size = 500\n{}",
                group.base_config(),
                streams.join(", "),
                worker_section_with(&format!("g{g}"), &format!("g{g}"), BATCH_HANDLER)
            );
            bridges.push(group.spawn(&format!("scale-bridge-{g}-{b}"), &config)?);
        }
    }
    let mut relays = Vec::new();
    for (k, owner) in owners.iter().enumerate() {
        let config = format!(
            "{}[[relay]]\nname = \"o{k}\"\nstream = \"{}\"\n",
            owner.base_config(),
            owner.stream("{aggregate_type}:{shard(aggregate_id, 8)}")
        );
        for r in 0..RELAYS_PER_OWNER {
            relays.push(owner.spawn(&format!("scale-relay-{k}-{r}"), &config)?);
        }
    }
    let lasts: Vec<String> = (0..OWNERS).map(|k| format!("'o{k}-{per_owner}'")).collect();
    let probe = format!("SELECT count(*) FROM audit_logs WHERE audit_id IN ({})", lasts.join(", "));
    for group in &groups {
        time_until(Duration::from_secs(1800), || async {
            Ok(group.scalar(&probe).await? == OWNERS as i64
                && group.scalar("SELECT count(*) FROM audit_logs").await? >= total as i64)
        })
        .await?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = |children: &[Child]| children.iter().map(|c| resources(c.id()).1).sum::<f64>();
    let (relays_cpu, bridges_cpu) = (cpu(&relays), cpu(&bridges));
    let postgres_cpu = postgres_cpu_seconds() - pg_before;
    let redis_after = cluster.cpu_seconds();
    let redis_cpu = redis_after.iter().zip(&redis_before).map(|(after, before)| after - before).collect();
    // The same deployment with nothing to do, for as long: what its processes cost idle
    // (claims that find nothing, blocking reads of every shard that return nothing, workers'
    // polls, recovery and trimming ticks). A measurement window, not a wait for anything.
    let idle_window = Duration::from_secs_f64(seconds.min(10.0));
    let pg_idle_before = postgres_cpu_seconds();
    tokio::time::sleep(idle_window).await;
    let w = idle_window.as_secs_f64();
    let idle = Idle {
        relays: (cpu(&relays) - relays_cpu) / w,
        bridges: (cpu(&bridges) - bridges_cpu) / w,
        redis: cluster.cpu_seconds().iter().zip(&redis_after).map(|(a, b)| a - b).sum::<f64>() / w,
        postgres: (postgres_cpu_seconds() - pg_idle_before) / w,
    };
    relays.iter_mut().chain(bridges.iter_mut()).for_each(stop);

    // Exactly once: each group's audit log and inbox hold every event of every owner, once.
    for (g, group) in groups.iter().enumerate() {
        let logged = group.scalar("SELECT count(DISTINCT audit_id) FROM audit_logs").await?;
        let rows = group.scalar("SELECT count(*) FROM audit_logs").await?;
        let inbox = group.scalar("SELECT count(*) FROM consumer_inbox").await?;
        anyhow::ensure!(
            logged == total as i64 && rows == total as i64 && inbox == total as i64,
            "group g{g}: {logged} distinct events in audit_logs, {rows} rows, {inbox} inbox rows; expected {total} each"
        );
    }
    for owner in &owners {
        owner.ensure_none_dead().await?;
    }
    let (mut transactions, mut settles) = (0, 0);
    for group in &groups {
        transactions += group.scalar("SELECT count(DISTINCT received_at) FROM consumer_inbox").await?;
    }
    for owner in &owners {
        settles += owner.scalar("SELECT count(DISTINCT delivered_at) FROM audit_outbox").await?;
    }
    let bridge_fill = (total * GROUPS) as f64 / transactions.max(1) as f64;
    let relay_fill = total as f64 / settles.max(1) as f64;
    for env in owners.iter().chain(&groups) {
        env.db.batch_execute(&format!("DROP SCHEMA {} CASCADE", env.schema)).await?;
    }
    Ok(ScaleRun {
        events: total,
        seconds,
        relays_cpu,
        bridges_cpu,
        redis_cpu,
        postgres_cpu,
        bridge_fill,
        relay_fill,
        idle,
    })
}

/// The model's prediction for each measured figure at the rate the run reached, as
/// (what, measured cores, predicted cores, the deployment's idle cores).
pub fn compared(run: &ScaleRun, costs: &Costs) -> Vec<(&'static str, f64, f64, f64)> {
    let (rate, s, g, idle) = (run.rate(), run.seconds, GROUPS as f64, &run.idle);
    let cores = |us: f64| rate * us * 1e-6;
    vec![
        ("relays (8)", run.relays_cpu / s, cores(costs.relay_us), idle.relays),
        ("bridges with their workers (4)", run.bridges_cpu / s, cores(g * costs.bridge_us), idle.bridges),
        (
            "Redis, 3 primaries",
            run.redis_cpu.iter().sum::<f64>() / s,
            cores(costs.redis_append_us + g * costs.redis_read_us),
            idle.redis,
        ),
        (
            "Postgres, 4 owners + 2 consumers",
            run.postgres_cpu / s,
            cores(costs.owner_pg_us + g * costs.consumer_pg_us),
            idle.postgres,
        ),
    ]
}

/// CPU per event of every process of this deployment, as the model counts it.
pub fn modelled_us(costs: &Costs) -> f64 {
    let g = GROUPS as f64;
    costs.owner_pg_us
        + costs.relay_us
        + costs.redis_append_us
        + g * (costs.bridge_us + costs.redis_read_us + costs.consumer_pg_us)
}
