//! What a replay reads and keeps: its rows, their extent, the oldest row left, its checkpoint.

use serde::Serialize;

use crate::store::database::Dialect;
use crate::store::selection::{Bound, Selection, bind};

/// The columns a replayed row carries, in order: those the reference claim returns that an
/// entry is built from (the relay's templates may name them), `created_at` as RFC 3339 text.
pub(super) const COLUMNS: &[&str] =
    &["id", "event_id", "event_type", "aggregate_type", "aggregate_id", "payload", "headers", "created_at"];

/// Which rows: a relay's table, the selection, and the time column it applies to.
#[derive(Debug, Clone, Copy)]
pub(super) struct Source<'a> {
    pub table: &'a str,
    /// `created_at` or `delivered_at`.
    pub time_column: &'static str,
    pub selection: &'a Selection,
}

impl Source<'_> {
    /// `status = 'DELIVERED'`, the selection, and `after < id <= through`, its values appended.
    pub(super) fn matching(
        &self,
        dialect: Dialect,
        (after, through): (i64, Option<i64>),
        values: &mut Vec<Bound>,
    ) -> String {
        let mut sql = format!("status = 'DELIVERED'{}", self.selection.render(dialect, self.time_column, values));
        sql.push_str(&format!(" AND id > {}", bind(dialect, values, Bound::Int(after))));
        if let Some(through) = through {
            sql.push_str(&format!(" AND id <= {}", bind(dialect, values, Bound::Int(through))));
        }
        sql
    }
}

/// One DELIVERED row to append again.
#[derive(Debug, Clone)]
pub(super) struct ReplayRow {
    pub id: i64,
    pub event_id: String,
    /// Every column of [`COLUMNS`], as text.
    pub values: Vec<Option<String>>,
}

/// How many matching DELIVERED rows lie after an id, and the highest of them.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(super) struct Extent {
    pub matching: i64,
    pub through_id: i64,
}

/// The oldest row left in the table: what retention has not deleted.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Oldest {
    pub lowest_id: Option<i64>,
    /// Age, by the database's clock, of the oldest value of the time column.
    pub age_seconds: Option<f64>,
}

/// Where a job stands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Checkpoint {
    pub job: String,
    pub relay: String,
    /// The stream (or subject) every entry goes to, or empty: each row's own stream.
    pub target: String,
    /// The selection and time column, as JSON: a job resumes only with the same.
    pub selection: String,
    /// The highest row id the job covers (fixed when it starts).
    pub through_id: i64,
    /// Every matching row up to this id has been appended.
    pub after_id: i64,
    pub appended: i64,
    /// Matching rows when the job started.
    pub total: i64,
    pub finished: bool,
}

impl Checkpoint {
    /// Its columns as bound values, in the order `handoff_replays` inserts them: job, relay,
    /// target, selection, through_id, after_id, appended, total.
    pub(crate) fn values(&self) -> [Bound; 8] {
        [
            Bound::Text(self.job.clone()),
            Bound::Text(self.relay.clone()),
            Bound::Text(self.target.clone()),
            Bound::Text(self.selection.clone()),
            Bound::Int(self.through_id),
            Bound::Int(self.after_id),
            Bound::Int(self.appended),
            Bound::Int(self.total),
        ]
    }
}
