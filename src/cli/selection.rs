//! The row filters `inbox reprocess` and `replay` share.

use crate::store::selection::{Moment, Selection};

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SelectionArgs {
    /// From this time on: a duration ago ("2h") or an RFC 3339 time.
    #[arg(long, value_parser = Moment::parse)]
    since: Option<Moment>,
    /// Before this time: a duration ago ("30m") or an RFC 3339 time.
    #[arg(long, value_parser = Moment::parse)]
    until: Option<Moment>,
    /// An event type, or a prefix ending in `*` ("user.*").
    #[arg(long)]
    event_type: Option<String>,
    /// One aggregate type.
    #[arg(long)]
    aggregate_type: Option<String>,
    /// One aggregate.
    #[arg(long)]
    aggregate_id: Option<String>,
    /// One event.
    #[arg(long)]
    event_id: Option<String>,
    /// Row ids from (inclusive).
    #[arg(long)]
    from_id: Option<i64>,
    /// Row ids to (inclusive).
    #[arg(long)]
    to_id: Option<i64>,
}

impl From<SelectionArgs> for Selection {
    fn from(a: SelectionArgs) -> Self {
        Selection {
            since: a.since,
            until: a.until,
            event_type: a.event_type,
            aggregate_type: a.aggregate_type,
            aggregate_id: a.aggregate_id,
            event_id: a.event_id,
            from_id: a.from_id,
            to_id: a.to_id,
        }
    }
}
