//! How handoff talks to MySQL 8 / MariaDB 10.6+, whatever the seam: the pool, error
//! classification, values between configured SQL and the wire. No `UPDATE … RETURNING` here:
//! claims are a short script in one transaction (lock with `FOR UPDATE SKIP LOCKED`, update,
//! read back). Arrays travel as JSON arrays and are unpacked with `JSON_TABLE`. Every time
//! comparison uses `NOW(3)`. The seams' statements are in `relay/outbox`, `bridge/takeover` and
//! `worker/inbox`.

pub(crate) mod errors;
pub(crate) mod pool;
pub(crate) mod tunnel;
pub(crate) mod values;
