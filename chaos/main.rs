//! handoff-chaos: the whole chain on its own Postgres and Redis, under faults, then counted.
//!
//! A producer commits events at a steady rate; two relays, two bridges and a worker (the release
//! binary) carry them to `audit_logs`. Meanwhile the run SIGKILLs handoff processes at random
//! moments and restarts them, crashes and restarts Postgres and Redis, cuts every connection
//! through its TCP proxies, and makes Redis lose every key (the relays must notice and re-drive).
//! At the end it waits for the chain to drain and checks: nothing lost, no duplicate stream
//! entries (dedupe is on), exactly one audit log per event, nothing DEAD.
//!
//! `--broker nats`: the same chain through NATS JetStream on a nats-server of the run's own —
//! the server crashed and restarted with its store, its connections cut, its stream deleted and
//! created again empty (the broker loss the relays must notice); duplicates are counted by
//! `Nats-Msg-Id` over the stream's messages.
//!
//! `--broker kafka`: through a three-node KRaft cluster of the run's own (every topic on all
//! three, `min.insync.replicas = 2`) — a node at a time SIGKILLed and started again, the topic
//! deleted and made again empty, every client connection cut (each node advertises a listener
//! for clients at a proxy of the run's). Kafka keeps no dedupe window: the relays
//! killed between a produce and its settle produce those rows again, so the topic's duplicates
//! are counted, not refused; the inbox must still hold each event once.

mod kafka;
mod proxy;
mod servers;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use fred::prelude::*;
use rand::RngExt;
use tokio_postgres::NoTls;

#[derive(Parser)]
struct Args {
    /// Events the producer commits.
    #[arg(long, default_value_t = 10_000)]
    events: i64,
    /// Events per second.
    #[arg(long, default_value_t = 500)]
    rate: i64,
    /// SIGKILLs of handoff processes.
    #[arg(long, default_value_t = 6)]
    kills: usize,
    /// Crash-restarts of each server.
    #[arg(long, default_value_t = 1)]
    restarts: usize,
    /// Connection cuts through the proxies.
    #[arg(long, default_value_t = 2)]
    cuts: usize,
    /// Broker data losses: every key of Redis flushed (what a failover to an empty replica, an
    /// eviction or an operator's FLUSHALL does); the relays must notice and re-drive.
    #[arg(long, default_value_t = 1)]
    losses: usize,
    #[arg(long, default_value = "target/release/handoff")]
    binary: PathBuf,
    #[arg(long, default_value = "target/chaos")]
    dir: PathBuf,
    /// scripts/services, which starts the Kafka cluster of a Kafka run.
    #[arg(long, default_value = "scripts/services")]
    services: PathBuf,
    /// How long the chain may take to drain after the producer stops.
    #[arg(long, default_value_t = 300)]
    drain_seconds: u64,
    /// The broker: redis, nats or kafka.
    #[arg(long, default_value = "redis")]
    broker: String,
}

/// The broker server of the run.
enum Broker {
    Redis(servers::Redis),
    Nats(servers::Nats),
    Kafka(servers::Kafka),
}

/// The JetStream stream (and its subjects) of a NATS run.
const NATS_STREAM: &str = "CHAOS";
const NATS_SUBJECTS: &str = "chaos.*";
/// The Kafka topic of the `user` events (the relays' `chaos.{aggregate_type}`).
const KAFKA_TOPIC: &str = "chaos.user";

impl Broker {
    /// The port a proxy may stand in front of (not Kafka's: see the module's comment).
    fn port(&self) -> Option<u16> {
        match self {
            Broker::Redis(r) => Some(r.port),
            Broker::Nats(n) => Some(n.port),
            Broker::Kafka(_) => None,
        }
    }

    /// Crashes the broker (one node of a cluster) and starts it again; says what it did.
    async fn crash_and_restart(&mut self) -> anyhow::Result<String> {
        match self {
            Broker::Redis(r) => r.crash_and_restart().await.map(|()| "crash + restart Redis".into()),
            Broker::Nats(n) => n.crash_and_restart().await.map(|()| "crash + restart nats-server".into()),
            Broker::Kafka(k) => k.crash_and_restart().await.map(|node| format!("crash + restart Kafka node {node}")),
        }
    }

    /// Kafka keeps no dedupe window across a relay's crash (docs/explanation/delivery.md).
    fn dedupes(&self) -> bool {
        !matches!(self, Broker::Kafka(_))
    }

