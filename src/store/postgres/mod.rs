//! How handoff talks to Postgres, whatever the seam: connections, error classification, values
//! between configured SQL and the wire, and where a locked claim starts reading. The seams'
//! statements are in `relay/outbox`, `bridge/takeover` and `worker/inbox`.

pub(crate) mod connect;
pub(crate) mod errors;
mod replies;
pub(crate) mod scan_start;
pub(crate) mod tx;
pub(crate) mod values;
pub(crate) mod watched;
