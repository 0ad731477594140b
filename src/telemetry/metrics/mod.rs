//! Metrics, registered once on the app's registry and bound per component.
//!
//! Labels are component names and small fixed enums (`reason`), never row or event ids. The
//! metrics reference in docs/reference/metrics.md lists every name; a test encodes a fresh registry against it.

mod bridge;
pub(crate) mod process;
pub(crate) mod registry;
mod relay;
mod worker;

pub(crate) use bridge::{BridgeHandles, BridgeMetrics};
pub(crate) use registry::Reg;
pub(crate) use relay::{FailureReason, RelayHandles, RelayMetrics};
pub(crate) use worker::{WorkerHandles, WorkerMetrics};