    async fn lose_everything(&self) -> anyhow::Result<&'static str> {
        match self {
            Broker::Redis(r) => r.lose_everything().await.map(|()| "Redis loses every key"),
            Broker::Nats(n) => n
                .lose_everything(NATS_STREAM, NATS_SUBJECTS)
                .await
                .map(|()| "the JetStream stream is lost (deleted, created again empty)"),
            Broker::Kafka(k) => kafka::lose_topic(&k.bootstrap, KAFKA_TOPIC)
                .await
                .map(|()| "the Kafka topic is lost (deleted, created again empty)"),
        }
    }

    fn stop(&mut self) {
        match self {
            Broker::Redis(r) => r.stop(),
            Broker::Nats(n) => n.stop(),
            Broker::Kafka(k) => k.stop(),
        }
    }

    /// The event id of every entry the stream holds, in order.
    async fn event_ids(&self) -> anyhow::Result<Vec<String>> {
        match self {
            Broker::Redis(r) => {
                let client = Client::new(Config::from_url(&format!("redis://127.0.0.1:{}", r.port))?, None, None, None);
                client.init().await?;
                let entries: Vec<(String, HashMap<String, String>)> =
                    client.xrange("chaos:user", "-", "+", None).await?;
                Ok(entries.into_iter().map(|(_, f)| f.get("event_id").cloned().unwrap_or_default()).collect())
            }
            Broker::Nats(n) => {
                let client = async_nats::connect(format!("nats://127.0.0.1:{}", n.port)).await?;
                let mut stream = async_nats::jetstream::new(client).get_stream(NATS_STREAM).await?;
                let state = stream.info().await?.state.clone();
                let mut ids = Vec::new();
                for sequence in state.first_sequence..=state.last_sequence {
                    if let Ok(message) = stream.get_raw_message(sequence).await {
                        ids.push(message.headers.get("event_id").map(|v| v.as_str().to_owned()).unwrap_or_default());
                    }
                }
                Ok(ids)
            }
            Broker::Kafka(k) => kafka::event_ids(&k.bootstrap, KAFKA_TOPIC).await,
        }
    }
}

/// The handoff processes of the run, restartable by name.
struct Fleet {
    binary: PathBuf,
    dir: PathBuf,
    configs: Vec<(String, String)>,
    children: HashMap<String, Child>,
}

impl Fleet {
    fn start(&mut self, name: &str) -> anyhow::Result<()> {
        let config = &self.configs.iter().find(|(n, _)| n == name).expect("known process").1;
        let path = self.dir.join(format!("{name}.toml"));
        std::fs::write(&path, config)?;
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join(format!("{name}.log")))?;
        let child = Command::new(&self.binary)
            .args(["run", "--config"])
            .arg(&path)
            .env("RUST_LOG", "warn,handoff=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        self.children.insert(name.to_owned(), child);
        Ok(())
    }

