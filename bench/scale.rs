//! The scale run (`--only scale`, `scripts/bench --scale`): the deployment docs/explanation/capacity.md plans,
//! on one machine. Four owner databases (schemas of the local Postgres) with two relays each,
//! writing sharded streams (8 shards per family) to a Redis Cluster of three primaries of the
//! benchmark's own; two consumer groups, each with its own inbox database and two bridge
//! processes sharing the group's shards and applying the seed's handler at take-over (each
//! with its worker for retries). Every event must reach each group's audit log exactly once —
//! the run fails otherwise — and the measured CPU of each kind of process is printed beside
//! what the capacity model predicts at the rate the run reached, with what each kind costs at
//! rest (measured on the backlog run's deployment before its load) added. Every process runs the
//! defaults but for the bridges' `batch_size` (500, the batch the model's costs are measured
//! at): polling every 250 ms, reads blocking for 2 s.

use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::consumer::{BATCH_HANDLER, worker_section_with};
use crate::env::{BenchEnv, postgres_cpu_seconds, resources, stop, time_until};

const OWNERS: usize = 4;
const RELAYS_PER_OWNER: usize = 2;
const GROUPS: usize = 2;
const BRIDGES_PER_GROUP: usize = 2;
const SHARDS: u32 = 8;
/// How often the steady runs' producer writes.
const TICK: Duration = Duration::from_millis(50);

/// Events each owner gets per tick for `rate` events/s over all owners.
fn per_tick(rate: f64) -> usize {
    ((rate / OWNERS as f64) * TICK.as_secs_f64()).round().max(1.0) as usize
}

/// What a run measured: the rate, and CPU seconds per kind of process.
pub struct ScaleRun {
    pub events: usize,
    pub seconds: f64,
    pub cpu: Cpu,
    /// Events per takeover transaction (each writes its rows with one `received_at`), both groups.
    pub bridge_fill: f64,
    /// Rows per relay settle transaction (one `delivered_at` each), every owner.
    pub relay_fill: f64,
    /// Cores each kind of process used at rest, before the load (the backlog run).
    pub rest: Option<Cpu>,
    /// Postgres CPU (µs) the producer's own inserts took per event (the steady run).
    pub insert_us: f64,
}

impl ScaleRun {
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.seconds
    }
}

mod alone;
mod model;
pub use alone::{RelaysAlone, relays_alone};
pub use model::{alone_compared, compared, host, modelled_us, per_cycle, per_takeover};

/// (rows, transactions) of `table` whose `column` (a transaction's timestamp) lies between two
/// clock marks.
async fn count_between(env: &BenchEnv, column: &str, table: &str, from: &str, to: &str) -> anyhow::Result<(i64, i64)> {
    let sql = format!(
        "SELECT count(*), count(DISTINCT {column}) FROM {table}
         WHERE {column} >= $1::text::timestamptz AND {column} < $2::text::timestamptz"
    );
    let row = env.db.query_one(&sql, &[&from, &to]).await?;
    Ok((row.get(0), row.get(1)))
}

/// Transactions counted between two clock marks, and what they carried.
#[derive(Default)]
struct Counted {
    /// Inbox rows of both groups, and the takeover transactions that wrote them.
    events: i64,
    takeovers: i64,
    /// Outbox rows delivered, and the settle transactions (claim cycles) that delivered them.
    rows: i64,
    settles: i64,
}

impl Counted {
    /// (events per takeover, rows per settle).
    fn fills(&self) -> (f64, f64) {
        (self.events as f64 / self.takeovers.max(1) as f64, self.rows as f64 / self.settles.max(1) as f64)
    }
}

/// CPU seconds per kind of process (or, divided by a time, cores).
#[derive(Clone, Default)]
pub struct Cpu {
    pub relays: f64,
    pub bridges: f64,
    pub redis: Vec<f64>,
    /// Every Postgres process: the backends of each kind below, the server's own background
    /// processes, and the benchmark's connections.
    pub postgres: f64,
    /// The backends serving the relays' connections: the owner databases' work.
    pub owner_pg: f64,
    /// The backends serving the bridges' (and their workers') connections: the consumers'.
    pub consumer_pg: f64,
    /// Each live backend's CPU at the time (pid, application, seconds), to take differences by.
    backends: Vec<(i32, String, f64)>,
}

/// The application names the deployment's processes connect to Postgres under.
const RELAY_APP: &str = "handoff-scale-relay";
const BRIDGE_APP: &str = "handoff-scale-bridge";

