//! A value bound to a named parameter of a configured statement, before a dialect converts it
//! to its wire type (Postgres: the placeholder's inferred type; MySQL: text and JSON arrays).

use std::time::Duration;

/// A parameter value, converted by the dialect when bound.
#[derive(Debug, Clone)]
pub(crate) enum Param {
    Null,
    /// JSON text: bound as json / jsonb where the database expects it, or as text.
    Json(String),
    Text(String),
    Int(i64),
    Texts(Vec<String>),
    Ints(Vec<i64>),
    /// An array of texts that may hold NULLs (a batch handler's `:owners`, say).
    Column(Vec<Option<String>>),
    /// An array of JSON texts: bound as json[] / jsonb[] where the database expects it.
    JsonColumn(Vec<String>),
}

pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
