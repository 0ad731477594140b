//! Operator commands that read across features: `status`, `verify` and `grants`.

pub(crate) mod grants;
pub(crate) mod status;
pub(crate) mod verify;
