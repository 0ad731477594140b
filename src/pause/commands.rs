//! `handoff pause | resume` and the pauses in force: one operation each, shared by the CLI, the
//! admin API and the watcher, on whichever database the URL names. A pause is a row in the
//! component's own database, so every replica sees it within `pause.poll_interval` and it
//! survives restarts.

use std::time::Duration;

use super::target::{ComponentKind, Pause, PauseRequest, Target};
use super::{mysql, postgres};
use crate::error::error_chain;
use crate::store::Database;
use crate::store::error::StoreResult;

/// Why a pause or resume did nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PauseError {
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
pub(super) const MAX_REASON: usize = 500;

/// `component` `name` if `configured` (every component of the config) holds it: a pause of a
/// misspelt name would pause nothing.
pub(crate) fn known(configured: &[Target], component: ComponentKind, name: &str) -> Result<Target, PauseError> {
    let target = Target { component, name: name.to_owned() };
    if configured.contains(&target) {
        return Ok(target);
    }
    let names = configured.iter().filter(|t| t.component == component).map(|t| t.name.clone()).collect();
    Err(PauseError::Unknown(target, names))
}

/// Pauses `target` (or updates the reason and expiry of its pause, which keeps its start): a
/// retried call changes nothing more.
pub(crate) async fn pause(
    db: &Database,
    target: Target,
    reason: Option<String>,
    expires_after: Option<Duration>,
    paused_by: &str,
) -> Result<Pause, PauseError> {
    let reason = reason.filter(|r| !r.trim().is_empty());
    if let Some(r) = &reason
        && r.len() > MAX_REASON
    {
        return Err(PauseError::ReasonTooLong(r.len()));
    }
    let request = PauseRequest { target, reason, paused_by: paused_by.to_owned(), expires_after };
    let pause = match db {
        Database::Postgres(pool) => postgres::pause(pool, &request).await?,
        Database::Mysql(pool) => mysql::pause(pool, &request).await?,
    };
    Ok(pause)
}

/// Resumes `target`; the pause that was in force, if any (resuming a running one changes
/// nothing: idempotent).
pub(crate) async fn resume(db: &Database, target: &Target) -> Result<Option<Pause>, PauseError> {
    let pause = match db {
        Database::Postgres(pool) => postgres::resume(pool, target).await?,
        Database::Mysql(pool) => mysql::resume(pool, target).await?,
    };
    Ok(pause)
}

/// The pauses in force (expired rows are not).
pub(crate) async fn active(db: &Database) -> StoreResult<Vec<Pause>> {
    match db {
        Database::Postgres(pool) => postgres::active(pool).await,
        Database::Mysql(pool) => mysql::active(pool).await,
    }
}

/// Who runs the CLI: `cli:<user>`, as a pause records it.
pub(crate) fn cli_user() -> String {
    let user = std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).unwrap_or_default();
    let user: String = user.chars().filter(|c| c.is_ascii_graphic()).take(64).collect();
    if user.is_empty() { "cli".to_owned() } else { format!("cli:{user}") }
}
