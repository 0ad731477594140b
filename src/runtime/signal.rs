//! SIGTERM / SIGINT: the first one drains, a second one exits at once.

use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};

/// Resolves on the first SIGTERM or SIGINT, and arms a watcher that exits the process
/// immediately on the next one.
pub(crate) async fn first_signal() {
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        warn!("cannot install signal handlers; only an external kill stops the process");
        return std::future::pending().await;
    };
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    info!(signal = name, "shutdown requested; draining (send again to exit at once)");
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        warn!("second signal: exiting without draining");
        std::process::exit(130);
    });
}
