//! Command line: `run`, `check`, `migrate`, and the operator commands.

mod control;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{self, Config};
use crate::fault::Faults;
use crate::{app, check, ops, runtime, store, telemetry};

#[derive(Debug, Parser)]
#[command(name = "handoff", version, about = "Outbox → Redis Streams → inbox, without cross-database writes")]
pub struct Cli {
    /// Path of the TOML configuration file.
    #[arg(long, short, global = true, env = "HANDOFF_CONFIG", default_value = "config/handoff.toml")]
    pub config: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run every configured relay until SIGTERM / SIGINT.
    Run,
    /// Validate the config, connect to the database and Redis, prepare and check every statement.
    Check,
    /// Apply the reference schema (idempotent).
    Migrate {
        /// Print the SQL instead of applying it.
        #[arg(long)]
        print: bool,
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
        action: DeadAction,
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
        action: PoisonAction,
    },
    /// Stop a relay, bridge or worker on every replica (within pause.poll_interval) until
    /// `resume`: it finishes the batch in hand and claims or reads nothing more; it stays live
    /// and ready. Survives restarts.
    Pause(control::PauseArgs),
    /// End a pause.
    Resume(control::ResumeArgs),
}

#[derive(Debug, Subcommand)]
pub enum PoisonAction {
    /// Show poison records.
    List(PoisonArgs),
    /// Append each record's original entry to its stream again (after fixing the cause); the
    /// bridge takes it over like a new entry. The record stays and counts the re-drive.
    Retry(PoisonArgs),
}

#[derive(Debug, clap::Args)]
pub struct PoisonArgs {
    /// Only this bridge's poison table.
    #[arg(long)]
    bridge: Option<String>,
    /// Only records with this reason (e.g. rejected_by_database).
    #[arg(long)]
    reason: Option<String>,
    /// Only this event.
    #[arg(long)]
    event_id: Option<String>,
    /// At most this many records.
    #[arg(long, default_value_t = 100)]
    limit: u32,
    #[command(flatten)]
    output: Output,
}

#[derive(Debug, Subcommand)]
pub enum DeadAction {
    /// Show DEAD rows.
    List(DeadArgs),
    /// Re-drive DEAD rows to PENDING with attempts reset (their last error is kept).
    Retry(DeadArgs),
    /// Delete DEAD rows.
    Purge(DeadArgs),
}

#[derive(Debug, clap::Args)]
pub struct DeadArgs {
    /// Only this relay's outbox.
    #[arg(long, conflicts_with = "worker")]
    relay: Option<String>,
    /// Only this worker's inbox.
    #[arg(long)]
    worker: Option<String>,
    /// Only this event.
    #[arg(long)]
    event_id: Option<String>,
    /// Only rows DEAD for longer than this, e.g. "1h".
    #[arg(long, value_parser = humantime::parse_duration)]
    older_than: Option<std::time::Duration>,
    /// Only rows whose last error contains this text.
    #[arg(long)]
    error: Option<String>,
    /// At most this many rows.
    #[arg(long, default_value_t = 100)]
    limit: u32,
    #[command(flatten)]
    output: Output,
}

