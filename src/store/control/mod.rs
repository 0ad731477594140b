//! Paused components: one row per paused relay, bridge or worker in `handoff_pauses`, in the
//! database the component already uses. `handoff pause` upserts it, `handoff resume` deletes it,
//! and every running replica polls the active ones (`runtime::pause`).

pub(crate) mod dialect;
pub(crate) mod mysql;
pub(crate) mod postgres;
pub(crate) mod seam;

pub use dialect::{active, pause, resume};
pub use seam::{ComponentKind, Pause, PauseRequest, Target, configured};
