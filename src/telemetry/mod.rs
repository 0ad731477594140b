//! Metrics, health, logs and the HTTP listener that serves them.

mod connections;
pub mod health;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod throttle;
pub mod traces;
