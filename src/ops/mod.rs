//! Operator commands: `status`, `dead list | retry | purge`, `poison list | retry`, `verify`,
//! `pause | resume`.

pub mod control;
pub mod dead;
pub mod poison;
pub mod status;
pub mod verify;
