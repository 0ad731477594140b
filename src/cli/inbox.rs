//! `handoff inbox reprocess`.

use std::process::ExitCode;

use super::exit::fail;
use super::selection::SelectionArgs;
use crate::config::Config;
use crate::reprocess::Settled;
use crate::reprocess::{self, InboxTime, Request};

#[derive(Debug, clap::Subcommand)]
pub enum InboxAction {
    /// Put a worker's PROCESSED (or DEAD) rows back to PENDING so its handlers run them again
    /// (after a handler fix). Handlers must be idempotent: they see events they applied before.
    Reprocess(ReprocessArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum State {
    Processed,
    Dead,
}

#[derive(Debug, clap::Args)]
pub struct ReprocessArgs {
    /// The worker whose inbox rows to reprocess.
    #[arg(long)]
    worker: String,
    /// Which settled rows (repeatable). Default: processed.
    #[arg(long = "state", value_enum)]
    states: Vec<State>,
    /// The time `--since` / `--until` look at.
    #[arg(long, value_enum, default_value = "received")]
    time: InboxTime,
    #[command(flatten)]
    selection: SelectionArgs,
    /// Every row of the chosen states (no filter).
    #[arg(long)]
    all: bool,
    /// At most this many rows.
    #[arg(long, default_value_t = 10_000)]
    limit: u32,
    /// Count what would be reprocessed, change nothing.
    #[arg(long)]
    dry_run: bool,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(super) async fn run(config: &Config, action: InboxAction) -> ExitCode {
    let InboxAction::Reprocess(args) = action;
    let from = args
        .states
        .iter()
        .map(|s| match s {
            State::Processed => Settled::Processed,
            State::Dead => Settled::Dead,
        })
        .collect();
    let request = Request {
        worker: args.worker,
        from,
        time: args.time,
        selection: args.selection.into(),
        all: args.all,
        limit: args.limit,
        dry_run: args.dry_run,
    };
    let db = match crate::store::Database::connect(&config.database, "handoff-reprocess") {
        Ok(db) => db,
        Err(e) => return fail(format!("database: {e}")),
    };
    match reprocess::run(config, &db, request).await {
        Ok(report) if args.json => {
            say!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(report) => {
            let verb = if report.dry_run { "would reprocess" } else { "reprocessed" };
            let more = report.matching - report.reprocessed;
            say!(
                "worker {}: {verb} {} row(s){}",
                report.worker,
                report.reprocessed,
                if more > 0 && report.dry_run {
                    format!(" ({} match; --limit {})", report.matching, report.limit)
                } else if more > 0 {
                    format!(" ({more} more match: run again)")
                } else {
                    String::new()
                }
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
