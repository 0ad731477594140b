//! A time-partitioned outbox (`handoff migrate --partitioned`, `[relay.partitions]`), the whole
//! feature: its section (`config.rs`), which partitions should exist (`plan.rs`), creating,
//! dropping and inspecting them on Postgres (`postgres.rs`, behind `outbox.rs`), and the relay's
//! housekeeping pass (`keeper.rs`).

pub(crate) mod config;
mod keeper;
mod outbox;
pub mod plan;
mod postgres;

pub(crate) use keeper::PartitionKeeper;
pub use outbox::{PartitionedOutbox, unfit};
pub use plan::Span;
pub use postgres::{Existing, Held, Outcome};
