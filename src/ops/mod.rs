//! Operator commands: `status`, `dead list | retry | purge`, `poison list | retry`, `verify`,
//! `pause | resume`, `inbox reprocess`, `bridge rewind`.

pub mod control;
pub mod dead;
pub mod poison;
pub mod reprocess;
pub mod rewind;
pub mod status;
pub mod verify;
