//! Metrics, health, logs and the HTTP listener that serves them.

pub(crate) mod config;
mod connections;
pub(crate) mod health;
pub(crate) mod http;
pub(crate) mod listener;
pub(crate) mod logging;
pub(crate) mod metrics;
pub(crate) mod throttle;
pub(crate) mod traces;
