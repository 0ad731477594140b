//! handoff-bench: measures and prints; it asserts nothing. See docs/performance.md
//! and `scripts/bench`.
//!
//! Every figure is the median of `--repeat` runs; ratios compare figures from the same run of
//! the benchmark on the same data, so machine noise cancels out as far as it can.

mod broker;
mod cluster;
mod consumer;
use consumer::Mode;
mod env;
mod explain;
mod kafka;
mod latency;
mod nats;
mod plan;
mod relay;
mod retention;
mod scale;

use std::path::PathBuf;

use clap::Parser;
use serde::Serialize;

#[derive(Parser)]
#[command(about = "Benchmark handoff against its own limits and the seed's per-row dispatcher")]
struct Args {
    #[arg(long, env = "HANDOFF_BENCH_DATABASE_URL", default_value = "postgres://postgres@127.0.0.1:5432/handoff_test")]
    database_url: String,
    #[arg(long, env = "HANDOFF_BENCH_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// Events per throughput run.
    #[arg(long, default_value_t = 100_000)]
    events: usize,
    /// Runs per figure (the median is reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    #[arg(long, value_delimiter = ',', default_value = "100,500,1000")]
    batch_sizes: Vec<u32>,
    /// Delivered rows already in the table for the bloat run.
    #[arg(long, default_value_t = 1_000_000)]
    history: usize,
    /// Events per bloat run (clean, bloated and vacuumed history). More than `--events`: at
    /// 100,000 a run lasted about two seconds and the turns' ratios spread from 64% to 118%
    /// across benchmark runs; what costs the same whatever the run's length (an autovacuum pass
    /// over a million rows, the first writes after a checkpoint) weighs less in a longer one.
    #[arg(long, default_value_t = 300_000)]
    history_events: usize,
    /// Events for the per-row baseline (it is slow).
    #[arg(long, default_value_t = 20_000)]
    baseline_events: usize,
    /// Events for the worker and end-to-end runs.
    #[arg(long, default_value_t = 50_000)]
    consumer_events: usize,
    /// Events per bridge run and per run of its SQL limit. At 50,000 either took about a second,
    /// and the ratio of the two moved between 70% and 106% from one benchmark run to the next.
    #[arg(long, default_value_t = 200_000)]
    bridge_events: usize,
    /// Seconds per dwell-latency run.
    #[arg(long, default_value_t = 10)]
    latency_seconds: u64,
    /// Length of the sustained run (`--only sustained`; not part of the default parts).
    #[arg(long, default_value_t = 600)]
    sustained_seconds: u64,
    /// The sustained run's relay claim: auto (the default config's, which is locked here),
    /// leased or locked.
    #[arg(long, default_value = "auto")]
    sustained_claim: String,
    #[arg(long, default_value = "target/release/handoff")]
    binary: PathBuf,
    /// A handoff binary of an earlier build: the chain (`--only consumer` or `chain`) runs it
    /// too, the worker applying, taking turns with this build's chain in the same sitting.
    #[arg(long)]
    earlier_binary: Option<PathBuf>,
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// Run only these parts: relay, baseline, dwell, bloat, consumer, broker, nats (default: all); kafka and sustained
    /// only when named; bridge or chain (the consumer part's bridge or chain alone) when named;
    /// replicas (1 to 8 relay processes on one outbox) when named.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Print the capacity model (docs/explanation/capacity.md) for --services, --rate, --bytes, --groups,
    /// --families and --headroom instead of measuring; costs from --costs where it holds them.
    #[arg(long)]
    plan: bool,
    /// Delivered rows of history for the retention run (`--only retention`; not part of the
    /// default parts).
    #[arg(long, default_value_t = 10_000_000)]
    retention_history: usize,
    /// Write docs/dev/claim-plans.md: the relay's statements' plans on a plain and a partitioned outbox.
    #[arg(long)]
    explain: bool,
    /// Rows of the outbox --explain builds.
    #[arg(long, default_value_t = 1_000_000)]
    explain_rows: usize,
    /// Owner services (each with its outbox), for --plan.
    #[arg(long, default_value_t = 40)]
    services: u32,
    /// Peak events per second of each service, for --plan.
    #[arg(long, default_value_t = 2000.0)]
    rate: f64,
    /// Payload bytes per event, for --plan.
    #[arg(long, default_value_t = 300.0)]
    bytes: f64,
    /// Consumer groups reading every event, for --plan.
    #[arg(long, default_value_t = 2)]
    groups: u32,
    /// Stream families the events spread over, for --plan (0: one per service).
    #[arg(long, default_value_t = 0)]
    families: u32,
    /// Share of a core each process may use at peak, for --plan.
    #[arg(long, default_value_t = 0.5)]
    headroom: f64,
    /// Events of the scale run (`--only scale`), spread over its four owner databases.
    #[arg(long, default_value_t = 200_000)]
    scale_events: usize,
    /// Rates (events/s) of the scale run's steady form, a producer writing while it runs; none
    /// by default (`scripts/bench --scale` names some).
    #[arg(long, value_delimiter = ',')]
    scale_rates: Vec<f64>,
    /// Seconds each steady scale run is measured over (after 5 s of warm-up), and the relays
    /// alone (after 3 s).
    #[arg(long, default_value_t = 15)]
    scale_seconds: u64,
    /// results.json files whose measured costs --plan uses (a later one winning; built-in
    /// figures for what none holds).
    #[arg(long, value_delimiter = ',', default_value = "target/bench/results.json")]
    costs: Vec<PathBuf>,
}

impl Args {
    fn wants(&self, part: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|p| p == part)
    }
}

#[derive(Serialize, Clone)]
struct Figure {
    section: &'static str,
    name: String,
    value: f64,
    unit: &'static str,
}

struct Report(Vec<Figure>);

