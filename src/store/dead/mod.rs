//! DEAD rows, as an operator sees them: the same in an outbox and in an inbox (the reference
//! schemas share the columns), listed, re-driven to PENDING or purged, on either dialect.

pub(crate) mod dialect;
pub(crate) mod mysql;
pub(crate) mod postgres;
pub(crate) mod seam;

pub use dialect::run;
pub use seam::{DeadAction, DeadFilter, DeadRow, DeadTable};
