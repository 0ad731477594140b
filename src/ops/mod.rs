//! Operator commands: `status` and `dead list | retry | purge`.

pub mod dead;
pub mod status;
