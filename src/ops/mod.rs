//! Operator commands: `status`, `dead list | retry | purge`, `poison list | retry`, `verify`,
//! `pause | resume`, `replay`, `inbox reprocess`, `bridge rewind`, `grants`.

pub mod control;
pub mod dead;
pub mod grants;
pub mod poison;
pub mod replay;
pub mod reprocess;
pub mod rewind;
mod rewind_kafka;
mod rewind_nats;
pub mod shards;
pub mod status;
pub mod verify;
