//! Operator commands: `status`, `dead list | retry | purge`, `poison list | retry`, `verify`.

pub mod dead;
pub mod poison;
pub mod status;
pub mod verify;
