//! `handoff replay`: progress on a terminal as a bar, otherwise one JSON line per interval.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::exit::fail;
use super::selection::SelectionArgs;
use crate::broker::Broker;
use crate::broker::nats::NatsStream;
use crate::config::Config;
use crate::replay::{self, OutboxTime, Progress, Request};

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The relay whose DELIVERED rows to append again.
    #[arg(long)]
    relay: String,
    #[command(flatten)]
    selection: SelectionArgs,
    /// The time `--since` / `--until` look at.
    #[arg(long, value_enum, default_value = "created")]
    time: OutboxTime,
    /// Append every entry to this stream (a subject on NATS), e.g. a backfill stream for a new
    /// consumer. Default: each row's own stream.
    #[arg(long)]
    to_stream: Option<String>,
    /// Rows per second at most (0: as fast as the broker takes them).
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// Rows per page (one append and one checkpoint each).
    #[arg(long, default_value_t = 500)]
    batch: u32,
    /// The job's name (its checkpoint). Default: derived from the relay, filters and target,
    /// so running the same command again resumes it.
    #[arg(long)]
    job: Option<String>,
    /// Start the job over.
    #[arg(long)]
    restart: bool,
    /// Replay what is left of a range that retention has partly deleted.
    #[arg(long)]
    allow_partial: bool,
    /// Count what would be replayed, append nothing.
    #[arg(long)]
    dry_run: bool,
    /// How often progress is printed when not on a terminal (one JSON line each).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    progress_every: Duration,
}

pub(super) async fn run(config: &Config, args: ReplayArgs) -> ExitCode {
    let request = Request {
        relay: args.relay.clone(),
        selection: args.selection.into(),
        time: args.time,
        to_stream: args.to_stream,
        rate: args.rate,
        batch: args.batch,
        job: args.job,
        restart: args.restart,
        allow_partial: args.allow_partial,
    };
    let db = match crate::store::Database::connect(&config.database, "handoff-replay") {
        Ok(db) => db,
        Err(e) => return fail(format!("database: {e}")),
    };
    let plan = match replay::plan(config, &db, &request, !args.dry_run).await {
        Ok(plan) => plan,
        Err(e) => return fail(e),
    };
    let c = &plan.checkpoint;
    let target = if c.target.is_empty() { "each row's own stream".to_owned() } else { c.target.clone() };
    if args.dry_run {
        let left = c.total - c.appended;
        say!(
            "would replay {left} row(s) of relay {} to {target} (job {}, ids up to {}{})",
            c.relay,
            c.job,
            c.through_id,
            if plan.resumed { format!(", resuming after id {}", c.after_id) } else { String::new() }
        );
        return ExitCode::SUCCESS;
    }
    if plan.finished {
        say!("job {} finished already: {} appended; --restart replays it again", c.job, c.appended);
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "{} job {}: {} row(s) of relay {} to {target}",
        if plan.resumed { format!("resuming after id {}:", c.after_id) } else { "starting".to_owned() },
        c.job,
        c.total,
        c.relay
    );
    let stop = CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        crate::runtime::signal::first_signal().await;
        on_signal.cancel();
    });
    let mut shown = Shown::new(args.progress_every);
    let printer = |p: &Progress| shown.show(p);
    let Some(relay) = config.relays.iter().find(|r| r.name == args.relay) else {
        return fail(format!("no relay named `{}`", args.relay));
    };
    let result = match (relay.broker, &config.nats) {
        (Broker::Redis, _) => match crate::broker::redis::RedisStream::connect(&config.redis).await {
            Ok((stream, _)) => replay::run(config, &db, &stream, &request, plan.checkpoint, printer, stop).await,
            Err(e) => return fail(format!("redis: {e}")),
        },
        // The relay's message mapping: its payload field is the body.
        (Broker::Nats, Some(nats)) => {
            match NatsStream::connect(nats, relay.payload_field().unwrap_or_default()).await {
                Ok(stream) => replay::run(config, &db, &stream, &request, plan.checkpoint, printer, stop).await,
                Err(e) => return fail(format!("nats: {e}")),
            }
        }
        (Broker::Nats, None) => return fail("broker = \"nats\" without [nats]"),
        (Broker::Kafka, _) => match &config.kafka {
            Some(kafka) => match crate::broker::kafka::KafkaStream::connect(kafka, "")
                .map(|k| k.laying_out(relay.payload_field(), relay.kafka_key()))
            {
                Ok(stream) => replay::run(config, &db, &stream, &request, plan.checkpoint, printer, stop).await,
                Err(e) => return fail(e),
            },
            None => return fail("broker = \"kafka\" without [kafka]"),
        },
    };
    match result {
        Ok(p) if p.interrupted => {
            eprintln!("\ninterrupted after {} of {}; run the same command again to resume", p.appended, p.total);
            ExitCode::from(130)
        }
        Ok(p) => {
            say!("{}", serde_json::json!({ "replayed": p.appended, "total": p.total, "job": p.job, "done": true }));
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// Prints progress: a bar redrawn in place on a terminal, else a JSON line per interval.
struct Shown {
    terminal: bool,
    every: Duration,
    last: Option<Instant>,
    started: Instant,
}

impl Shown {
    fn new(every: Duration) -> Self {
        Self { terminal: std::io::stderr().is_terminal(), every, last: None, started: Instant::now() }
    }

    fn show(&mut self, p: &Progress) {
        let share = if p.total > 0 { p.appended as f64 / p.total as f64 } else { 1.0 };
        if self.terminal {
            let filled = (share * 30.0).round() as usize;
            let rate = p.appended as f64 / self.started.elapsed().as_secs_f64().max(0.001);
            eprint!(
                "\r[{}{}] {}/{} {:.0}% {rate:.0} rows/s ",
                "#".repeat(filled.min(30)),
                ".".repeat(30 - filled.min(30)),
                p.appended,
                p.total,
                share * 100.0
            );
            let _ = std::io::stderr().flush();
            return;
        }
        if p.done || self.last.is_none_or(|at| at.elapsed() >= self.every) {
            self.last = Some(Instant::now());
            say!("{}", serde_json::to_string(p).unwrap_or_default());
        }
    }
}
