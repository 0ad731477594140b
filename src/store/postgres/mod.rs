//! How handoff talks to Postgres, whatever the seam: connections, error classification, values
//! between configured SQL and the wire, and where a locked claim starts reading. The seams'
//! statements are in `store/outbox`, `store/takeover` and `store/inbox`.

pub mod connect;
pub mod errors;
pub mod scan_start;
pub mod tx;
pub mod values;

pub use connect::{connect_config, pool, probe, tls_session};
pub use errors::describe;
