//! Operator commands: `status`, `dead list | retry | purge`, `poison list | retry`.

pub mod dead;
pub mod poison;
pub mod status;
