//! The takeover's SQL contract: the statements `[bridge.sql]` may replace, the named
//! parameters each is offered, the columns the reference tables must have.

use crate::sql::params::{self, Placeholder};

/// `[bridge.sql]`: the takeover's statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TakeoverStatement {
    Insert,
    Existing,
    Poison,
}

impl TakeoverStatement {
    pub(crate) const ALL: [Self; 3] = [Self::Insert, Self::Existing, Self::Poison];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Insert => "insert",
            Self::Existing => "existing",
            Self::Poison => "poison",
        }
    }

    /// Parameters offered, one event (or poison record) at a time. `insert` is also offered
    /// `:fields.<name>`, an entry field beyond the mapped ones (NULL when the entry lacks it).
    pub(crate) fn params(self) -> &'static [&'static str] {
        match self {
            Self::Insert => INSERT_PARAMS,
            // The content and its hash too: an inbox without a hash column can compare the
            // payload it stored with this one and answer `:content_hash` when they match.
            Self::Existing => &["consumer", "event_id", "event_type", "payload", "content_hash"],
            Self::Poison => POISON_PARAMS,
        }
    }

    pub(crate) fn dotted(self) -> &'static [&'static str] {
        match self {
            Self::Insert => &["fields"],
            _ => &[],
        }
    }
}

/// Column the `existing` statement returns: the content hash of the event already taken over.
pub(crate) const EXISTING_COLUMNS: &[&str] = &["content_hash"];

/// What `insert` is offered for an event, in the order the reference insert writes the inbox's
/// columns: each parameter has a column of its name (see [`column_of`]).
const INSERT_PARAMS: &[&str] = &[
    "consumer",
    "event_id",
    "event_type",
    "owner",
    "aggregate_type",
    "aggregate_id",
    "payload",
    "headers",
    "fields",
    "content_hash",
    "stream",
    "entry_id",
    "status",
];

/// What `poison` is offered for a record, in the order of the poison table's columns.
const POISON_PARAMS: &[&str] = &["consumer", "stream", "entry_id", "event_id", "reason", "detail", "fields"];

/// The reference tables' column for a parameter: its own name, but for the entry id.
fn column_of(param: &'static str) -> &'static str {
    if param == "entry_id" { "stream_entry_id" } else { param }
}

/// Columns the default takeover writes in the inbox table, in order; `check` looks them up in
/// the catalog (MariaDB's PREPARE does not check an `INSERT … SELECT` column list).
pub(crate) fn inbox_columns() -> Vec<&'static str> {
    INSERT_PARAMS.iter().copied().map(column_of).collect()
}

/// Columns the default takeover writes in the poison table, in order.
pub(crate) fn poison_columns() -> Vec<&'static str> {
    POISON_PARAMS.iter().copied().map(column_of).collect()
}
/// The longest detail a poison record keeps (a database's error, say), in characters.
pub(crate) const DETAIL_MAX_CHARS: usize = 2000;

/// Columns of handoff's own table of redeliveries (`bridge.deliveries_table`).
pub(crate) const DELIVERIES_COLUMNS: &[&str] = &["consumer", "stream", "stream_entry_id", "deliveries", "last_at"];

/// [`check_offered`] for a takeover statement.
pub(crate) fn check_takeover(
    statement: TakeoverStatement,
    sql: &str,
    style: Placeholder,
) -> Result<(), params::ParamError> {
    params::check_offered(sql, style, statement.params(), statement.dotted())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_is_offered_extra_fields_by_name() {
        let sql = "insert into t (id, v) values (:event_id, :fields.aggregateVersion)";
        assert!(check_takeover(TakeoverStatement::Insert, sql, Placeholder::Numbered).is_ok());
        let err = check_takeover(TakeoverStatement::Poison, "select :fields.x", Placeholder::Numbered)
            .unwrap_err()
            .to_string();
        assert!(err.contains(":fields.x") && err.contains(":reason"), "{err}");
    }
}