/// How an operator command shows what it does.
#[derive(Debug, clap::Args)]
pub struct Output {
    /// Show what would be done, do nothing.
    #[arg(long)]
    dry_run: bool,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Migrate { print: true } = cli.command {
        // The dialect comes from the config: a config that does not load is an error, not a
        // reason to print another dialect's schema.
        let config = match config::load(&cli.config) {
            Ok(config) => config,
            Err(e) => {
                eprintln!("{}: {e}", cli.config.display());
                return ExitCode::from(2);
            }
        };
        let mysql = config
            .database
            .url
            .is_some_and(|u| crate::config::Dialect::of(u.expose()) == Some(crate::config::Dialect::Mysql));
        for (version, sql) in if mysql { store::migrate::MYSQL } else { store::migrate::POSTGRES } {
            println!("-- {version}\n{sql}");
        }
        return ExitCode::SUCCESS;
    }
    let config = match config::load(&cli.config) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{}: {e}", cli.config.display());
            return ExitCode::from(2);
        }
    };
    telemetry::logging::init(config.telemetry.log_format, &config.telemetry.log_level);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(dispatch(cli.command, config))
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
                lines.iter().for_each(|l| println!("ok: {l}"));
                ExitCode::SUCCESS
            }
            Err(problems) => {
                problems.iter().for_each(|p| eprintln!("error: {p}"));
                ExitCode::FAILURE
            }
        },
        Command::Status { json } => status(&config, json).await,
        Command::Dead { action } => dead(&config, action).await,
        Command::Poison { action } => poison(&config, action).await,
        Command::Pause(args) => control::pause(&config, args).await,
        Command::Resume(args) => control::resume(&config, args).await,
        Command::Verify { relay, since, repair, json } => verify(&config, relay.as_deref(), since, repair, json).await,
        Command::Migrate { .. } => {
            let result = async {
                let db = crate::store::Database::connect(&config.database, "handoff-migrate")?;
                let mut applied: Vec<String> = db.migrate().await?.into_iter().map(str::to_owned).collect();
                applied.extend(create_nats_stream(&config).await?);
                anyhow::Ok(applied)
            };
            match result.await {
                Ok(applied) if applied.is_empty() => {
                    println!("schema is up to date");
                    ExitCode::SUCCESS
                }
                Ok(applied) => {
                    println!("applied: {}", applied.join(", "));
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

/// `migrate` for relays with `broker = "nats"`: the JetStream stream they publish to, created if
/// absent (an existing one is never changed).
async fn create_nats_stream(config: &Config) -> anyhow::Result<Option<String>> {
    let relays: Vec<_> = config.relays.iter().filter(|r| r.broker == crate::config::Broker::Nats).collect();
    let (Some(nats), false) = (&config.nats, relays.is_empty()) else { return Ok(None) };
    let stream = crate::stream::nats::NatsStream::connect(nats, "payload").await?;
    anyhow::ensure!(stream.connected().await, "nats: {} does not answer within {:?}", nats.url, nats.timeout);
    let (subjects, window) = crate::stream::nats::settings::to_create(relays);
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
    let stream = crate::stream::redis::RedisStream::connect(&config.redis).await.ok().map(|(s, _)| s);
    let lines = ops::status::collect(config, &db, stream.as_ref()).await;
    if json {
        println!("{}", serde_json::to_string_pretty(&lines).unwrap_or_default());
    } else {
        print!("{}", ops::status::render(&lines));
    }
    if lines.iter().any(|l| l.error.is_some()) { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

async fn dead(config: &Config, action: DeadAction) -> ExitCode {
    let (kind, args) = match action {
        DeadAction::List(a) => (store::dead::DeadAction::List, a),
        DeadAction::Retry(a) => (store::dead::DeadAction::Retry, a),
        DeadAction::Purge(a) => (store::dead::DeadAction::Purge, a),
    };
    let rows = store::dead::DeadFilter {
        event_id: args.event_id,
        older_than: args.older_than,
        error_contains: args.error,
        limit: args.limit,
    };
    let filter = ops::dead::Filter { relay: args.relay, worker: args.worker, rows };
    let db = match crate::store::Database::connect(&config.database, "handoff-dead") {
        Ok(db) => db,
        Err(e) => {
            eprintln!("{e:#}");
            return ExitCode::FAILURE;
        }
    };
    let rows = match ops::dead::run(config, &db, &filter, kind, args.output.dry_run).await {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("error: {}", crate::error::error_chain(&e));
            return ExitCode::FAILURE;
        }
    };
    let verb = match (kind, args.output.dry_run) {
        (store::dead::DeadAction::List, _) => "DEAD",
        (store::dead::DeadAction::Retry, true) => "would re-drive",
        (store::dead::DeadAction::Retry, false) => "re-driven",
        (store::dead::DeadAction::Purge, true) => "would purge",
        (store::dead::DeadAction::Purge, false) => "purged",
    };
    if args.output.json {
        let doc =
            serde_json::json!({ "action": verb, "dry_run": args.output.dry_run, "count": rows.len(), "rows": rows });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        for r in &rows {
            println!(
                "{:<22} {:<36} {:<28} attempts={} dead_for={:.0}s redrives={} error={}",
                r.source,
                r.event_id,
                r.event_type,
                r.attempts,
                r.dead_for_seconds,
                r.redrives,
                r.last_error.as_deref().unwrap_or("-")
            );
        }
        println!("{verb}: {} row(s)", rows.len());
    }
    ExitCode::SUCCESS
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
        Err(e) => {
            eprintln!("error: {}", crate::error::error_chain(&e));
            return ExitCode::FAILURE;
        }
    };
    let unrepaired: usize =
        reports.iter().flat_map(|r| &r.streams).map(|s| s.missing.saturating_sub(s.redriven as usize)).sum();
    if json {
        println!("{}", serde_json::to_string_pretty(&reports).unwrap_or_default());
    } else {
        for report in &reports {
            if let Some(note) = &report.note {
                println!("relay {}: not verified: {note}", report.relay);
            }
            for s in &report.streams {
                let missing = match (&s.first_missing, &s.last_missing) {
                    (Some(first), Some(last)) => format!("{} missing ({first} … {last})", s.missing),
                    _ => "0 missing".to_owned(),
                };
                println!(
                    "relay {} stream {}: {} checked, {} trimmed, {missing}, {} re-driven",
                    report.relay, s.stream, s.checked, s.trimmed, s.redriven
                );
            }
        }
        let lost: usize = reports.iter().flat_map(|r| &r.streams).map(|s| s.missing).sum();
        println!(
            "verified: {lost} entr{} missing{}",
            if lost == 1 { "y" } else { "ies" },
            if repair { format!(", {} re-driven", lost - unrepaired) } else { String::new() }
        );
    }
    if unrepaired > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

async fn poison(config: &Config, action: PoisonAction) -> ExitCode {
    let (retry, args) = match action {
        PoisonAction::List(a) => (false, a),
        PoisonAction::Retry(a) => (true, a),
    };
    let db = match crate::store::Database::connect(&config.database, "handoff-poison") {
        Ok(db) => db,
        Err(e) => {
            eprintln!("{e:#}");
            return ExitCode::FAILURE;
        }
    };
    let records = store::takeover::PoisonFilter { reason: args.reason, event_id: args.event_id, limit: args.limit };
    let filter = ops::poison::Filter { bridge: args.bridge, records };
    let result = if retry {
        ops::poison::retry(config, &db, &filter, args.output.dry_run).await
    } else {
        ops::poison::list(config, &db, &filter).await
    };
    let rows = match result {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("error: {}", crate::error::error_chain(&e));
            return ExitCode::FAILURE;
        }
    };
    let failed = rows.iter().filter(|r| matches!(r.appended, Some(ops::poison::Reappended::Failed(_)))).count();
    let verb = match (retry, args.output.dry_run) {
        (false, _) => "poison",
        (true, true) => "would re-append",
        (true, false) => "re-appended",
    };
    if args.output.json {
        let doc = serde_json::json!({ "action": verb, "count": rows.len() - failed, "failed": failed, "rows": rows });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        for r in &rows {
            let outcome = match &r.appended {
                Some(ops::poison::Reappended::Entry(id)) => format!(" -> {id}"),
                Some(ops::poison::Reappended::Failed(e)) => format!(" NOT re-appended: {e}"),
                None => String::new(),
            };
            println!(
                "{:<16} #{:<6} {:<28} {:<36} {:<22} age={:.0}s redrives={} {}{outcome}",
                r.bridge,
                r.record.id,
                r.record.stream,
                r.record.event_id.as_deref().unwrap_or("-"),
                r.record.reason,
                r.record.age_seconds,
                r.record.redrives,
                r.record.detail
            );
        }
        println!(
            "{verb}: {} record(s){}",
            rows.len() - failed,
            if failed > 0 { format!(", {failed} failed") } else { String::new() }
        );
    }
    if failed > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