    fn kill(&mut self, name: &str) {
        if let Some(mut child) = self.children.remove(name) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn names(&self) -> Vec<String> {
        self.configs.iter().map(|(n, _)| n.clone()).collect()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for name in self.names() {
            self.kill(&name);
        }
    }
}

/// Where the relays and bridges send and read the events.
enum Via<'a> {
    Redis,
    /// NATS JetStream at this URL.
    Nats(&'a str),
    /// Kafka at these bootstrap servers.
    Kafka(&'a str),
}

/// The processes' configs.
fn configs(pg_url: &str, redis_url: &str, via: Via<'_>) -> Vec<(String, String)> {
    let mut base = format!(
        "[database]\nurl = \"{pg_url}\"\npool_size = 4\nconnect_timeout = \"2s\"\n[redis]\nurl = \"{redis_url}\"\ncommand_timeout = \"2s\"\n\
         [telemetry]\nlisten = \"127.0.0.1:0\"\n[shutdown]\ngrace_period = \"5s\"\n"
    );
    let broker = match via {
        Via::Redis => return redis_configs(&base),
        Via::Nats(url) => {
            base.push_str(&format!("[nats]\nurl = \"{url}\"\nstream = \"{NATS_STREAM}\"\ntimeout = \"2s\"\n"));
            "nats"
        }
        Via::Kafka(bootstrap) => {
            base.push_str(&format!(
                "[kafka]\nbootstrap_servers = \"{bootstrap}\"\ntimeout = \"2s\"\ndelivery_timeout = \"10s\"\n"
            ));
            "kafka"
        }
    };
    // The same processes on the other broker: on NATS the JetStream stream's duplicate window
    // is the dedupe; Kafka has none.
    redis_configs(&base)
        .into_iter()
        .map(|(name, config)| {
            let config = config
                .replace(
                    "stream = \"chaos:{aggregate_type}\"",
                    &format!("broker = \"{broker}\"\nstream = \"chaos.{{aggregate_type}}\""),
                )
                .replace("[relay.dedupe]\nwindow = \"1h\"\n", "")
                .replace(
                    "streams = [{ key = \"chaos:user\"",
                    &format!("broker = \"{broker}\"\nstreams = [{{ key = \"chaos.user\""),
                );
            (name, config)
        })
        .collect()
}

fn redis_configs(base: &str) -> Vec<(String, String)> {
    let relay = "[[relay]]\nname = \"auth\"\nstream = \"chaos:{aggregate_type}\"\nbatch_size = 200\npoll_interval = \"50ms\"\nlease = \"3s\"\nmax_attempts = 1000\nmax_expired_claims = 1000\n[relay.dedupe]\nwindow = \"1h\"\n";
    let bridge = |instance: &str| {
        format!(
            "[[bridge]]\nname = \"admin\"\nconsumer = \"admin\"\ninstance = \"{instance}\"\nstreams = [{{ key = \"chaos:user\", owner = \"auth\" }}]\n\
             block = \"200ms\"\nclaim_idle = \"3s\"\nmax_deliveries = 1000\n[bridge.validate]\npayload_id_field = \"auditId\"\n"
        )
    };
    let worker = "[[worker]]\nname = \"audit\"\nconsumer = \"admin\"\nbatch_size = 100\npoll_interval = \"50ms\"\nlease = \"3s\"\nmax_attempts = 1000\nmax_expired_leases = 1000\n\
                  [[worker.handler]]\nevent_types = [\"*\"]\nsql = [\"INSERT INTO audit_logs (audit_id, source, action, actor, detail) VALUES (:event_id, :owner, :event_type, :payload.actor, :payload) ON CONFLICT (audit_id) DO NOTHING\"]\n";
    const SEED_HANDLER: &str = "VALUES (:event_id, :owner, :event_type, :payload.actor, :payload)";
    const BATCH_HANDLER: &str = "SELECT e.id, e.owner, e.type, e.payload ->> 'actor', e.payload FROM unnest(:event_ids::text[], :owners::text[], :event_types::text[], :payloads::jsonb[]) AS e(id, owner, type, payload)";
    vec![
        ("relay-1".into(), format!("{base}{relay}")),
        // The default claim (auto: locked here) beside an explicitly leased replica on the same
        // table: both shapes, and their mix, under the same faults.
        (
            "relay-2".into(),
            format!("{base}{}", relay.replace("lease = \"3s\"\n", "lease = \"3s\"\nclaim = \"leased\"\n")),
        ),
        ("bridge-1".into(), format!("{base}{}", bridge("bridge-1"))),
        // The second bridge of the group applies the handler at take-over (written per batch), with
        // a worker in its process for what it leaves PENDING: both modes share the group.
        (
            "bridge-2".into(),
            format!(
                "{base}{}{}",
                bridge("bridge-2").replace("[bridge.validate]", "apply = \"audit\"\n[bridge.validate]"),
                worker.replace(SEED_HANDLER, BATCH_HANDLER)
            ),
        ),
        ("worker".into(), format!("{base}{worker}")),
    ]
}

/// Commits events at `rate`/s until `total`, retrying through outages; counts only commits.
async fn produce(url: String, total: i64, rate: i64, committed: Arc<AtomicI64>) {
    let per_tick = (rate / 20).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut client: Option<tokio_postgres::Client> = None;
    while committed.load(Ordering::SeqCst) < total {
        tick.tick().await;
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            client = match tokio_postgres::connect(&url, NoTls).await {
                Ok((c, conn)) => {
                    tokio::spawn(conn);
                    Some(c)
                }
                Err(_) => continue,
            };
        }
        let Some(db) = client.as_ref() else { continue };
        let from = committed.load(Ordering::SeqCst);
        let n = per_tick.min(total - from);
        let insert = db
            .execute(
                "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
                 SELECT 'chaos-' || ($1 + g), 'user', 'user-' || (($1 + g) % 97), 'auth.mfa_policy_changed',
                        jsonb_build_object('auditId', 'chaos-' || ($1 + g), 'actor', 'admin')
                 FROM generate_series(1, $2::bigint) g",
                &[&from, &n],
            )
            .await;
        // A failed commit may still have committed (the reply was lost): look before counting.
        match insert {
            Ok(_) => {
                committed.fetch_add(n, Ordering::SeqCst);
            }
            Err(_) => {
                client = None;
                if let Ok((c, conn)) = tokio_postgres::connect(&url, NoTls).await {
                    tokio::spawn(conn);
                    let last = format!("chaos-{}", from + n);
                    if let Ok(row) =
                        c.query_one("SELECT count(*) FROM audit_outbox WHERE event_id = $1", &[&last]).await
                        && row.get::<_, i64>(0) == 1
                    {
                        committed.fetch_add(n, Ordering::SeqCst);
                    }
                    client = Some(c);
                }
            }
        }
    }
}

#[derive(Debug)]
enum Fault {
    Kill,
    RestartPostgres,
    RestartBroker,
    Cut,
    LoseBrokerData,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _ = std::fs::remove_dir_all(&args.dir);
    std::fs::create_dir_all(&args.dir)?;
    let dir = std::fs::canonicalize(&args.dir)?;
    println!("chaos: starting private Postgres and {} under {}", args.broker, dir.display());
    let pg = servers::Postgres::start(&dir).await?;
    let mut broker = match args.broker.as_str() {
        "redis" => Broker::Redis(servers::Redis::start(&dir).await?),
        "nats" => Broker::Nats(servers::Nats::start(&dir).await?),
        "kafka" => {
            let kafka = servers::Kafka::start(&dir, &args.services).await?;
            kafka::create_topic(&kafka.bootstrap, KAFKA_TOPIC).await?;
            Broker::Kafka(kafka)
        }
        other => anyhow::bail!("--broker is redis, nats or kafka, not {other}"),
    };
    let pg_proxy = proxy::Proxy::start(pg.port).await?;
    let broker_proxy = match broker.port() {
        Some(port) => Some(proxy::Proxy::start(port).await?),
        None => None,
    };
    let direct = pg.url(pg.port);
    let through_proxy = pg.url(pg_proxy.port);
    let proxied = broker_proxy.as_ref().map(|p| p.port).unwrap_or_default();
    // Redis is used only on a Redis run; elsewhere its section points at a port nothing
    // listens on.
    let (redis_url, nats_url) = (format!("redis://127.0.0.1:{proxied}"), format!("nats://127.0.0.1:{proxied}"));
    let via = match &broker {
        Broker::Redis(_) => Via::Redis,
        Broker::Nats(_) => Via::Nats(&nats_url),
        Broker::Kafka(k) => Via::Kafka(&k.client_bootstrap),
    };
    let redis_url = if matches!(via, Via::Redis) { redis_url } else { "redis://127.0.0.1:1".to_owned() };
    let configs = configs(&through_proxy, &redis_url, via);