impl Cpu {
    fn since(&self, earlier: &Cpu) -> Cpu {
        // A backend's CPU since `earlier`: all of it if it started since.
        let used = |app: &str| -> f64 {
            self.backends
                .iter()
                .filter(|(_, a, _)| a == app)
                .map(|(pid, _, now)| {
                    now - earlier.backends.iter().find(|(p, _, _)| p == pid).map_or(0.0, |(_, _, then)| *then)
                })
                .sum()
        };
        Cpu {
            relays: self.relays - earlier.relays,
            bridges: self.bridges - earlier.bridges,
            redis: self.redis.iter().zip(&earlier.redis).map(|(a, b)| a - b).collect(),
            postgres: self.postgres - earlier.postgres,
            owner_pg: used(RELAY_APP),
            consumer_pg: used(BRIDGE_APP),
            backends: Vec::new(),
        }
    }

    fn per_second(&self, seconds: f64) -> Cpu {
        Cpu {
            relays: self.relays / seconds,
            bridges: self.bridges / seconds,
            redis: self.redis.iter().map(|r| r / seconds).collect(),
            postgres: self.postgres / seconds,
            owner_pg: self.owner_pg / seconds,
            consumer_pg: self.consumer_pg / seconds,
            backends: Vec::new(),
        }
    }
}

/// The deployment: the cluster, and the owners' and the groups' schemas.
struct Deployment {
    cluster: Cluster,
    owners: Vec<BenchEnv>,
    groups: Vec<BenchEnv>,
}

/// The deployment's handoff processes, stopped when dropped (on an error too) unless they
/// already were.
struct Processes {
    relays: Vec<Child>,
    bridges: Vec<Child>,
}

impl Drop for Processes {
    fn drop(&mut self) {
        // `try_wait` of a child already waited for answers from its kept status: no signal
        // goes to a pid that may have been reused.
        for child in self.relays.iter_mut().chain(self.bridges.iter_mut()) {
            if matches!(child.try_wait(), Ok(None)) {
                stop(child);
            }
        }
    }
}

impl Deployment {
    async fn new(database_url: &str, binary: &std::path::Path, dir: &std::path::Path) -> anyhow::Result<Self> {
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
        Ok(Self { cluster, owners, groups })
    }

    fn spawn(&self) -> anyhow::Result<Processes> {
        let mut processes = Processes { relays: Vec::new(), bridges: Vec::new() };
        self.spawn_bridges(&mut processes)?;
        self.spawn_relays(&mut processes)?;
        Ok(processes)
    }

    /// Starts the bridges into `processes`, which stops them if a later one fails to start.
    fn spawn_bridges(&self, processes: &mut Processes) -> anyhow::Result<()> {
        let streams: Vec<String> = self
            .owners
            .iter()
            .enumerate()
            .map(|(k, o)| {
                format!("{{ key = \"{}\", shard_count = {SHARDS}, owner = \"o{k}\" }}", o.stream("user:{shard}"))
            })
            .collect();
        for (g, group) in self.groups.iter().enumerate() {
            for b in 0..BRIDGES_PER_GROUP {
                let config = format!(
                    "{}[[bridge]]\nname = \"g{g}\"\nconsumer = \"g{g}\"\ninstance = \"g{g}-{b}\"\napply = \"g{g}\"\n\
                     streams = [{}]\nbatch_size = 500\n{}",
                    group.base_config_as(BRIDGE_APP),
                    streams.join(", "),
                    worker_section_with(&format!("g{g}"), &format!("g{g}"), BATCH_HANDLER)
                );
                processes.bridges.push(group.spawn(&format!("scale-bridge-{g}-{b}"), &config)?);
            }
        }
        Ok(())
    }

    /// Starts the relays into `processes`, likewise.
    fn spawn_relays(&self, processes: &mut Processes) -> anyhow::Result<()> {
        for (k, owner) in self.owners.iter().enumerate() {
            let config = format!(
                "{}[[relay]]\nname = \"o{k}\"\nstream = \"{}\"\n",
                owner.base_config_as(RELAY_APP),
                owner.stream(&format!("{{aggregate_type}}:{{shard(aggregate_id, {SHARDS})}}"))
            );
            for r in 0..RELAYS_PER_OWNER {
                processes.relays.push(owner.spawn(&format!("scale-relay-{k}-{r}"), &config)?);
            }
        }
        Ok(())
    }

