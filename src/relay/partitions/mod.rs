//! A time-partitioned outbox (`handoff migrate --partitioned`, `[relay.partitions]`), the whole
//! feature: its section (`config.rs`), which partitions should exist (`plan.rs`), creating,
//! dropping and inspecting them on Postgres (`postgres.rs`, behind `outbox.rs`), and the relay's
//! housekeeping pass (`keeper.rs`).

pub(crate) mod config;
mod keeper;
pub(crate) mod outbox;
pub(crate) mod plan;
mod postgres;

pub(crate) use keeper::PartitionKeeper;
pub(crate) use outbox::{PartitionedOutbox, unfit};
