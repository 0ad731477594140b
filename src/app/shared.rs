//! What every component is built from, and who this process is.

use prometheus::Registry;
use tokio_util::sync::CancellationToken;

use crate::fault::Faults;
use crate::pause::Pauses;
use crate::runtime::supervisor::Supervisor;
use crate::telemetry::health::Health;

/// What every component is built from; owned by the app, not global.
pub(super) struct Shared {
    pub(super) registry: Registry,
    pub(super) health: Health,
    /// Stop claiming / reading.
    pub(super) shutdown: CancellationToken,
    /// Abandon in-flight work (drain time over).
    pub(super) abandon: CancellationToken,
    /// Every long-running task, spawned by name; a panic in one stops the process.
    pub(super) tasks: Supervisor,
    pub(super) faults: Faults,
    pub(super) claimant: String,
    /// The pauses in force, read by one task and seen by every component.
    pub(super) pauses: Pauses,
}

/// The host name: the pod name in Kubernetes.
pub(super) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into())
}

/// `host:pid:nonce` – unique per process even when every container is PID 1 on the same host name.
pub(super) fn claimant_id() -> String {
    let nonce: u32 = rand::random();
    format!("{}:{}:{nonce:08x}", host_name(), std::process::id())
}
