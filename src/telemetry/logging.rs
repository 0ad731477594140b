//! `tracing` subscriber: human-readable text locally, one JSON object per line in containers.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::telemetry::config::LogFormat;

/// Installs the global subscriber. `RUST_LOG`, when set, wins over the configured level so an
/// operator can raise verbosity without editing the mounted config.
pub(crate) fn init(format: LogFormat, level: &str) {
    // Server NOTICEs (e.g. "relation already exists, skipping") are not handoff's news.
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("{level},tokio_postgres=warn")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).try_init(),
    };
    // A second init (tests running several apps in one process) keeps the first subscriber.
    drop(result);
}
