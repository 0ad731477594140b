//! The one TOML file that configures handoff: its root, loading and the checks across sections.
//!
//! Every struct rejects unknown keys, every duration carries its unit (`"250ms"`, `"30s"`), and
//! every field documents its default. Each section lives beside what it configures, knows
//! nothing of the root and checks what it says alone (`problems`): `relay/config/`,
//! `bridge/config.rs`, `worker/config.rs`, `pause/config.rs`, `relay/partitions/config.rs`,
//! `store/config.rs` (`[database]`), `broker/{redis,nats,kafka}/config.rs`,
//! `telemetry/config.rs`, `tls/config.rs`; what several share sits in leaves (`secret.rs`,
//! `template.rs`, `names.rs`, `runtime/loop_config.rs`). This module holds the root (`file`),
//! loading (file + environment + `*_file` secrets) in `load`, the checks that read more than one
//! section (`validate`, and `nats`/`kafka` for what a relay or bridge may ask of its broker), and
//! the choices `claim = "auto"` and an absent `apply` make (`claim`, `apply`). Only the
//! application, the CLI and the operator commands import it.

pub(crate) mod admin;
pub(crate) mod apply;
mod claim;
pub(crate) mod file;
mod kafka;
pub(crate) mod load;
mod nats;
mod shards;
mod validate;

pub(crate) use file::Config;
pub(crate) use load::load;
#[cfg(test)]
pub(crate) use load::load_str;