    /// The database's clock now, as text (a mark to count settles and takeovers from).
    async fn clock(&self) -> anyhow::Result<String> {
        Ok(self.owners[0].db.query_one("SELECT clock_timestamp()::text", &[]).await?.get(0))
    }

    /// The transactions between two [`Deployment::clock`] marks: the takeovers of both groups
    /// and the settles of every owner, with the events and rows they carried.
    async fn counted_between(&self, from: &str, to: &str) -> anyhow::Result<Counted> {
        let mut counted = Counted::default();
        for group in &self.groups {
            let (events, takeovers) = count_between(group, "received_at", "consumer_inbox", from, to).await?;
            (counted.events, counted.takeovers) = (counted.events + events, counted.takeovers + takeovers);
        }
        for owner in &self.owners {
            let (rows, settles) = count_between(owner, "delivered_at", "audit_outbox", from, to).await?;
            (counted.rows, counted.settles) = (counted.rows + rows, counted.settles + settles);
        }
        Ok(counted)
    }

    /// Writes `per_tick` events into each owner's outbox every 50 ms until `until`, counting
    /// them in `written` (one counter per owner).
    async fn produce(&self, written: &[AtomicUsize], per_tick: usize, until: Instant) -> anyhow::Result<()> {
        let mut tick = tokio::time::interval(TICK);
        while Instant::now() < until {
            tick.tick().await;
            for (k, owner) in self.owners.iter().enumerate() {
                let after = written[k].fetch_add(per_tick, Ordering::Relaxed);
                owner.insert_events(&format!("o{k}"), after, per_tick).await?;
            }
        }
        Ok(())
    }

    async fn drop_schemas(&self) -> anyhow::Result<()> {
        for env in self.owners.iter().chain(&self.groups) {
            env.db.batch_execute(&format!("DROP SCHEMA {} CASCADE", env.schema)).await?;
        }
        Ok(())
    }

    async fn cpu(&self, processes: &Processes) -> anyhow::Result<Cpu> {
        let of = |children: &[Child]| children.iter().map(|c| resources(c.id()).1).sum::<f64>();
        Ok(Cpu {
            relays: of(&processes.relays),
            bridges: of(&processes.bridges),
            redis: self.cluster.cpu_seconds(),
            postgres: postgres_cpu_seconds(),
            backends: self.owners[0].backend_cpu_seconds(&[RELAY_APP, BRIDGE_APP]).await?,
            ..Cpu::default()
        })
    }

    /// What the deployment's processes cost with nothing to do (claims that find nothing,
    /// blocking reads of every shard that return nothing, workers' polls, broker checks, the
    /// cluster's own traffic), per second: started on the empty outboxes, given 3 s to start,
    /// measured over 10 s (a measurement window, not a wait for a condition), then stopped.
    async fn at_rest(&self) -> anyhow::Result<Cpu> {
        let processes = self.spawn()?;
        self.rest_of(&processes).await
    }

    /// What `processes`, just started with nothing to do, cost per second: 3 s to start, then
    /// 10 s measured (a measurement window, not a wait for a condition).
    async fn rest_of(&self, processes: &Processes) -> anyhow::Result<Cpu> {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let started = self.cpu(processes).await?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok(self.cpu(processes).await?.since(&started).per_second(10.0))
    }

    /// Waits until each group's audit log holds `per_owner` events of every owner.
    async fn until_applied(&self, per_owner: usize) -> anyhow::Result<()> {
        let lasts: Vec<String> = (0..OWNERS).map(|k| format!("'o{k}-{per_owner}'")).collect();
        let probe = format!("SELECT count(*) FROM audit_logs WHERE audit_id IN ({})", lasts.join(", "));
        let total = (per_owner * OWNERS) as i64;
        for group in &self.groups {
            time_until(Duration::from_secs(1800), || async {
                Ok(group.scalar(&probe).await? == OWNERS as i64
                    && group.scalar("SELECT count(*) FROM audit_logs").await? >= total)
            })
            .await?;
        }
        Ok(())
    }

    async fn applied(&self) -> anyhow::Result<i64> {
        let mut sum = 0;
        for group in &self.groups {
            sum += group.scalar("SELECT count(*) FROM audit_logs").await?;
        }
        Ok(sum)
    }

