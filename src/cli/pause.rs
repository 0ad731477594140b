//! `handoff pause` and `handoff resume`.

use std::process::ExitCode;
use std::time::Duration;

use super::exit::fail;
use crate::config::Config;
use crate::pause::{self as pausing, ComponentKind, Pause};

/// Which component: exactly one of `--relay`, `--bridge`, `--worker`.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub(super) struct TargetArgs {
    /// A relay's name.
    #[arg(long)]
    relay: Option<String>,
    /// A bridge's name (all its streams).
    #[arg(long)]
    bridge: Option<String>,
    /// A worker's name.
    #[arg(long)]
    worker: Option<String>,
}

impl TargetArgs {
    fn component(&self) -> (ComponentKind, &str) {
        match (&self.relay, &self.bridge, &self.worker) {
            (Some(name), _, _) => (ComponentKind::Relay, name),
            (_, Some(name), _) => (ComponentKind::Bridge, name),
            (_, _, Some(name)) => (ComponentKind::Worker, name),
            // clap requires one of the three.
            (None, None, None) => (ComponentKind::Relay, ""),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct PauseArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Why (shown by `status`, `/readyz` and the status page).
    #[arg(long)]
    reason: Option<String>,
    /// End the pause by itself after this long, e.g. "30m".
    #[arg(long = "for", value_parser = humantime::parse_duration)]
    expires_after: Option<Duration>,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(super) async fn pause(config: &Config, args: PauseArgs) -> ExitCode {
    let (component, name) = args.target.component();
    let result = async {
        let target = pausing::known(&config.pause_targets(), component, name)?;
        let db = connect(config)?;
        pausing::pause(&db, target, args.reason.clone(), args.expires_after, &pausing::cli_user()).await
    };
    match result.await {
        Ok(pause) => {
            show(&pause, "paused", args.json, config.pause.poll_interval);
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

pub(super) async fn resume(config: &Config, args: ResumeArgs) -> ExitCode {
    let (component, name) = args.target.component();
    let result = async {
        let target = pausing::known(&config.pause_targets(), component, name)?;
        let db = connect(config)?;
        Ok::<_, pausing::PauseError>((pausing::resume(&db, &target).await?, target))
    };
    match result.await {
        Ok((Some(pause), _)) => {
            show(&pause, "resumed", args.json, config.pause.poll_interval);
            ExitCode::SUCCESS
        }
        Ok((None, target)) => {
            if args.json {
                say!(
                    "{}",
                    serde_json::json!({ "action": "not paused", "component": target.component, "name": target.name })
                );
            } else {
                say!("{target} was not paused");
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

fn connect(config: &Config) -> Result<crate::store::Database, pausing::PauseError> {
    Ok(crate::store::Database::connect(&config.database, "handoff-pause")?)
}

fn show(pause: &Pause, verb: &str, json: bool, poll: Duration) {
    if json {
        let doc = serde_json::json!({ "action": verb, "pause": pause });
        say!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return;
    }
    let reason = pause.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
    let expiry = pause.expires_in_seconds.map(|s| format!(", ends by itself in {s:.0}s")).unwrap_or_default();
    say!("{verb}: {}{reason}{expiry}; every replica sees it within {poll:?}", pause.target);
}
