//! `handoff pause | resume`: one operation each, shared by the CLI and the admin API. A pause is
//! a row in the component's own database (`store::control`), so every replica sees it within
//! `pause.poll_interval` and it survives restarts.

use std::time::Duration;

use crate::config::Config;
use crate::error::error_chain;
use crate::store::Database;
use crate::store::control::{self, ComponentKind, Pause, PauseRequest, Target};

/// Why a pause or resume did nothing.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("no {} named `{}` in the config (configured: {})", .0.component.label(), .0.name, configured(.1))]
    Unknown(Target, Vec<String>),
    #[error("a pause reason is at most {MAX_REASON} bytes ({0} given)")]
    ReasonTooLong(usize),
    #[error("{}", error_chain(.0))]
    Store(#[from] crate::store::StoreError),
    #[error("database: {0}")]
    Connect(#[from] crate::store::error::ConnectError),
}

fn configured(names: &[String]) -> String {
    if names.is_empty() { "none".to_owned() } else { names.join(", ") }
}

/// Longer reasons are refused: the reason is shown on the status page and in every replica's
/// readiness answer.
pub const MAX_REASON: usize = 500;

/// `target` if the config names it (a pause of a misspelt name would pause nothing).
pub fn known(config: &Config, component: ComponentKind, name: &str) -> Result<Target, ControlError> {
    let names: Vec<String> = match component {
        ComponentKind::Relay => config.relays.iter().map(|r| r.name.clone()).collect(),
        ComponentKind::Bridge => config.bridges.iter().map(|b| b.name.clone()).collect(),
        ComponentKind::Worker => config.workers.iter().map(|w| w.name.clone()).collect(),
    };
    let target = Target { component, name: name.to_owned() };
    if names.iter().any(|n| n == name) { Ok(target) } else { Err(ControlError::Unknown(target, names)) }
}

/// Pauses `target` (or updates the reason and expiry of its pause): idempotent.
pub async fn pause(
    db: &Database,
    target: Target,
    reason: Option<String>,
    expires_after: Option<Duration>,
    paused_by: &str,
) -> Result<Pause, ControlError> {
    let reason = reason.filter(|r| !r.trim().is_empty());
    if let Some(r) = &reason
        && r.len() > MAX_REASON
    {
        return Err(ControlError::ReasonTooLong(r.len()));
    }
    let request = PauseRequest { target, reason, paused_by: paused_by.to_owned(), expires_after };
    Ok(control::pause(db, &request).await?)
}

/// Resumes `target`; the pause that was in force, if any (resuming a running one changes
/// nothing: idempotent).
pub async fn resume(db: &Database, target: &Target) -> Result<Option<Pause>, ControlError> {
    Ok(control::resume(db, target).await?)
}

/// Who runs the CLI: `cli:<user>`, as a pause records it.
pub fn cli_user() -> String {
    let user = std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).unwrap_or_default();
    let user: String = user.chars().filter(|c| c.is_ascii_graphic()).take(64).collect();
    if user.is_empty() { "cli".to_owned() } else { format!("cli:{user}") }
}
