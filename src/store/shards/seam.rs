//! What is recorded of a family of sharded streams.

/// A family's recorded count, and who recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub shard_count: u32,
    pub recorded_by: String,
}
