//! `handoff bridge rewind`.

use std::process::ExitCode;

use super::exit::fail;
use crate::config::Config;
use crate::rewind::{self, RewindTo};

#[derive(Debug, clap::Subcommand)]
pub enum BridgeAction {
    /// Move a bridge's group back so entries are delivered again; the inbox drops those it holds.
    /// Redis: XGROUP SETID. NATS: each durable consumer made again from there (pause the bridge
    /// first). Kafka: `--to` is a time; committed offsets move (stop the bridge first).
    Rewind(RewindArgs),
}

#[derive(Debug, clap::Args)]
pub struct RewindArgs {
    /// The bridge whose group moves.
    #[arg(long)]
    bridge: String,
    /// Only this stream of the bridge (its key). Default: all of them.
    #[arg(long)]
    stream: Option<String>,
    /// An entry id (redelivery starts after it), a duration ago ("1h") or an RFC 3339 time.
    #[arg(long, value_parser = RewindTo::parse)]
    to: RewindTo,
    /// Show where the group would move, move nothing.
    #[arg(long)]
    dry_run: bool,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(super) async fn run(config: &Config, action: BridgeAction) -> ExitCode {
    let BridgeAction::Rewind(args) = action;
    match rewind::rewind(config, &args.bridge, args.stream.as_deref(), &args.to, args.dry_run).await {
        Ok(moved) if args.json => {
            let doc = serde_json::json!({ "bridge": args.bridge, "dry_run": args.dry_run, "streams": moved });
            say!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(moved) => {
            let verb = if args.dry_run { "would move" } else { "moved" };
            for m in &moved {
                say!(
                    "bridge {} stream {}: {verb} from {} to {} ({} pending entr{} stay pending)",
                    args.bridge,
                    m.stream,
                    m.from,
                    m.to,
                    m.pending,
                    if m.pending == 1 { "y" } else { "ies" }
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
