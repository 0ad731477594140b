//! How an operator's command reports a failure.

use std::process::ExitCode;

/// The command failed: `error: <message>` on stderr, exit 1.
pub(super) fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::FAILURE
}