    /// Stops the processes; fails unless each group's audit log and inbox hold every one of the
    /// `total` events once, and no owner holds a dead row; drops the schemas.
    async fn finish(self, processes: Processes, total: usize) -> anyhow::Result<()> {
        drop(processes);
        for (g, group) in self.groups.iter().enumerate() {
            let logged = group.scalar("SELECT count(DISTINCT audit_id) FROM audit_logs").await?;
            let rows = group.scalar("SELECT count(*) FROM audit_logs").await?;
            let inbox = group.scalar("SELECT count(*) FROM consumer_inbox").await?;
            anyhow::ensure!(
                logged == total as i64 && rows == total as i64 && inbox == total as i64,
                "group g{g}: {logged} distinct events in audit_logs, {rows} rows, {inbox} inbox rows; expected {total} each"
            );
        }
        for owner in &self.owners {
            owner.ensure_none_dead().await?;
        }
        self.drop_schemas().await
    }
}

/// The backlog run: the deployment measured at rest, then `events` written before the
/// processes start, timed until both groups' audit logs hold every one.
pub async fn run(
    database_url: &str,
    binary: &std::path::Path,
    dir: &std::path::Path,
    events: usize,
) -> anyhow::Result<ScaleRun> {
    let deployment = Deployment::new(database_url, binary, dir).await?;
    let rest = deployment.at_rest().await?;
    let per_owner = events / OWNERS;
    for (k, owner) in deployment.owners.iter().enumerate() {
        owner.fill(per_owner, &format!("o{k}")).await?;
    }
    let before = deployment.cpu(&Processes { relays: Vec::new(), bridges: Vec::new() }).await?;
    let (started, from) = (Instant::now(), deployment.clock().await?);
    let processes = deployment.spawn()?;
    deployment.until_applied(per_owner).await?;
    let seconds = started.elapsed().as_secs_f64();
    let (after, to) = (deployment.cpu(&processes).await?, deployment.clock().await?);
    let total = per_owner * OWNERS;
    // Every takeover and settle of the run started between the two marks.
    let (bridge_fill, relay_fill) = deployment.counted_between(&from, &to).await?.fills();
    deployment.finish(processes, total).await?;
    let cpu = after.since(&before);
    Ok(ScaleRun { events: total, seconds, cpu, bridge_fill, relay_fill, rest: Some(rest), insert_us: 0.0 })
}

/// The steady run: a producer writes `rate` events/s (spread over the owners, every 50 ms)
/// while everything runs; after `warmup`, CPU and the events applied are measured over
/// `window`. The producer's own inserts are measured first, alone, for 2 s.
pub async fn run_at(
    database_url: &str,
    binary: &std::path::Path,
    dir: &std::path::Path,
    rate: f64,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<ScaleRun> {
    let deployment = Deployment::new(database_url, binary, dir).await?;
    let per_tick = per_tick(rate);
    let written: Vec<AtomicUsize> = (0..OWNERS).map(|_| Default::default()).collect();
    let produce = |until: Instant| deployment.produce(&written, per_tick, until);
    // The producer alone for 2 s: what its inserts cost Postgres (the rows become a small
    // backlog, delivered during the warm-up).
    let pg = postgres_cpu_seconds();
    produce(Instant::now() + Duration::from_secs(2)).await?;
    let produced = written.iter().map(|w| w.load(Ordering::Relaxed)).sum::<usize>();
    let insert_us = (postgres_cpu_seconds() - pg) / produced as f64 * 1e6;

    let processes = deployment.spawn()?;
    let measured = async {
        tokio::time::sleep(warmup).await;
        let (before, applied, from) =
            (deployment.cpu(&processes).await?, deployment.applied().await?, deployment.clock().await?);
        let started = Instant::now();
        tokio::time::sleep(window).await;
        let (after, applied_after, to) =
            (deployment.cpu(&processes).await?, deployment.applied().await?, deployment.clock().await?);
        let events = (applied_after - applied) as f64 / GROUPS as f64;
        anyhow::Ok((after.since(&before), events, started.elapsed(), from, to))
    };
    let (produced, measured) = futures_util::future::join(produce(Instant::now() + warmup + window), measured).await;
    produced?;
    let (cpu, events, elapsed, from, to) = measured?;
    let per_owner = written[0].load(Ordering::Relaxed);
    deployment.until_applied(per_owner).await?;
    // The window's own transactions: the producer's first 2 s, a backlog when the processes
    // start, went out in fuller batches before it.
    let (bridge_fill, relay_fill) = deployment.counted_between(&from, &to).await?.fills();
    deployment.finish(processes, per_owner * OWNERS).await?;
    Ok(ScaleRun {
        events: events as usize,
        seconds: elapsed.as_secs_f64(),
        cpu,
        bridge_fill,
        relay_fill,
        rest: None,
        insert_us,
    })
}
