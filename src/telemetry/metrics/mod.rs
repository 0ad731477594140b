//! Metrics, registered once on the app's registry and bound per component.
//!
//! Labels are component names and small fixed enums (`reason`), never row or event ids. The
//! metrics reference in docs/reference/metrics.md lists every name; a test encodes a fresh registry against it.

mod bridge;
mod pause;
pub(crate) mod process;
mod registry;
mod relay;
mod worker;

pub use bridge::{BridgeHandles, BridgeMetrics};
pub use pause::PauseMetrics;
pub use relay::{FailureReason, RelayHandles, RelayMetrics};
pub use worker::{WorkerHandles, WorkerMetrics};

use prometheus::Registry;

/// Every family of every component, for the reference test and `handoff metrics`.
pub fn register_all(
    registry: &Registry,
) -> prometheus::Result<(RelayMetrics, BridgeMetrics, WorkerMetrics, PauseMetrics)> {
    process::register(registry)?;
    Ok((
        RelayMetrics::register(registry)?,
        BridgeMetrics::register(registry)?,
        WorkerMetrics::register(registry)?,
        PauseMetrics::register(registry)?,
    ))
}