impl Report {
    fn add(&mut self, section: &'static str, name: impl Into<String>, value: f64, unit: &'static str) {
        let name = name.into();
        eprintln!("  {section:<10} {name:<58} {:>12} {unit}", shown(value));
        self.0.push(Figure { section, name, value, unit });
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

async fn repeat<F, Fut, T>(times: usize, mut f: F) -> anyhow::Result<Vec<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut out = Vec::new();
    for _ in 0..times {
        out.push(f().await?);
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.plan {
        anyhow::ensure!(args.headroom > 0.0 && args.headroom <= 1.0, "--headroom must be above 0 and at most 1");
        let inputs = plan::Inputs {
            services: args.services,
            rate: args.rate,
            bytes: args.bytes,
            groups: args.groups,
            families: args.families,
            headroom: args.headroom,
        };
        plan::print(&inputs, &plan::Costs::load(&args.costs));
        return Ok(());
    }
    if args.explain {
        return explain::write(&args.database_url, args.explain_rows).await;
    }
    let env = env::BenchEnv::new(&args.database_url, &args.redis_url, args.binary.clone(), args.out.clone()).await?;
    let mut report = Report(Vec::new());
    // Every figure ran under these server settings (a CI server may run without autovacuum,
    // which says nothing about history or sustained figures in production).
    let settings = env.postgres_settings().await?;
    eprintln!("Postgres settings: {}", settings.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "));
    let n = args.events;
    let r = args.repeat;

    for &batch in args.batch_sizes.iter().filter(|_| args.wants("relay")) {
        relay_part(&env, &args, batch, &mut report).await?;
    }
    if args.wants("baseline") {
        let baseline = median(repeat(r, || relay::per_row_baseline(&env, args.baseline_events)).await?);
        report.add("baseline", "per-row dispatcher (select 50; claim, XADD, mark each)", baseline, "rows/s");
        let singles = report.0.iter().filter(|f| f.section == "relay" && f.name.starts_with("1 relay"));
        let best = singles.map(|f| f.value).fold(0.0, f64::max);
        report.add("ratio", "best single relay process / per-row baseline", best / baseline, "x");
    }
    if args.wants("dwell") {
        dwell(&env, &args, &mut report).await?;
    }
    if args.only.iter().any(|p| p == "replicas") {
        replicas_part(&env, &args, &mut report).await?;
    }
    if args.only.iter().any(|p| p == "retention") {
        retention_part(&args, &mut report).await?;
    }
    if args.wants("bloat") {
        history_part(&env, &args, &mut report).await?;
    }
    if args.only.iter().any(|p| p == "sustained") {
        let seconds = args.sustained_seconds;
        let claim = &args.sustained_claim;
        let extra = format!("concurrency = 2\nclaim = \"{claim}\"");
        let run = relay::sustained(&env, std::time::Duration::from_secs(seconds), &extra).await?;
        let first = run.windows.first().copied().unwrap_or(0.0);
        let whole = run.windows.iter().sum::<f64>() / run.windows.len().max(1) as f64;
        let slowest = run.windows.iter().copied().fold(f64::INFINITY, f64::min);
        report.add("sustained", format!("1 relay, claim {claim}, {seconds} s, first 30 s"), first, "rows/s");
        report.add("sustained", format!("1 relay, claim {claim}, {seconds} s, whole run"), whole, "rows/s");
        report.add("sustained", format!("1 relay, claim {claim}, {seconds} s, slowest 30 s"), slowest, "rows/s");
        report.add("ratio", "sustained whole run / first 30 s", whole / first.max(1.0) * 100.0, "%");
    }
    if args.wants("consumer") {
        consumer_side(&env, &args, &mut report).await?;
    } else {
        if args.only.iter().any(|p| p == "bridge") {
            bridge_part(&env, &args, &mut report).await?;
        }
        if args.only.iter().any(|p| p == "chain") {
            chain_part(&env, &args, &mut report).await?;
        }
    }
    // After the consumer side: the scale run's model takes its costs from the parts before it.
    if args.only.iter().any(|p| p == "scale") {
        scale_part(&args, &mut report).await?;
    }

    if args.wants("broker") {
        broker_side(&args, &mut report).await?;
    }
    if args.wants("nats") {
        nats_part(&env, &args, &mut report).await?;
    }
    if args.only.iter().any(|p| p == "kafka") {
        kafka_part(&env, &args, &mut report).await?;
    }

    env.drop_schema().await?;
    print_table(&report.0);
    let settings: serde_json::Map<String, serde_json::Value> =
        settings.into_iter().map(|(k, v)| (k, serde_json::Value::String(v))).collect();
    let json = serde_json::json!({
        "machine": machine(), "postgres": settings, "events": n, "repeat": r, "figures": report.0
    });
    let path = args.out.join("results.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json)?)?;
    println!("\nwrote {}", path.display());
    Ok(())
}

/// One batch size: the limits with one and two loops, then relays with one loop, two loops
/// (the default) and two processes; each compared with the limit of as many loops.
/// The relay setting that deletes a delivered row instead of marking it.
const DELETE: &str = "settle = \"delete\"";

async fn relay_part(env: &env::BenchEnv, args: &Args, batch: u32, report: &mut Report) -> anyhow::Result<()> {
    let (n, r) = (args.events, args.repeat);
    let rate = |runs: Vec<(f64, f64)>| median(runs.iter().map(|x| x.0).collect());
    let sql1 = rate(repeat(r, || relay::sql_limit(env, n, batch, 1, false, "")).await?);
    let sql2 = rate(repeat(r, || relay::sql_limit(env, n, batch, 2, false, "")).await?);
    let locked1 = rate(repeat(r, || relay::sql_limit(env, n, batch, 1, true, "")).await?);
    let redis = median(repeat(r, || relay::redis_limit(env, n, batch)).await?);
    report.add("limit", format!("claim + mark delivered alone, 1 loop, batch {batch}"), sql1, "rows/s");
    report.add("limit", format!("claim + mark delivered alone, 2 loops, batch {batch}"), sql2, "rows/s");
    report.add("limit", format!("locked claim + mark + commit alone, 1 loop, batch {batch}"), locked1, "rows/s");
    report.add("limit", format!("pipelined XADD alone, batch {batch}"), redis, "entries/s");
    // The default config and delete settle are compared with their limits turn by turn (the
    // limit, then the relay, then the next turn): the machine's speed drifts over minutes, and
    // limits all run first would be measured at another time than the relays they are set beside.
    let runs: [(&str, usize, u32, &str, &str, Limit); 6] = [
        ("1 relay, concurrency 1, claim leased", 1, 1, "leased", "", Limit::Before(sql1)),
        ("1 relay, concurrency 2, claim leased", 1, 2, "leased", "", Limit::Before(sql2)),
        ("2 relays, concurrency 1, claim leased", 2, 1, "leased", "", Limit::Before(sql2)),
        ("1 relay, concurrency 1, claim locked", 1, 1, "locked", "", Limit::Before(locked1)),
        ("1 relay, concurrency 2, claim locked (the default config)", 1, 2, "locked", "", Limit::EachTurn("mark")),
        ("1 relay, concurrency 2, claim locked, settle delete", 1, 2, "locked", DELETE, Limit::EachTurn("delete")),
    ];
    for (name, instances, concurrency, claim, settle, limit) in runs {
        let extra = format!("concurrency = {concurrency}\nclaim = \"{claim}\"\n{settle}");
        let mut results = Vec::new();
        // Each turn's limit: rows/s and CPU per row (Postgres and the client running the SQL).
        let mut limits: Vec<(f64, f64)> = Vec::new();
        for _ in 0..r {
            if let Limit::EachTurn(_) = limit {
                limits.push(relay::sql_limit(env, n, batch, 2, true, settle).await?);
            }
            results.push(relay::throughput(env, n, batch, instances, &extra).await?);
        }
        let rate = median(results.iter().map(|x| x.rows_per_sec).collect());
        report.add("relay", format!("{name}, batch {batch}"), rate, "rows/s");
        let all_cpu = |x: &relay::Run| (x.pg_cpu_seconds + x.cpu_seconds + x.redis_cpu_seconds) / n as f64 * 1e6;
        let ratio = match limit {
            Limit::Before(limit) => rate / limit * 100.0,
            Limit::EachTurn(what) => {
                let (limit, limit_cpu) =
                    (median(limits.iter().map(|x| x.0).collect()), median(limits.iter().map(|x| x.1).collect()));
                let about = format!("locked claim + {what} + commit alone, 2 loops, batch {batch}");
                report.add("limit", about.clone(), limit, "rows/s");
                report.add("cpu account", format!("{about}: CPU per row, Postgres + its client"), limit_cpu, "µs");
                report.add("cpu account", format!("{about}: cores busy"), limit * limit_cpu / 1e6, "cores");
                // Every process's CPU per row beside the limit's: with both cores busy in the
                // limit, the relay can reach at most the limit's share of the CPU it needs per row.
                let all = median(results.iter().map(all_cpu).collect());
                let about = format!("{name}, batch {batch}");
                report.add("cpu account", format!("{about}: CPU per row, Postgres + relay + Redis"), all, "µs");
                report.add("cpu account", format!("{about}: cores busy"), rate * all / 1e6, "cores");
                let shares = limits.iter().zip(&results).map(|(l, x)| l.1 / all_cpu(x) * 100.0).collect();
                let bound =
                    format!("{about}: the limit's CPU per row / the relay's (its share of the limit on full cores)");
                report.add("cpu account", bound, median(shares), "%");
                let ratios: Vec<f64> = limits.iter().zip(&results).map(|(l, x)| x.rows_per_sec / l.0 * 100.0).collect();
                let (low, high) = ratios.iter().fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
                report.add("ratio", format!("{about} / its limit in the same turn: lowest turn"), low, "%");
                report.add("ratio", format!("{about} / its limit in the same turn: highest turn"), high, "%");
                median(ratios)
            }
        };
        report.add(
            "ratio",
            format!("{name}, batch {batch} / its claim shape's SQL limit with as many loops"),
            ratio,
            "%",
        );
        let pg = median(results.iter().map(|x| x.pg_cpu_seconds / n as f64 * 1e6).collect());
        report.add("resources", format!("Postgres CPU per delivered row, {name}, batch {batch}"), pg, "µs");
        if instances == 1 && concurrency == 2 && batch == 500 && settle.is_empty() {
            let rss = median(results.iter().map(|x| x.peak_rss_kb as f64 / 1024.0).collect());
            let cpu = median(results.iter().map(|x| x.cpu_seconds / n as f64 * 100_000.0).collect());
            report.add("resources", format!("relay peak RSS, claim {claim}, batch 500"), rss, "MiB");
            report.add("resources", format!("relay CPU per 100k events, claim {claim}, batch 500"), cpu, "s");
            let redis = median(results.iter().map(|x| x.redis_cpu_seconds / n as f64 * 100_000.0).collect());
            report.add("resources", format!("Redis CPU per 100k events, claim {claim}, batch 500"), redis, "s");
            let startup = median(results.iter().map(|x| x.startup.as_secs_f64() * 1e3).collect());
            report.add("resources", format!("relay start-up to its first entry, claim {claim}"), startup, "ms");
            if claim == "locked" {
                // The same rows in batches of 20: with the figure at 500, what a row costs the
                // relay apart from its claim cycles (the capacity model's per-row term).
                let small = plan::SMALL_BATCH;
                let runs = repeat(r, || relay::throughput(env, n, small, 1, &extra)).await?;
                let cpu = median(runs.iter().map(|x| x.cpu_seconds / n as f64 * 100_000.0).collect());
                report.add("resources", format!("relay CPU per 100k events, claim locked, batch {small}"), cpu, "s");
            }
        }
    }
    Ok(())
}

/// What a relay run's rate is set beside: a limit measured before the relays, or the locked
/// claim with two loops and this settle (`mark`, `delete`), measured in each turn before the relay.
#[derive(Clone, Copy)]
enum Limit {
    Before(f64),
    EachTurn(&'static str),
}

/// Retention over `--retention-history` delivered rows: deleting rows from a plain outbox
/// against dropping the partitions of one partitioned by day, the relay delivering meanwhile.
async fn retention_part(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    use handoff::OutboxLayout;
    let (h, n) = (args.retention_history, args.events);
    for (layout, name, how) in [
        (OutboxLayout::Plain, "plain outbox", "relay.retention deleting rows"),
        (OutboxLayout::Partitioned, "partitioned by day", "relay.partitions dropping partitions"),
    ] {
        let place = (args.database_url.as_str(), args.redis_url.as_str(), args.binary.clone(), args.out.clone());
        let runs = retention::layout(place, layout, h, n).await?;
        let about = format!("{name}, {h} delivered rows, {n} events, batch 500");
        report.add("retention", format!("{about}, no retention: rows/s"), runs.without.rows_per_sec, "rows/s");
        report.add("retention", format!("{about}, {how}: rows/s"), runs.with.rows_per_sec, "rows/s");
        report.add(
            "retention",
            format!("{about}, no retention: Postgres CPU per row"),
            runs.without.pg_cpu_per_row_us,
            "µs",
        );
        report.add("retention", format!("{about}, {how}: Postgres CPU per row"), runs.with.pg_cpu_per_row_us, "µs");
        let cleared = runs.with.cleared_seconds.unwrap_or(f64::NAN);
        report.add("retention", format!("{name}: {h} rows of history removed by {how} in"), cleared, "s");
        let wal = runs.with.wal_bytes as f64 / (1 << 20) as f64;
        report.add("retention", format!("{name}: WAL while {how} and the relay ran"), wal, "MiB");
    }
    Ok(())
}

/// N relay replicas (processes, default config) on one outbox, N from 1 to 8: rows/s and what
/// each delivered row costs Postgres (CPU, WAL) and the relays as N grows.
async fn replicas_part(env: &env::BenchEnv, args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let n = args.events;
    for instances in [1, 2, 4, 8] {
        let mut runs = Vec::new();
        for _ in 0..args.repeat {
            let wal = env.wal_bytes().await?;
            let run = relay::throughput(env, n, 500, instances, "concurrency = 2\nclaim = \"locked\"").await?;
            let wal = (env.wal_bytes().await? - wal) as f64 / n as f64;
            runs.push((run, wal));
        }
        let pick = |f: &dyn Fn(&(relay::Run, f64)) -> f64| median(runs.iter().map(f).collect());
        let name =
            format!("{instances} relay replica{}, default config, batch 500", if instances == 1 { "" } else { "s" });
        report.add("replicas", format!("{name}: rows/s"), pick(&|r| r.0.rows_per_sec), "rows/s");
        report.add(
            "replicas",
            format!("{name}: Postgres CPU per row"),
            pick(&|r| r.0.pg_cpu_seconds / n as f64 * 1e6),
            "µs",
        );
        report.add(
            "replicas",
            format!("{name}: relay CPU per row, all replicas"),
            pick(&|r| r.0.cpu_seconds / n as f64 * 1e6),
            "µs",
        );
        report.add("replicas", format!("{name}: WAL per row"), pick(&|r| r.1), "bytes");
        if instances == 1 {
            // The last run's stream still holds its n entries (~300-byte JSON payloads).
            let bytes = env.stream_memory(&env.stream("user")).await? as f64 / n as f64;
            report.add("replicas", "Redis memory per stream entry, ~300-byte payload", bytes, "bytes");
        }
    }
    Ok(())
}

/// The rate the relays alone are measured at (events/s over the four owners): a few hundred
/// rows per claim cycle or less, as in the steady runs, but not their rates.
const RELAYS_ALONE_RATE: f64 = 2000.0;

/// The rate the relays alone are run at again, to check the per-cycle terms at fuller cycles (as
/// full as the steady runs' at 5,000-10,000 events/s) with the rest of the machine idle: set
/// beside the steady runs, it tells the relays' own cost from what a busy machine adds to it.
const RELAYS_ALONE_CHECK_RATE: f64 = 6000.0;

/// The rate of the steady run that gives the model a takeover's costs in a deployment: below
/// the rates the steady runs are compared at.
const TAKEOVERS_RATE: f64 = 1500.0;

/// The scale run against the capacity model: the model's costs from this run's own figures
/// where it measured them (`--only relay,replicas,consumer,scale`), else from `--costs`, else
/// built in, with the costs of a relay's claim cycle and of a takeover measured on the
/// deployment's layout at rates of their own. In order: the relays alone (the cycle), the
/// relays alone at a higher rate (checked against the cycle's terms), the backlog form (with
/// the deployment at rest before it), the deployment at 1,500 events/s (the takeover, beyond
/// the backlog deployment's cost at rest); then the backlog's figures are compared, with every
/// term known, and the steady form runs at each of `--scale-rates`. The model's CPU figures are
/// counted where it plans the host (within `plan::HOST_HEADROOM` of its cores), the backlog by
/// its rate; the relays-alone check is counted apart.
async fn scale_part(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let sourced = |report: &Report| {
        let mut figures = plan::figures_in(&args.costs);
        figures.extend(report.0.iter().filter_map(|f| serde_json::to_value(f).ok()));
        plan::Costs::from_figures(&figures)
    };
    // The relays alone at a rate of their own (not one the runs below are compared at): what a
    // claim cycle costs them, their databases and Redis beyond its rows, the per-cycle terms.
    let (rate, window) = (RELAYS_ALONE_RATE, std::time::Duration::from_secs(args.scale_seconds));
    let alone = scale::relays_alone(&args.database_url, &args.binary, &args.out, rate, window).await?;
    anyhow::ensure!(alone.cycles > 0, "the relays alone delivered nothing in {window:?}");
    let name = format!("relays alone at a steady {rate:.0} events/s");
    report.add("scale", format!("{name}: rows per claim cycle"), alone.fill(), "rows");
    // The database's and Redis's terms are per cycle beyond one per 500 rows: cycles that were
    // full give none.
    anyhow::ensure!(alone.fill() < 250.0, "{name}: {:.0} rows per claim cycle, not a modest rate", alone.fill());
    let terms = scale::per_cycle(&alone, &sourced(report).costs);
    report.add("scale", plan::RELAY_CYCLE, terms.relay_us, "µs");
    report.add("scale", plan::OWNER_PG_CYCLE, terms.owner_pg_us, "µs");
    report.add("scale", plan::REDIS_APPEND_CYCLE, terms.redis_us, "µs");
    let rate = RELAYS_ALONE_CHECK_RATE;
    let check = scale::relays_alone(&args.database_url, &args.binary, &args.out, rate, window).await?;
    let name = format!("relays alone at a steady {rate:.0} events/s");
    report.add("scale", format!("{name}: rows per claim cycle"), check.fill(), "rows");
    // The per-cycle terms alone at fuller cycles, the rest of the host idle: figures the model
    // predicts, counted apart from the deployment's (the scale run proper).
    let mut alone_ratios = Vec::new();
    for (what, measured, predicted) in scale::alone_compared(&check, &sourced(report).costs) {
        report.add("scale", format!("{name}, {what}: CPU-seconds beyond rest"), measured, "s");
        let ratio = measured / predicted * 100.0;
        report.add("check", format!("scale {name}, {what}: measured / predicted CPU"), ratio, "%");
        alone_ratios.push(ratio);
    }
    // Every figure the model predicts of the deployment: the backlog's rate, and the CPU of the
    // steady runs it plans for (the host within its headroom).
    let mut planned = Vec::new();
    let run = scale::run(&args.database_url, &args.binary, &args.out, args.scale_events).await?;
    let rest = run.rest.clone().unwrap_or_default();
    // The whole deployment at a rate of its own: what a takeover costs beyond its events when
    // reads block on the layout's streams and each takeover starts on cold caches.
    let (warmup, window) = (std::time::Duration::from_secs(5), std::time::Duration::from_secs(args.scale_seconds));
    let low = scale::run_at(&args.database_url, &args.binary, &args.out, TAKEOVERS_RATE, warmup, window).await?;
    let name = format!("the deployment at a steady {TAKEOVERS_RATE:.0} events/s");
    report.add("scale", format!("{name}: events per bridge transaction (takeover)"), low.bridge_fill, "events");
    // The terms are per takeover beyond one per 500 events: a run whose takeovers were full
    // gives none.
    anyhow::ensure!(low.bridge_fill < 250.0, "{name}: {:.0} events per takeover, not a modest rate", low.bridge_fill);
    let terms = scale::per_takeover(&low, &sourced(report).costs, &rest);
    report.add("scale", plan::BRIDGE_TXN, terms.bridge_us, "µs");
    report.add("scale", plan::CONSUMER_PG_TXN, terms.consumer_pg_us, "µs");
    report.add("scale", plan::REDIS_READ_TXN, terms.redis_us, "µs");
    let sourced = sourced(report);
    let name = "backlog";
    report.add("scale", format!("{name}: events/s through both groups"), run.rate(), "events/s");
    // The rate this machine gives the deployment if it gives it the CPU it gave the one-group
    // chain: the chain's CPU per second over the deployment's modelled CPU per event.
    if let Some((chain_rate, chain_us)) = sourced.chain {
        let predicted = chain_rate * chain_us / scale::modelled_us(&sourced.costs);
        report.add("scale", format!("{name}: events/s the model predicts here"), predicted, "events/s");
        let ratio = run.rate() / predicted * 100.0;
        report.add("ratio", "scale run: measured / predicted events/s", ratio, "%");
        planned.push(ratio);
    }
    // The backlog saturates the host on purpose: of it the model predicts the rate.
    scale_figures(name, &run, &sourced.costs, &rest, Load::Saturated, report);
    let redis: f64 = run.cpu.redis.iter().sum();
    for (i, cpu) in run.cpu.redis.iter().enumerate() {
        report.add("scale", format!("Redis primary {i}: share of Redis CPU"), cpu / redis * 100.0, "%");
    }
    for &rate in &args.scale_rates {
        let run = scale::run_at(&args.database_url, &args.binary, &args.out, rate, warmup, window).await?;
        let name = format!("steady {rate:.0}/s");
        report.add("scale", format!("{name}: events/s through both groups"), run.rate(), "events/s");
        report.add("scale", format!("{name}: Postgres CPU per event, the producer's inserts"), run.insert_us, "µs");
        planned.extend(scale_figures(&name, &run, &sourced.costs, &rest, Load::Steady(rate), report));
    }
    let headroom = plan::HOST_HEADROOM * 100.0;
    summarise(&format!("the deployment within {headroom:.0}% of the host"), &planned, report);
    summarise("the relays alone at fuller cycles (step 2)", &alone_ratios, report);
    Ok(())
}

/// How far a figure may be from the model's and still agree with it (the scale run's criterion).
const AGREES_WITHIN: f64 = 0.25;

/// How many of `ratios` (measured / predicted, %) agree with the model, and the lowest and
/// highest.
fn summarise(which: &str, ratios: &[f64], report: &mut Report) {
    let within = |r: &&f64| (**r / 100.0 - 1.0).abs() <= AGREES_WITHIN;
    report.add("scale", format!("scale run, {which}: figures the model predicts"), ratios.len() as f64, "figures");
    report.add(
        "scale",
        format!("scale run, {which}: of them within {:.0}%", AGREES_WITHIN * 100.0),
        ratios.iter().filter(within).count() as f64,
        "figures",
    );
    let lowest = ratios.iter().copied().reduce(f64::min);
    let highest = ratios.iter().copied().reduce(f64::max);
    if let (Some(lowest), Some(highest)) = (lowest, highest) {
        report.add("ratio", format!("scale run, {which}: lowest measured / predicted"), lowest, "%");
        report.add("ratio", format!("scale run, {which}: highest measured / predicted"), highest, "%");
    }
}

/// How a scale run loads the host.
#[derive(Clone, Copy)]
enum Load {
    /// As fast as it can (the backlog): the host saturated on purpose, of which the model
    /// predicts the rate.
    Saturated,
    /// A producer writing this many events/s: the model predicts the run's CPU if it puts the
    /// host within its headroom at that rate.
    Steady(f64),
}

/// A steady run whose groups applied less than this share of what its producer wrote fell
/// behind: the host was saturated, whatever the model puts it at.
const KEPT_UP: f64 = 0.9;

/// Prints a run's figures beside the model's, and the whole host's; returns the ratios (%) of
/// the figures the model predicts: none for a run that saturates the host (the backlog, or a
/// steady run that fell behind its producer) or that the model puts past
/// [`plan::HOST_HEADROOM`] of the host's cores at its producer's rate (printed as
/// "unplanned").
fn scale_figures(
    name: &str,
    run: &scale::ScaleRun,
    costs: &plan::Costs,
    rest: &scale::Cpu,
    load: Load,
    report: &mut Report,
) -> Vec<f64> {
    let figures = scale::compared(run, costs, rest);
    let host = scale::host(run, &figures);
    let planned = match load {
        Load::Saturated => false,
        Load::Steady(rate) if run.rate() < KEPT_UP * rate => false,
        Load::Steady(rate) => {
            // What the model puts the host at for the producer's rate (at the batches the run
            // carried): what it costs at rest, and its costs per event scaled to that rate.
            let at_rate = host.at_rest + (host.predicted - host.at_rest) * rate / run.rate();
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
            let busy = at_rate / cores;
            report.add(
                "scale",
                format!("{name}: the host as the model puts it, of its {cores} cores"),
                busy * 100.0,
                "%",
            );
            busy <= plan::HOST_HEADROOM
        }
    };
    let section = if planned { "ratio" } else { "unplanned" };
    let mut ratios = Vec::new();
    for f in figures.iter().chain([&host]) {
        let what = f.what;
        report.add("scale", format!("{name}, {what}: cores measured"), f.measured, "cores");
        report.add("scale", format!("{name}, {what}: cores the model predicts"), f.predicted, "cores");
        report.add("scale", format!("{name}, {what}: of them at rest (measured before the load)"), f.at_rest, "cores");
        let ratio = f.measured / f.predicted * 100.0;
        report.add(section, format!("scale {name}, {what}: measured / predicted CPU"), ratio, "%");
        if planned {
            ratios.push(ratio);
        }
    }
    report.add("scale", format!("{name}: events per bridge transaction (takeover)"), run.bridge_fill, "events");
    report.add("scale", format!("{name}: rows per relay settle transaction"), run.relay_fill, "rows");
    ratios
}

/// The relay over a million delivered rows (with their dead tuples, and vacuumed) against a
/// clean table. The clean table goes through the same steps (vacuum, insert, checkpoint, run)
/// with no history, and the three kinds of run take turns, so that the ratios differ in the
/// history alone and not in the machine's speed from one minute to the next.
async fn history_part(env: &env::BenchEnv, args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let n = args.history_events;
    let (mut clean, mut bloat, mut history) = (Vec::new(), Vec::new(), Vec::new());
    let per_row = |run: &relay::Run| run.pg_cpu_seconds * 1e6 / n as f64;
    let ms = |run: &relay::Run| run.startup.as_secs_f64() * 1e3;
    for turn in 1..=args.repeat {
        let c = relay::bloated(env, n, 0, 500, true).await?;
        let b = relay::bloated(env, n, args.history, 500, false).await?;
        let h = relay::bloated(env, n, args.history, 500, true).await?;
        eprintln!(
            "  bloat      turn {turn}: clean {:.0}, bloated {:.0}, vacuumed history {:.0} rows/s; Postgres CPU per row {:.1} / {:.1} / {:.1} µs; autovacuum passes during the run {} / {} / {}; start-up {:.0} / {:.0} / {:.0} ms",
            c.rows_per_sec,
            b.rows_per_sec,
            h.rows_per_sec,
            per_row(&c),
            per_row(&b),
            per_row(&h),
            c.autovacuum_passes,
            b.autovacuum_passes,
            h.autovacuum_passes,
            ms(&c),
            ms(&b),
            ms(&h)
        );
        clean.push(c);
        bloat.push(b);
        history.push(h);
    }
    // Each run against the clean run of its own turn, then the median.
    let ratio = |runs: &[relay::Run], f: &dyn Fn(&relay::Run) -> f64| {
        median(runs.iter().zip(&clean).map(|(run, clean)| f(run) / f(clean) * 100.0).collect())
    };
    let rate = |run: &relay::Run| run.rows_per_sec;
    let (bloat_ratio, history_ratio) = (ratio(&bloat, &rate), ratio(&history, &rate));
    let history_cpu_ratio = ratio(&history, &per_row);
    let rates = |runs: &[relay::Run]| median(runs.iter().map(rate).collect());
    let cpu = |runs: &[relay::Run]| median(runs.iter().map(per_row).collect());
    let h = args.history;
    report.add("resources", "Postgres CPU per delivered row, clean table (history runs' steps)", cpu(&clean), "µs");
    report.add(
        "resources",
        format!("Postgres CPU per delivered row, over {h} delivered rows, vacuumed"),
        cpu(&history),
        "µs",
    );
    report.add(
        "bloat",
        format!("1 relay, batch 500, {n} events, clean table (the same steps, no history)"),
        rates(&clean),
        "rows/s",
    );
    report.add(
        "bloat",
        format!("1 relay, batch 500, {n} events, over {h} delivered rows + dead tuples"),
        rates(&bloat),
        "rows/s",
    );
    report.add(
        "bloat",
        format!("1 relay, batch 500, {n} events, over {h} delivered rows, vacuumed"),
        rates(&history),
        "rows/s",
    );
    report.add("ratio", "bloated / clean table, batch 500 (median of each turn's)", bloat_ratio, "%");
    report.add("ratio", "vacuumed history / clean table, batch 500 (median of each turn's)", history_ratio, "%");
    report.add(
        "ratio",
        "Postgres CPU per row, vacuumed history / clean table (median of each turn's)",
        history_cpu_ratio,
        "%",
    );
    Ok(())
}

async fn dwell(env: &env::BenchEnv, args: &Args, report: &mut Report) -> anyhow::Result<()> {
    for (rate, notify) in [(1000, false), (1000, true), (5000, false), (5000, true)] {
        let runs = repeat(args.repeat, || latency::dwell(env, rate, args.latency_seconds, notify)).await?;
        let mode = if notify { "NOTIFY" } else { "polling 250ms" };
        let pick = |f: fn(&latency::Dwell) -> f64| median(runs.iter().map(f).collect());
        report.add("dwell", format!("p50 at {rate}/s, {mode}"), pick(|d| d.p50_ms), "ms");
        report.add("dwell", format!("p99 at {rate}/s, {mode}"), pick(|d| d.p99_ms), "ms");
        report.add("dwell", format!("max at {rate}/s, {mode}"), pick(|d| d.max_ms), "ms");
        report.add("dwell", format!("events measured at {rate}/s, {mode}"), pick(|d| d.events as f64), "events");
    }
    Ok(())
}

async fn consumer_side(env: &env::BenchEnv, args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let (c, r) = (args.consumer_events, args.repeat);
    bridge_part(env, args, report).await?;
    let leased_limit = median(repeat(r, || consumer::worker_limit(env, c, 100)).await?);
    report.add("limit", "worker leased claim + handler + mark alone, batch 100", leased_limit, "rows/s");
    let locked_limit = median(repeat(r, || consumer::worker_locked_limit(env, c, 100)).await?);
    report.add("limit", "worker locked batch + handler + mark alone, batch 100", locked_limit, "rows/s");
    // The default config is `claim = "auto"`, which is the locked claim for this SQL handler.
    for (claim, limit) in [("leased", leased_limit), ("locked", locked_limit)] {
        for concurrency in [1, 2] {
            let workers = repeat(r, || consumer::worker(env, c, 100, concurrency, claim)).await?;
            let worker = median(workers.iter().map(|w| w.0).collect());
            let name = format!("1 worker, batch 100, concurrency {concurrency}, claim {claim}");
            report.add("worker", name, worker, "rows/s");
            let ratio = worker / limit * 100.0;
            report.add("ratio", format!("worker ({claim}, concurrency {concurrency}) / its SQL limit"), ratio, "%");
            let rss = median(workers.iter().map(|w| w.1 as f64 / 1024.0).collect());
            report.add("resources", format!("worker peak RSS, concurrency {concurrency}, claim {claim}"), rss, "MiB");
        }
    }
    chain_part(env, args, report).await
}

/// The whole chain, each way it can apply the seed's handler (and an earlier build's chain, with
/// `--earlier-binary`), taking turns; per way, the rate and every process's CPU per event.
async fn chain_part(env: &env::BenchEnv, args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let c = args.consumer_events;
    let earlier = args.earlier_binary.as_deref();
    let mut ways = vec![
        ((Mode::Worker, 1), None, "worker applies, handler per event".to_owned()),
        ((Mode::AtTakeover, 1), None, "bridge applies at take-over, batch handler".to_owned()),
        ((Mode::AtTakeover, 2), None, "bridge applies at take-over, batch handler, 2 takeover loops".to_owned()),
    ];
    if let Some(binary) = earlier {
        ways.insert(0, ((Mode::Worker, 1), Some(binary), format!("the build of {}", binary.display())));
    }
    let mut turns: Vec<Vec<relay::Run>> = vec![Vec::new(); ways.len()];
    let mut from_first: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
    for turn in 1..=args.repeat {
        for (((way, binary, name), runs), steady) in ways.iter().zip(&mut turns).zip(&mut from_first) {
            let (run, rate) = consumer::end_to_end(env, c, *way, *binary).await?;
            eprintln!(
                "  chain turn {turn}, {name}: {:.0} events/s from its start, {rate:.0} from its first effect",
                run.rows_per_sec
            );
            runs.push(run);
            steady.push(rate);
        }
    }
    let from_start: Vec<Vec<f64>> = turns.iter().map(|runs| runs.iter().map(|r| r.rows_per_sec).collect()).collect();
    // Each turn's ratio, then their median: the runs a ratio compares are a minute apart.
    let ratio = |a: &[f64], b: &[f64]| median(a.iter().zip(b).map(|(now, then)| now / then).collect());
    let (one_loop, worker) = (turns.len() - 2, turns.len() - 3);
    for (what, now) in [("applying at take-over", one_loop), ("applying at take-over, 2 takeover loops", one_loop + 1)]
    {
        for (timed, rates) in [("from its start", &from_start), ("from its first effect", &from_first)] {
            let than = format!("{what} / the worker applying, this build, {timed} (median of turns)");
            report.add("chain", than, ratio(&rates[now], &rates[worker]), "×");
            if earlier.is_some() {
                let than = format!("{what} / the earlier build's chain, {timed} (median of turns)");
                report.add("chain", than, ratio(&rates[now], &rates[0]), "×");
            }
        }
    }
    for (((_, _, name), runs), steady) in ways.iter().zip(&turns).zip(&from_first) {
        let pick = |f: fn(&relay::Run) -> f64| median(runs.iter().map(f).collect());
        report.add("chain", format!("outbox → audit_logs, {name}"), pick(|run| run.rows_per_sec), "events/s");
        let what = format!("outbox → audit_logs, {name}, from its first effect");
        report.add("chain", what, median(steady.clone()), "events/s");
        // Every process of the chain, per event: where an event's CPU goes end to end.
        let per_event = |f: fn(&relay::Run) -> f64| pick(f) * 1e6 / c as f64;
        let (handoff, pg, redis) =
            (per_event(|r| r.cpu_seconds), per_event(|r| r.pg_cpu_seconds), per_event(|r| r.redis_cpu_seconds));
        report.add("chain CPU", format!("handoff (relay + bridge + worker), {name}"), handoff, "µs/event");
        report.add("chain CPU", format!("Postgres, {name}"), pg, "µs/event");
        report.add("chain CPU", format!("Redis, {name}"), redis, "µs/event");
        report.add("chain CPU", format!("all processes, {name}"), handoff + pg + redis, "µs/event");
    }
    Ok(())
}

/// The bridge against its insert-if-absent statement alone, taking turns so that each ratio
/// compares two runs a few seconds apart, and the median of those ratios.
async fn bridge_part(env: &env::BenchEnv, args: &Args, report: &mut Report) -> anyhow::Result<()> {
    bridge_mode(env, args, Mode::Worker, 500, report).await?;
    bridge_mode(env, args, Mode::AtTakeover, 500, report).await?;
    // Small batches, as a stream read at a modest rate gives: with the figures at 500, what a
    // takeover transaction costs apart from its events (the capacity model's per-batch term).
    bridge_mode(env, args, Mode::AtTakeover, SMALL_BRIDGE_BATCH, report).await
}

/// The bridge batch of the capacity model's second point (see `plan::Costs`).
const SMALL_BRIDGE_BATCH: u32 = plan::SMALL_BATCH;

async fn bridge_mode(
    env: &env::BenchEnv,
    args: &Args,
    mode: Mode,
    batch: u32,
    report: &mut Report,
) -> anyhow::Result<()> {
    // Small batches take as many transactions for a tenth of the events.
    let n = if batch >= 500 { args.bridge_events } else { args.bridge_events / 10 };
    let (what, limit_what) = match mode {
        Mode::Worker => (String::new(), "insert-if-absent alone"),
        Mode::AtTakeover => (", applying at take-over".to_owned(), "insert-if-absent + batch handler alone"),
    };
    let (mode_what, what) =
        if batch == 500 { (what.clone(), what) } else { (what.clone(), format!("{what}, batch {batch}")) };
    let (mut limits, mut bridges, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for turn in 1..=args.repeat {
        let limit = consumer::bridge_limit(env, n, batch, mode).await?;
        let bridge = consumer::bridge(env, n, batch, mode).await?;
        let ratio = bridge.rows_per_sec / limit * 100.0;
        eprintln!(
            "  bridge{what} turn {turn}: {limit_what} {limit:.0}, bridge {:.0} events/s ({ratio:.1}%)",
            bridge.rows_per_sec
        );
        limits.push(limit);
        bridges.push(bridge);
        ratios.push(ratio);
    }
    let pick = |f: fn(&relay::Run) -> f64| median(bridges.iter().map(f).collect());
    let per_100k = 100_000.0 / n as f64;
    report.add("limit", format!("bridge {limit_what}, batch {batch}, {n} events"), median(limits), "events/s");
    report.add(
        "bridge",
        format!("1 bridge, batch {batch}, {n} events{mode_what}"),
        pick(|b| b.rows_per_sec),
        "events/s",
    );
    report.add("ratio", format!("bridge{what} / its SQL limit (median of each turn's)"), median(ratios), "%");
    report.add(
        "resources",
        format!("bridge peak RSS, batch {batch}{mode_what}"),
        pick(|b| b.peak_rss_kb as f64 / 1024.0),
        "MiB",
    );
    report.add("resources", format!("bridge CPU per 100k events{what}"), pick(|b| b.cpu_seconds) * per_100k, "s");
    let redis = pick(|b| b.redis_cpu_seconds) * per_100k;
    report.add("resources", format!("Redis CPU per 100k events, bridge{what}"), redis, "s");
    let pg = pick(|b| b.pg_cpu_seconds) * 1e6 / n as f64;
    report.add("resources", format!("Postgres CPU per event taken over, bridge{what}"), pg, "µs");
    Ok(())
}

/// The durability gate's cost and the bridge's memory on entries at `payload_max_bytes`, each on
/// redis-servers of the benchmark's own.
async fn broker_side(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let (url, bin, dir) = (&args.database_url, &args.binary, &args.out);
    let (plain, gated) = broker::gate_cost(url, bin, dir, args.events, args.repeat).await?;
    let rate = |runs: &[relay::Run]| median(runs.iter().map(|x| x.rows_per_sec).collect());
    let cpu =
        |runs: &[relay::Run]| median(runs.iter().map(|x| x.cpu_seconds / args.events as f64 * 100_000.0).collect());
    let (plain_rate, gated_rate) = (rate(&plain), rate(&gated));
    report.add("gate", "relay, batch 500, primary + 1 replica, AOF everysec, no gate", plain_rate, "rows/s");
    report.add("gate", "relay, batch 500, same servers, gate replicas = 1", gated_rate, "rows/s");
    report.add("ratio", "gated / ungated", gated_rate / plain_rate * 100.0, "%");
    report.add("gate", "relay CPU per 100k events, no gate", cpu(&plain), "s");
    report.add("gate", "relay CPU per 100k events, gate replicas = 1", cpu(&gated), "s");
    const MIB: usize = 1 << 20;
    for (batch_bytes, poison) in [(8 * MIB, false), (32 * MIB, false), (64 * MIB, false), (8 * MIB, true)] {
        let runs =
            repeat(args.repeat, || broker::bridge_large_entries(url, bin, dir, 200, 4 * MIB, batch_bytes, poison))
                .await?;
        let (peak, retained) = (median(runs.iter().map(|r| r.0).collect()), median(runs.iter().map(|r| r.1).collect()));
        let what = if poison { "poison (over payload_max_bytes)" } else { "valid" };
        let name = format!("bridge, 200 entries of 4 MiB, {what}, batch_bytes {} MiB", batch_bytes / MIB);
        report.add("memory", format!("{name}: peak RSS"), peak, "MiB");
        report.add("memory", format!("{name}: RSS 8 s after"), retained, "MiB");
        report.add(
            "memory",
            format!("bound 64 MiB + 3 × batch_bytes ({} MiB)", batch_bytes / MIB),
            (64 + 3 * batch_bytes / MIB) as f64,
            "MiB",
        );
    }
    Ok(())
}

/// Apache Kafka beside Redis, on the broker `scripts/services` starts (`--only kafka`): the relay
/// (default config, batch 500) against the Kafka producer's own limit for the same batches (same
/// client, same settings, no database) and against the relay on Redis, taking turns.
async fn kafka_part(env: &env::BenchEnv, args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let (n, r) = (args.events, args.repeat);
    let (mut relays, mut redis_relays, mut limits) = (Vec::new(), Vec::new(), Vec::new());
    for turn in 1..=r {
        limits.push(kafka::produce_limit(n, 500).await?);
        relays.push(kafka::relay(env, n, 500).await?);
        redis_relays.push(relay::throughput(env, n, 500, 1, "concurrency = 2\nclaim = \"locked\"").await?);
        eprintln!(
            "  kafka      turn {turn}: relay {:.0} (Redis {:.0}, produce limit {:.0}) rows/s",
            relays[turn - 1].rows_per_sec,
            redis_relays[turn - 1].rows_per_sec,
            limits[turn - 1].0
        );
    }
    let rate = |runs: &[relay::Run]| median(runs.iter().map(|x| x.rows_per_sec).collect());
    let per_100k = |runs: &[relay::Run], f: fn(&relay::Run) -> f64| {
        median(runs.iter().map(|x| f(x) / n as f64 * 100_000.0).collect())
    };
    let (kafka_relay, redis_relay) = (rate(&relays), rate(&redis_relays));
    let limit = median(limits.iter().map(|(rate, _)| *rate).collect());
    let limit_cpu = median(limits.iter().map(|(_, cpu)| cpu / n as f64 * 100_000.0).collect());
    report.add(
        "limit",
        "Kafka produce, idempotent, acks=all, batch 500 in flight, reports awaited",
        limit,
        "messages/s",
    );
    report.add("kafka", "relay to Kafka, default config, batch 500", kafka_relay, "rows/s");
    report.add("kafka", "relay to Redis, same config, same sitting", redis_relay, "rows/s");
    report.add("ratio", "relay to Kafka / Kafka produce limit", kafka_relay / limit * 100.0, "%");
    report.add("ratio", "relay to Kafka / relay to Redis", kafka_relay / redis_relay * 100.0, "%");
    report.add("kafka", "producer CPU per 100k messages, the limit's client", limit_cpu, "s");
    report.add("kafka", "relay CPU per 100k events, Kafka", per_100k(&relays, |x| x.cpu_seconds), "s");
    report.add("kafka", "relay CPU per 100k events, Redis", per_100k(&redis_relays, |x| x.cpu_seconds), "s");
    report.add("kafka", "Kafka broker CPU per 100k events, relay", per_100k(&relays, |x| x.redis_cpu_seconds), "s");
    report.add("kafka", "Postgres CPU per 100k events, relay to Kafka", per_100k(&relays, |x| x.pg_cpu_seconds), "s");
    Ok(())
}

/// NATS JetStream beside Redis, on a nats-server of the benchmark's own: the relay (default
/// config, batch 500) and the bridge (batch 500, inserting only) each against JetStream's own
/// limit for the same batches and against the same component on Redis, taking turns.
async fn nats_part(env: &env::BenchEnv, args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let server = nats::NatsServer::start(&args.out).await?;
    let (n, b, r) = (args.events, args.bridge_events, args.repeat);
    let (mut relays, mut redis_relays, mut publish, mut bridges, mut redis_bridges, mut pull) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut publish_cpu = Vec::new();
    for turn in 1..=r {
        let (rate, cpu) = nats::publish_limit(&server, n, 500).await?;
        publish.push(rate);
        publish_cpu.push(cpu / n as f64 * 100_000.0);
        relays.push(nats::relay(env, &server, n, 500).await?);
        redis_relays.push(relay::throughput(env, n, 500, 1, "concurrency = 2\nclaim = \"locked\"").await?);
        pull.push(nats::pull_limit(&server, b, 500).await?);
        bridges.push(nats::bridge(env, &server, b, 500).await?);
        redis_bridges.push(consumer::bridge(env, b, 500, Mode::Worker).await?);
        eprintln!(
            "  nats       turn {turn}: relay {:.0} (Redis {:.0}, publish limit {:.0}) rows/s; bridge {:.0} (Redis {:.0}, pull + ack limit {:.0}) events/s",
            relays[turn - 1].rows_per_sec,
            redis_relays[turn - 1].rows_per_sec,
            publish[turn - 1],
            bridges[turn - 1].rows_per_sec,
            redis_bridges[turn - 1].rows_per_sec,
            pull[turn - 1]
        );
    }
    let rate = |runs: &[relay::Run]| median(runs.iter().map(|x| x.rows_per_sec).collect());
    let per_100k = |runs: &[relay::Run], f: fn(&relay::Run) -> f64, events: usize| {
        median(runs.iter().map(|x| f(x) / events as f64 * 100_000.0).collect())
    };
    let (nats_relay, redis_relay, publish) = (rate(&relays), rate(&redis_relays), median(publish));
    report.add("limit", "JetStream publish with ids, batch 500 in flight, PubAcks awaited", publish, "messages/s");
    report.add("nats", "relay to JetStream, default config, batch 500", nats_relay, "rows/s");
    report.add("nats", "relay to Redis, same config, same sitting", redis_relay, "rows/s");
    report.add("ratio", "relay to JetStream / JetStream publish limit", nats_relay / publish * 100.0, "%");
    report.add("ratio", "relay to JetStream / relay to Redis", nats_relay / redis_relay * 100.0, "%");
    report.add("nats", "publisher CPU per 100k messages, the limit's client", median(publish_cpu), "s");
    report.add("nats", "relay CPU per 100k events, JetStream", per_100k(&relays, |x| x.cpu_seconds, n), "s");
    report.add("nats", "relay CPU per 100k events, Redis", per_100k(&redis_relays, |x| x.cpu_seconds, n), "s");
    report.add("nats", "nats-server CPU per 100k events, relay", per_100k(&relays, |x| x.redis_cpu_seconds, n), "s");
    report.add(
        "nats",
        "redis-server CPU per 100k events, relay",
        per_100k(&redis_relays, |x| x.redis_cpu_seconds, n),
        "s",
    );
    let (nats_bridge, redis_bridge, pull) = (rate(&bridges), rate(&redis_bridges), median(pull));
    report.add("limit", "JetStream pull 500 + double-ack each, durable consumer", pull, "messages/s");
    report.add("nats", "bridge from JetStream, batch 500", nats_bridge, "events/s");
    report.add("nats", "bridge from Redis, batch 500, same sitting", redis_bridge, "events/s");
    report.add("ratio", "bridge from JetStream / JetStream pull + ack limit", nats_bridge / pull * 100.0, "%");
    report.add("ratio", "bridge from JetStream / bridge from Redis", nats_bridge / redis_bridge * 100.0, "%");
    report.add("nats", "bridge CPU per 100k events, JetStream", per_100k(&bridges, |x| x.cpu_seconds, b), "s");
    report.add("nats", "bridge CPU per 100k events, Redis", per_100k(&redis_bridges, |x| x.cpu_seconds, b), "s");
    report.add("nats", "nats-server CPU per 100k events, bridge", per_100k(&bridges, |x| x.redis_cpu_seconds, b), "s");
    Ok(())
}

fn print_table(figures: &[Figure]) {
    println!("\n| section | measurement | median | unit |\n|---|---|---:|---|");
    for f in figures {
        println!("| {} | {} | {} | {} |", f.section, f.name, shown(f.value), f.unit);
    }
}

/// A figure as printed: two decimals below 10 (CPU seconds per 100k events move in hundredths),
/// one below 100, none above.
fn shown(value: f64) -> String {
    match value {
        v if v >= 100.0 => format!("{v:.0}"),
        v if v >= 10.0 => format!("{v:.1}"),
        v => format!("{v:.2}"),
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").parse::<u64>().unwrap_or(0) / 1024 / 1024)
        })
        .unwrap_or(0);
    format!("{cores} cores ({cpu}), {mem} GiB RAM")
}
