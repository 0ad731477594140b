//! `handoff inbox reprocess`, the whole feature: a worker's settled inbox rows, chosen by a
//! selection, back to PENDING so its (fixed) handlers run them again. `commands.rs` is the
//! operation the CLI and the admin API call; `database.rs` moves the rows on either database.

mod commands;
mod database;

pub(crate) use commands::{InboxTime, Request, run};
pub(crate) use database::Settled;