    // migrate creates the schema (every role's: one database holds the owner's and the
    // consumer's tables here) and, on NATS, the JetStream stream the relays need.
    let migrate_config = dir.join("migrate.toml");
    let migrate = match &broker {
        Broker::Redis(_) | Broker::Kafka(_) => format!("[database]\nurl = \"{direct}\"\n"),
        Broker::Nats(_) => configs[0].1.replace(&through_proxy, &direct),
    };
    std::fs::write(&migrate_config, migrate)?;
    let status = Command::new(&args.binary)
        .args(["migrate", "--role", "all", "--config"])
        .arg(&migrate_config)
        .stdout(Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "migrate failed");

    let mut fleet = Fleet { binary: args.binary.clone(), dir: dir.clone(), configs, children: HashMap::new() };
    for name in fleet.names() {
        fleet.start(&name)?;
    }
    let committed = Arc::new(AtomicI64::new(0));
    let producer = tokio::spawn(produce(direct.clone(), args.events, args.rate, committed.clone()));

    let mut faults: Vec<Fault> = Vec::new();
    faults.extend((0..args.kills).map(|_| Fault::Kill));
    faults.extend((0..args.restarts).flat_map(|_| [Fault::RestartPostgres, Fault::RestartBroker]));
    faults.extend((0..args.cuts).map(|_| Fault::Cut));
    faults.extend((0..args.losses).map(|_| Fault::LoseBrokerData));
    let production = Duration::from_secs_f64(args.events as f64 / args.rate as f64);
    let mut rng = rand::rng();
    // Shuffle, then space the faults over the production time.
    for i in (1..faults.len()).rev() {
        faults.swap(i, rng.random_range(0..=i));
    }
    let spacing = production / (faults.len() as u32 + 1);
    let started = Instant::now();
    let mut done = Vec::new();
    for fault in faults {
        let jitter = rng.random_range(0.5..1.5);
        tokio::time::sleep(spacing.mul_f64(jitter)).await;
        match &fault {
            Fault::Kill => {
                let names = fleet.names();
                let victim = names[rng.random_range(0..names.len())].clone();
                fleet.kill(&victim);
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..1500))).await;
                fleet.start(&victim)?;
                done.push(format!("SIGKILL {victim}"));
            }
            Fault::RestartPostgres => {
                pg.crash_and_restart().await?;
                done.push("crash + restart Postgres".into());
            }
            Fault::RestartBroker => {
                done.push(broker.crash_and_restart().await?);
            }
            Fault::Cut => {
                let database = pg_proxy.cut();
                let to_broker = match (&broker_proxy, &broker) {
                    (Some(proxy), _) => proxy.cut(),
                    (None, Broker::Kafka(k)) => k.proxies.iter().map(proxy::Proxy::cut).sum(),
                    (None, _) => 0,
                };
                done.push(format!("cut every connection ({database} to Postgres, {to_broker} to the broker)"));
            }
            Fault::LoseBrokerData => {
                done.push(broker.lose_everything().await?.into());
            }
        }
        println!("chaos: t={:>5.1}s {}", started.elapsed().as_secs_f64(), done.last().unwrap());
    }
    producer.await?;
    let produced = committed.load(Ordering::SeqCst);
    println!("chaos: producer done ({produced} events committed); waiting for the chain to drain");

    let (db, conn) = tokio_postgres::connect(&direct, NoTls).await?;
    tokio::spawn(conn);
    let count = |sql: &'static str| {
        let db = &db;
        async move { db.query_one(sql, &[]).await.map(|r| r.get::<_, i64>(0)).unwrap_or(-1) }
    };
    // Drained: every event applied and every outbox row settled. Applied alone is not enough: a
    // broker loss late in the run re-drives rows whose events were already applied, and the
    // relays must deliver those again (the inbox drops the copies).
    let drain_started = Instant::now();
    while (count("SELECT count(*) FROM audit_logs").await < produced
        || count("SELECT count(*) FROM audit_outbox WHERE status NOT IN ('DELIVERED', 'DEAD')").await != 0)
        && drain_started.elapsed() < Duration::from_secs(args.drain_seconds)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let entries = broker.event_ids().await?;
    let mut per_event: HashMap<String, usize> = HashMap::new();
    for event_id in &entries {
        *per_event.entry(event_id.clone()).or_default() += 1;
    }
    let outbox = count("SELECT count(*) FROM audit_outbox").await;
    let delivered = count("SELECT count(*) FROM audit_outbox WHERE status = 'DELIVERED'").await;
    let lost = count("SELECT count(*) FROM audit_outbox o WHERE NOT EXISTS (SELECT 1 FROM audit_logs a WHERE a.audit_id = o.event_id)").await;
    let inbox = count("SELECT count(*) FROM consumer_inbox").await;
    let audit = count("SELECT count(*) FROM audit_logs").await;
    let dead = count("SELECT (SELECT count(*) FROM audit_outbox WHERE status = 'DEAD') + (SELECT count(*) FROM consumer_inbox WHERE status = 'DEAD')").await;
    let poison = count("SELECT count(*) FROM consumer_inbox_poison").await;
    let duplicates: usize = per_event.values().map(|n| n - 1).sum();
    // A locked claim settles without bumping the fencing token a leased claim bumps: both
    // shapes must have delivered for the run to say anything about both.
    let by_locked = count("SELECT count(*) FROM audit_outbox WHERE status = 'DELIVERED' AND claim_token = 0").await;
    let by_leased = count("SELECT count(*) FROM audit_outbox WHERE status = 'DELIVERED' AND claim_token > 0").await;
    // A broker loss re-drives every row it finds missing, and another claim delivers it again:
    // then a row's final shape says who delivered it last. So whether relay-1 delivered in
    // locked transactions is also read from its log (it appends across restarts).
    let redriven = count("SELECT count(*) FROM audit_outbox WHERE redrives > 0").await;
    let locked_claims = std::fs::read_to_string(dir.join("relay-1.log"))
        .unwrap_or_default()
        .lines()
        .filter(|line| {
            line.contains("locked=true") && line.contains("claimed rows=") && !line.contains("claimed rows=0 ")
        })
        .count() as i64;
    // The same for the worker (claim = auto: locked here, with a leased turn after each start,
    // once per lease and for every batch with a row that needed the leased claim).
    // A row applied at take-over is inserted PROCESSED: stamped in the insert's own transaction.
    let applied = count(
        "SELECT count(*) FROM consumer_inbox WHERE status = 'PROCESSED' AND processed_at = received_at AND lease_token = 0",
    )
    .await;
    let worker_locked = count(
        "SELECT count(*) FROM consumer_inbox WHERE status = 'PROCESSED' AND lease_token = 0 AND processed_at <> received_at",
    )
    .await;
    let worker_leased =
        count("SELECT count(*) FROM consumer_inbox WHERE status = 'PROCESSED' AND lease_token > 0").await;
    if count("SELECT count(*) FROM audit_logs").await < produced {
        let activity = db
            .query(
                "SELECT application_name, state, coalesce(wait_event_type, '') || ':' || coalesce(wait_event, ''),
                        left(query, 120), (now() - state_change)::text
                 FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap_or_default();
        for r in activity {
            let cells: Vec<String> = (0..5).map(|i| r.get::<_, Option<String>>(i).unwrap_or_default()).collect();
            println!("chaos: backend {cells:?}");
        }
    }
    for table in ["audit_outbox", "consumer_inbox"] {
        let rows = db
            .query(
                &format!("SELECT status, count(*), max(attempts), min(lease_expires_at)::text FROM {table} GROUP BY 1"),
                &[],
            )
            .await
            .unwrap_or_default();
        for r in rows {
            let (status, n, attempts, lease): (String, i64, i32, Option<String>) =
                (r.get(0), r.get(1), r.get(2), r.get(3));
            println!("chaos: {table}: {status} {n} rows (max attempts {attempts}, earliest lease {lease:?})");
        }
    }
    drop(fleet);
    pg.stop();
    broker.stop();

    println!(
        "\nchaos ({}): {} faults in {:.0}s: {}",
        args.broker,
        done.len(),
        started.elapsed().as_secs_f64(),
        done.join(", ")
    );
    println!("| figure | value |\n|---|---:|");
    for (name, value) in [
        ("events produced (committed)", produced),
        ("outbox rows", outbox),
        ("delivered", delivered),
        ("… in a locked transaction (relay-1, claim = auto)", by_locked),
        ("… under a lease (relay-2, and reclaimed rows)", by_leased),
        ("… re-driven after a broker loss", redriven),
        ("locked claims relay-1 made (its log)", locked_claims),
        ("lost (committed, not in audit_logs)", lost),
        ("stream entries", entries.len() as i64),
        (
            if broker.dedupes() {
                "duplicate stream entries"
            } else {
                "duplicate stream entries (Kafka: no dedupe window; the inbox collapses them)"
            },
            duplicates as i64,
        ),
        ("inbox rows", inbox),
        ("… applied at take-over (bridge-2)", applied),
        ("… processed in a locked transaction (worker, claim = auto)", worker_locked),
        ("… processed under a lease", worker_leased),
        ("audit_logs rows", audit),
        ("rows left DEAD", dead),
        ("poison records", poison),
    ] {
        println!("| {name} | {value} |");
    }
    let ok = produced == args.events
        && outbox == produced
        && lost == 0
        && audit == produced
        && inbox == produced
        && dead == 0
        && (by_locked > 0 || redriven > 0 && locked_claims > 0)
        && by_leased > 0
        // The worker processes only what bridge-2 did not apply at take-over: on Kafka the
        // group may give bridge-2 every partition for the whole run (bridge-1 killed early).
        && (worker_locked > 0 || applied == inbox)
        && applied > 0
        && (duplicates == 0 || !broker.dedupes())
        && poison == 0;
    if ok {
        println!("\nchaos: PASS");
        Ok(())
    } else {
        anyhow::bail!("chaos: FAIL (see the figures above and the logs in {})", dir.display())
    }
}
