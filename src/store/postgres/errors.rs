//! The one place that decides, for Postgres, what an error means: an outage of the store (and
//! which kind) or a refusal of the data, from the SQLSTATE.

use tokio_postgres::error::SqlState;

use super::values::{BindError, CellError};
use crate::store::error::{OutageKind, PrepareError, StoreError};

pub(crate) fn pool_error(statement: &'static str, error: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Unavailable { statement, kind: OutageKind::Connection, source: Box::new(error) }
}

/// The one place that decides, for Postgres, whether an error is an outage of the store (and
/// which kind) or a refusal of the data: from the SQLSTATE.
pub(crate) fn query_error(statement: &'static str, error: tokio_postgres::Error) -> StoreError {
    let kind = match error.code() {
        // No SQLSTATE: a client-side failure. A value that cannot be sent as the parameter's
        // type is the data's problem; reading results wrong is the contract's; the rest
        // (closed, I/O, timeouts, TLS, connect) means the database went away.
        None => {
            let cause = std::error::Error::source(&error);
            if cause.is_some_and(|c| c.is::<BindError>()) {
                return StoreError::Rejected { statement, source: Box::new(error) };
            }
            if cause.is_some_and(|c| c.is::<CellError>()) || misread(&error) {
                OutageKind::Other
            } else {
                OutageKind::Connection
            }
        }
        Some(code) => match (&code.code()[..2], code) {
            // Data exceptions, integrity constraints, WITH CHECK OPTION, and what a trigger or
            // function raised about the row (business rules): the data's fault.
            ("22" | "23" | "44" | "P0", _) => return StoreError::Rejected { statement, source: Box::new(error) },
            ("08" | "53" | "57" | "58", _) => OutageKind::Connection,
            ("40", _) => OutageKind::Conflict,
            (_, c) if *c == SqlState::LOCK_NOT_AVAILABLE => OutageKind::Conflict,
            (_, c) if *c == SqlState::READ_ONLY_SQL_TRANSACTION => OutageKind::ReadOnly,
            (_, c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => OutageKind::Permission,
            ("28", _) => OutageKind::Permission,
            ("42" | "3D" | "3F", _) => OutageKind::Schema,
            _ => OutageKind::Other,
        },
    };
    StoreError::Unavailable { statement, kind, source: Box::new(error) }
}

/// A result read against its shape (a column asked for by a name or position it does not have,
/// a row count that is not the one expected): the client says so only in words.
fn misread(error: &tokio_postgres::Error) -> bool {
    let text = error.to_string();
    ["invalid column", "expected "].iter().any(|p| text.starts_with(p))
}

/// The server's message for a rejected statement (with SQLSTATE); the plain text otherwise.
pub(crate) fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => error.to_string(),
    }
}

/// A statement the database refused to prepare, as a message naming `context`; `Unreachable`
/// when the connection went away meanwhile (then startup waits and tries again).
pub(crate) fn prepare_refusal(context: &str, e: tokio_postgres::Error) -> Result<String, PrepareError> {
    let text = format!("{context}: {}", describe(&e));
    if query_error("prepare", e).is_connection() { Err(PrepareError::Unreachable(text)) } else { Ok(text) }
}
