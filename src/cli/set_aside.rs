//! `handoff dead` and `handoff poison`: what was set aside, listed and re-driven.

use std::process::ExitCode;

use clap::Subcommand;

use super::exit::fail;
use crate::config::Config;

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
pub(super) struct Output {
    /// Show what would be done, do nothing.
    #[arg(long)]
    dry_run: bool,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(super) async fn dead(config: &Config, action: DeadAction) -> ExitCode {
    let (kind, args) = match action {
        DeadAction::List(a) => (crate::dead::DeadAction::List, a),
        DeadAction::Retry(a) => (crate::dead::DeadAction::Retry, a),
        DeadAction::Purge(a) => (crate::dead::DeadAction::Purge, a),
    };
    let rows = crate::dead::DeadFilter {
        event_id: args.event_id,
        older_than: args.older_than,
        error_contains: args.error,
        limit: args.limit,
        offset: 0,
    };
    let filter = crate::dead::Filter { relay: args.relay, worker: args.worker, rows };
    let db = match crate::store::Database::connect(&config.database, "handoff-dead") {
        Ok(db) => db,
        Err(e) => {
            eprintln!("{e:#}");
            return ExitCode::FAILURE;
        }
    };
    let rows = match crate::dead::run(config, &db, &filter, kind, args.output.dry_run).await {
        Ok(rows) => rows,
        Err(e) => return fail(crate::error::error_chain(&e)),
    };
    let verb = match (kind, args.output.dry_run) {
        (crate::dead::DeadAction::List, _) => "DEAD",
        (crate::dead::DeadAction::Retry, true) => "would re-drive",
        (crate::dead::DeadAction::Retry, false) => "re-driven",
        (crate::dead::DeadAction::Purge, true) => "would purge",
        (crate::dead::DeadAction::Purge, false) => "purged",
    };
    if args.output.json {
        let doc =
            serde_json::json!({ "action": verb, "dry_run": args.output.dry_run, "count": rows.len(), "rows": rows });
        say!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        for r in &rows {
            say!(
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
        say!("{verb}: {} row(s)", rows.len());
    }
    ExitCode::SUCCESS
}

pub(super) async fn poison(config: &Config, action: PoisonAction) -> ExitCode {
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
    let records =
        crate::poison::PoisonFilter { reason: args.reason, event_id: args.event_id, limit: args.limit, offset: 0 };
    let filter = crate::poison::Filter { bridge: args.bridge, records };
    let result = if retry {
        crate::poison::retry(config, &db, &filter, args.output.dry_run).await
    } else {
        crate::poison::list(config, &db, &filter).await
    };
    let rows = match result {
        Ok(rows) => rows,
        Err(e) => return fail(crate::error::error_chain(&e)),
    };
    let failed = rows.iter().filter(|r| matches!(r.appended, Some(crate::poison::Reappended::Failed(_)))).count();
    let verb = match (retry, args.output.dry_run) {
        (false, _) => "poison",
        (true, true) => "would re-append",
        (true, false) => "re-appended",
    };
    if args.output.json {
        let doc = serde_json::json!({ "action": verb, "count": rows.len() - failed, "failed": failed, "rows": rows });
        say!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        for r in &rows {
            let outcome = match &r.appended {
                Some(crate::poison::Reappended::Entry(id)) => format!(" -> {id}"),
                Some(crate::poison::Reappended::Failed(e)) => format!(" NOT re-appended: {e}"),
                None => String::new(),
            };
            say!(
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
        say!(
            "{verb}: {} record(s){}",
            rows.len() - failed,
            if failed > 0 { format!(", {failed} failed") } else { String::new() }
        );
    }
    if failed > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
