//! What `handoff replay` reads and where it keeps its place: DELIVERED rows of a reference
//! outbox chosen by a selection, a page at a time in id order (plain reads: nothing the live
//! relay claims or settles is locked), and the job's checkpoint in `handoff_replays`.

pub(crate) mod dialect;
pub(crate) mod mysql;
pub(crate) mod postgres;
pub(crate) mod seam;

pub use dialect::{extent, finish, load, oldest, page, restart, save};
pub use seam::{COLUMNS, Checkpoint, Extent, Oldest, ReplayRow, Source};
