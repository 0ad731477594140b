//! Operator commands that read across features: `status`, `verify` and `grants`.

pub mod grants;
pub mod status;
pub mod verify;
