//! Command line: `run`, `check`, `migrate`, and the operator commands.

/// `println!` for a command's output: when stdout is closed early (`handoff migrate --print |
/// head`) the process ends quietly, as a pipeline's reader expects, instead of panicking.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            $crate::cli::stdout_failed(e)
        }
    }};
}

mod bridge;
mod exit;
mod inbox;
mod pause;
mod replay;
mod selection;
mod set_aside;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config;
use crate::config::Config;
use crate::fault::Faults;
use crate::{app, check, ops, runtime, store, telemetry};
use exit::fail;

#[derive(Debug, Parser)]
#[command(
    name = "handoff",
    version,
    about = "Outbox → Redis Streams, NATS JetStream or Kafka → inbox, without cross-database writes"
)]
pub struct Cli {
    /// Path of the TOML configuration file.
    #[arg(long, short, global = true, env = "HANDOFF_CONFIG", default_value = "config/handoff.toml")]
    pub config: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run every configured relay, bridge and worker until SIGTERM / SIGINT.
    Run,
    /// Validate the config, connect to the database and the brokers, prepare and check every
    /// statement, and print the production checklist (server settings that can lose or delay
    /// events, each passing or warning).
    Check,
    /// Apply the reference schema (idempotent): only the tables the config's components need
    /// (or `--role`'s), never a table the config adopts.
    Migrate {
        /// Print the SQL instead of applying it.
        #[arg(long)]
        print: bool,
        /// Whose tables: relay (outbox), bridge (inbox, poison, deliveries), worker (inbox),
        /// all (everything, the demo's table too); repeat for several. Default: the roles of the
        /// config's [[relay]], [[bridge]] and [[worker]] sections, or all when it has none.
        #[arg(long, value_enum)]
        role: Vec<crate::migrate::parts::Role>,
        /// Create the outbox partitioned by range of `created_at` (Postgres), for retention by
        /// dropping partitions (`[relay.partitions]`). Only where no outbox exists yet.
        #[arg(long)]
        partitioned: bool,
    },
    /// Per relay, worker and bridge stream: pending, in flight, DEAD, lag, oldest age.
    Status {
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// DEAD rows of the outboxes (relays) and inboxes (workers).
    Dead {
        #[command(subcommand)]
        action: set_aside::DeadAction,
    },
    /// Look up the entries of recently delivered rows in their streams: present, trimmed, or
    /// lost by the broker; `--repair` re-drives the lost ones.
    Verify {
        /// Only this relay.
        #[arg(long)]
        relay: Option<String>,
        /// Rows delivered within this long, e.g. "1h".
        #[arg(long, value_parser = humantime::parse_duration, default_value = "1h")]
        since: std::time::Duration,
        /// Move the rows of missing entries back to PENDING (the relay appends them again).
        #[arg(long)]
        repair: bool,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Entries the bridges recorded as poison.
    Poison {
        #[command(subcommand)]
        action: set_aside::PoisonAction,
    },
    /// Stop a relay, bridge or worker on every replica (within pause.poll_interval) until
    /// `resume`: it finishes the batch in hand and claims or reads nothing more; it stays live
    /// and ready. Survives restarts.
    Pause(pause::PauseArgs),
    /// End a pause.
    Resume(pause::ResumeArgs),
    /// Append a relay's DELIVERED rows again (chosen by time, type, aggregate, event or id), to
    /// their own streams or to a backfill stream; throttled, resumable after a crash or Ctrl-C.
    Replay(replay::ReplayArgs),
    /// Record a sharded relay's new shard count (`{shard(column, N)}` changed), once its outbox
    /// holds no undelivered row and the bridges drained the old shards; until then the relay
    /// refuses to start.
    Reshard {
        /// The relay whose template changed.
        #[arg(long)]
        relay: String,
    },
    /// Print the GRANT statements a role's database user needs, and no more (run them as the
    /// tables' owner after `migrate`).
    Grants {
        /// Whose: relay, bridge, worker; repeat for several. Default: the config's sections.
        #[arg(long, value_enum)]
        role: Vec<crate::migrate::parts::Role>,
        /// The database user to grant to.
        #[arg(long)]
        user: String,
        /// Postgres: the schema holding the tables.
        #[arg(long, default_value = "public")]
        schema: String,
    },
    /// A bridge's consumer groups.
    Bridge {
        #[command(subcommand)]
        action: bridge::BridgeAction,
    },
    /// A worker's inbox rows.
    Inbox {
        #[command(subcommand)]
        action: inbox::InboxAction,
    },
}

async fn reshard(config: &Config, relay: &str) -> ExitCode {
    let result = async {
        let db = crate::store::Database::connect(&config.database, "handoff-reshard")?;
        crate::shards::reshard(config, &db, relay).await
    };
    match result.await {
        Ok(done) => {
            let from = done.from.map_or("none recorded".to_owned(), |n| n.to_string());
            say!("`{}`: {} shards recorded (was {from})", done.family, done.to);
            ExitCode::SUCCESS
        }
        Err(e) => fail(format!("{e:#}")),
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // Every command reads the config (`migrate --print` too: the dialect comes from it, and a
    // config that does not load is an error, not a reason to print another dialect's schema).
    let config = match config::load(&cli.config) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{}: {e}", cli.config.display());
            return ExitCode::from(2);
        }
    };
    if let Command::Migrate { print: true, partitioned, role } = &cli.command {
        let mysql = config.database.dialect() == Some(crate::store::config::Dialect::Mysql);
        let versions = if mysql {
            crate::migrate::MYSQL.to_vec()
        } else {
            crate::migrate::postgres_versions(layout(*partitioned))
        };
        let wanted = crate::migrate::parts::needed(&config, role);
        for (version, sql) in versions {
            for (part, text) in crate::migrate::parts::split(sql).into_iter().filter(|(p, _)| wanted.contains(p)) {
                say!("-- {version} ({})\n{text}", part.name());
            }
        }
        return ExitCode::SUCCESS;
    }
    telemetry::logging::init(config.telemetry.log_format, &config.telemetry.log_level);
    let mut config = config;
    if !matches!(cli.command, Command::Run | Command::Check) {
        // An operator's command may run long statements on purpose (a migration's DDL, a purge,
        // a replay's pages): an hour at least before the server or handoff gives one up.
        let hour = std::time::Duration::from_secs(3600);
        config.database.reply_timeout = config.database.reply_timeout.max(hour);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(dispatch(cli.command, config))
}

fn layout(partitioned: bool) -> crate::migrate::OutboxLayout {
    if partitioned { crate::migrate::OutboxLayout::Partitioned } else { crate::migrate::OutboxLayout::Plain }
}

async fn dispatch(command: Command, config: Config) -> ExitCode {
    match command {
        Command::Run => match app::run(config, Faults::from_env(), runtime::signal::first_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), "handoff stopped with an error");
                ExitCode::FAILURE
            }
        },
        Command::Check => match check::check(&config).await {
            Ok(lines) => {
                // The checklist's warnings print as they are; everything else passed.
                for line in &lines {
                    match line.strip_prefix("warn: ") {
                        Some(warning) => say!("warn: {warning}"),
                        None => say!("ok: {line}"),
                    }
                }
                ExitCode::SUCCESS
            }
            Err(problems) => {
                problems.iter().for_each(|p| eprintln!("error: {p}"));
                ExitCode::FAILURE
            }
        },
        Command::Status { json } => status(&config, json).await,
        Command::Dead { action } => set_aside::dead(&config, action).await,
        Command::Poison { action } => set_aside::poison(&config, action).await,
        Command::Pause(args) => pause::pause(&config, args).await,
        Command::Resume(args) => pause::resume(&config, args).await,
        Command::Inbox { action } => inbox::run(&config, action).await,
        Command::Bridge { action } => bridge::run(&config, action).await,
        Command::Replay(args) => replay::run(&config, args).await,
        Command::Reshard { relay } => reshard(&config, &relay).await,
        Command::Grants { role, user, schema } => {
            let url = config.database.url.as_ref().map(|u| u.expose()).unwrap_or_default();
            let dialect = crate::store::config::Dialect::of(url).unwrap_or(crate::store::config::Dialect::Postgres);
            for line in crate::ops::grants::statements(&config, &role, &user, &schema, dialect) {
                say!("{line}");
            }
            ExitCode::SUCCESS
        }
        Command::Verify { relay, since, repair, json } => verify(&config, relay.as_deref(), since, repair, json).await,
        Command::Migrate { partitioned, role, .. } => {
            let layout = layout(partitioned);
            let result = async {
                let db = crate::store::Database::connect(&config.database, "handoff-migrate")?;
                let wanted = crate::migrate::parts::needed(&config, &role);
                let mut applied = crate::migrate::apply(&db, layout, &wanted).await?;
                applied.extend(create_partitions(&config, &db).await?);
                applied.extend(create_nats_stream(&config).await?);
                anyhow::Ok(applied)
            };
            match result.await {
                Ok(applied) if applied.is_empty() => {
                    say!("schema is up to date");
                    ExitCode::SUCCESS
                }
                Ok(applied) => {
                    say!("applied: {}", applied.join(", "));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("migrate failed: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `migrate` for relays with `[relay.partitions]` on a partitioned outbox: the partitions for now
/// and ahead, so the service's first inserts land in them rather than in the default partition.
async fn create_partitions(config: &Config, db: &store::Database) -> anyhow::Result<Vec<String>> {
    let mut created = Vec::new();
    for relay in &config.relays {
        let (Some(partitions), Some(outbox)) =
            (&relay.partitions, crate::relay::partitions::PartitionedOutbox::new(db, &relay.table))
        else {
            continue;
        };
        if let Some(why) = crate::relay::partitions::unfit(db, relay).await? {
            anyhow::bail!(why);
        }
        let now = std::time::SystemTime::now();
        for span in crate::relay::partitions::plan::wanted(now, partitions.every, partitions.ahead) {
            if outbox.create(span).await?.is_some() {
                created.push(span.name(&relay.table));
            }
        }
    }
    Ok(created)
}

/// `migrate` for relays with `broker = "nats"`: the JetStream stream they publish to, created if
/// absent (an existing one is never changed).
async fn create_nats_stream(config: &Config) -> anyhow::Result<Option<String>> {
    let relays: Vec<_> = config.relays.iter().filter(|r| r.broker == crate::broker::Broker::Nats).collect();
    let (Some(nats), false) = (&config.nats, relays.is_empty()) else { return Ok(None) };
    let stream = crate::broker::nats::NatsStream::connect(nats, "payload").await?;
    anyhow::ensure!(stream.connected().await, "nats: {} does not answer within {:?}", nats.url, nats.timeout);
    let (subjects, window) = crate::check::nats::to_create(relays);
    let created = stream.create_if_absent(subjects.clone(), window, nats.replicas).await?;
    Ok(created.then(|| {
        format!(
            "JetStream stream {} ({}, duplicate window {window:?}, R{})",
            nats.stream,
            subjects.join(", "),
            nats.replicas
        )
    }))
}

async fn status(config: &Config, json: bool) -> ExitCode {
    let db = match crate::store::Database::connect(&config.database, "handoff-status") {
        Ok(db) => db,
        Err(e) => {
            eprintln!("{e:#}");
            return ExitCode::FAILURE;
        }
    };
    let stream = crate::broker::redis::RedisStream::connect(&config.redis).await.ok().map(|(s, _)| s);
    // NATS only where a bridge reads from it: the group figures status shows are the bridges'.
    let nats = match &config.nats {
        Some(nats) if config.bridges.iter().any(|b| b.broker == crate::broker::Broker::Nats) => {
            crate::broker::nats::NatsStream::connect(nats, "payload").await.ok()
        }
        _ => None,
    };
    let brokers = ops::status::Brokers { redis: stream.as_ref(), nats: nats.as_ref() };
    let lines = ops::status::collect(config, &db, brokers).await;
    if json {
        say!("{}", serde_json::to_string_pretty(&lines).unwrap_or_default());
    } else {
        say!("{}", ops::status::render(&lines).trim_end_matches('\n'));
    }
    if lines.iter().any(|l| l.error.is_some()) { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

async fn verify(
    config: &Config,
    relay: Option<&str>,
    since: std::time::Duration,
    repair: bool,
    json: bool,
) -> ExitCode {
    let reports = match ops::verify::run(config, relay, since, repair).await {
        Ok(reports) => reports,
        Err(e) => return fail(crate::error::error_chain(&e)),
    };
    let unrepaired: usize =
        reports.iter().flat_map(|r| &r.streams).map(|s| s.missing.saturating_sub(s.redriven as usize)).sum();
    if json {
        say!("{}", serde_json::to_string_pretty(&reports).unwrap_or_default());
    } else {
        for report in &reports {
            if let Some(note) = &report.note {
                say!("relay {}: not verified: {note}", report.relay);
            }
            for s in &report.streams {
                let missing = match (&s.first_missing, &s.last_missing) {
                    (Some(first), Some(last)) => format!("{} missing ({first} … {last})", s.missing),
                    _ => "0 missing".to_owned(),
                };
                say!(
                    "relay {} stream {}: {} checked, {} trimmed, {missing}, {} re-driven",
                    report.relay,
                    s.stream,
                    s.checked,
                    s.trimmed,
                    s.redriven
                );
            }
        }
        let lost: usize = reports.iter().flat_map(|r| &r.streams).map(|s| s.missing).sum();
        say!(
            "verified: {lost} entr{} missing{}",
            if lost == 1 { "y" } else { "ies" },
            if repair { format!(", {} re-driven", lost - unrepaired) } else { String::new() }
        );
    }
    if unrepaired > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// Ends the process after stdout failed: quietly when its reader went away (a closed pipe),
/// else naming the error.
pub(crate) fn stdout_failed(error: std::io::Error) -> ! {
    if error.kind() != std::io::ErrorKind::BrokenPipe {
        eprintln!("handoff: writing to stdout: {error}");
        std::process::exit(1);
    }
    std::process::exit(0)
}
