//! How handoff talks to MySQL 8 / MariaDB 10.6+, whatever the seam: the pool, error
//! classification, values between configured SQL and the wire. No `UPDATE … RETURNING` here:
//! claims are a short script in one transaction (lock with `FOR UPDATE SKIP LOCKED`, update,
//! read back). Arrays travel as JSON arrays and are unpacked with `JSON_TABLE`. Every time
//! comparison uses `NOW(3)`. The seams' statements are in `store/outbox`, `store/takeover` and
//! `store/inbox`.

pub mod errors;
pub mod pool;
pub mod values;

pub use errors::describe;
pub use pool::{Pool, claim_tx, pool, probe, tls_session};
