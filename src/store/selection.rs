//! Which rows an operator's bulk operation touches (`inbox reprocess`, `replay`): a time range,
//! an event type pattern, an aggregate, an event, an id range — rendered as SQL conditions with
//! bound values for either dialect, so both operations select alike.

use std::time::Duration;

use serde::Serialize;

use super::database::Dialect;

/// A point in time: so long before the database's `now`, or an absolute instant (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum Moment {
    Ago(#[serde(with = "humantime_serde")] Duration),
    UnixMillis(i64),
}

/// Why a text is not a [`Moment`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MomentError {
    #[error("`{0}` is before 1970")]
    BeforeEpoch(String),
    #[error("`{0}` is neither a duration (\"2h\") nor an RFC 3339 time (\"2026-12-03T10:00:00Z\")")]
    Unreadable(String),
}

impl Moment {
    /// The instant as Unix milliseconds, by this machine's clock for an `Ago` (a broker's
    /// message times are its clock's, not the database's).
    pub(crate) fn unix_millis(&self) -> i64 {
        match self {
            Moment::UnixMillis(ms) => *ms,
            Moment::Ago(ago) => {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                i64::try_from(now.saturating_sub(*ago).as_millis()).unwrap_or(i64::MAX)
            }
        }
    }

    /// `"2h"` (so long ago) or an RFC 3339 time (`2026-12-03T10:00:00Z`).
    pub(crate) fn parse(text: &str) -> Result<Self, MomentError> {
        if let Ok(ago) = humantime::parse_duration(text) {
            return Ok(Moment::Ago(ago));
        }
        let at = humantime::parse_rfc3339_weak(text).map_err(|_| MomentError::Unreadable(text.to_owned()))?;
        let ms = at.duration_since(std::time::UNIX_EPOCH).map_err(|_| MomentError::BeforeEpoch(text.to_owned()))?;
        Ok(Moment::UnixMillis(i64::try_from(ms.as_millis()).unwrap_or(i64::MAX)))
    }
}

/// The rows chosen; every filter given must hold.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Selection {
    /// On the operation's time column, inclusive.
    pub since: Option<Moment>,
    /// On the operation's time column, exclusive.
    pub until: Option<Moment>,
    /// An event type, or a prefix ending in `*` (`user.*`), as handlers match them.
    pub event_type: Option<String>,
    pub aggregate_type: Option<String>,
    pub aggregate_id: Option<String>,
    pub event_id: Option<String>,
    /// Row ids from (inclusive).
    pub from_id: Option<i64>,
    /// Row ids to (inclusive).
    pub to_id: Option<i64>,
}

/// A value bound to one of the conditions.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bound {
    Text(String),
    Int(i64),
}

impl Selection {
    /// The conditions, each starting with ` AND `, over `time_column`; values are appended to
    /// `values`, placeholders numbered after those already there (Postgres) or `?` (MySQL).
    pub(crate) fn render(&self, dialect: Dialect, time_column: &str, values: &mut Vec<Bound>) -> String {
        let mut sql = String::new();
        let bind = |values: &mut Vec<Bound>, value: Bound| bind(dialect, values, value);
        for (moment, op) in [(self.since, ">="), (self.until, "<")] {
            if let Some(moment) = moment {
                sql.push_str(&format!(" AND {time_column} {op} {}", instant(dialect, moment, values)));
            }
        }
        if let Some(pattern) = &self.event_type {
            match pattern.strip_suffix('*') {
                Some(prefix) => {
                    let condition = match dialect {
                        Dialect::Postgres => {
                            format!("starts_with(event_type, {})", bind(values, Bound::Text(prefix.to_owned())))
                        }
                        Dialect::Mysql => {
                            let length = bind(values, Bound::Text(prefix.to_owned()));
                            let prefix = bind(values, Bound::Text(prefix.to_owned()));
                            format!("LEFT(event_type, CHAR_LENGTH({length})) = {prefix}")
                        }
                    };
                    sql.push_str(&format!(" AND {condition}"));
                }
                None => sql.push_str(&format!(" AND event_type = {}", bind(values, Bound::Text(pattern.clone())))),
            }
        }
        for (column, value) in [
            ("aggregate_type", &self.aggregate_type),
            ("aggregate_id", &self.aggregate_id),
            ("event_id", &self.event_id),
        ] {
            if let Some(value) = value {
                sql.push_str(&format!(" AND {column} = {}", bind(values, Bound::Text(value.clone()))));
            }
        }
        if let Some(from) = self.from_id {
            sql.push_str(&format!(" AND id >= {}", bind(values, Bound::Int(from))));
        }
        if let Some(to) = self.to_id {
            sql.push_str(&format!(" AND id <= {}", bind(values, Bound::Int(to))));
        }
        sql
    }
}

/// Appends `value` and returns its placeholder (typed on Postgres).
pub(crate) fn bind(dialect: Dialect, values: &mut Vec<Bound>, value: Bound) -> String {
    let cast = match (&value, dialect) {
        (Bound::Text(_), Dialect::Postgres) => "::text",
        (Bound::Int(_), Dialect::Postgres) => "::bigint",
        (_, Dialect::Mysql) => "",
    };
    values.push(value);
    match dialect {
        Dialect::Postgres => format!("${}{cast}", values.len()),
        Dialect::Mysql => "?".to_owned(),
    }
}

/// `moment` as an SQL time by the database's clock, its value bound.
pub(crate) fn instant(dialect: Dialect, moment: Moment, values: &mut Vec<Bound>) -> String {
    match (moment, dialect) {
        (Moment::Ago(d), Dialect::Postgres) => {
            format!("now() - {} * interval '1 millisecond'", bind(dialect, values, Bound::Int(millis(d))))
        }
        (Moment::Ago(d), Dialect::Mysql) => {
            format!("NOW(3) - INTERVAL {} * 1000 MICROSECOND", bind(dialect, values, Bound::Int(millis(d))))
        }
        (Moment::UnixMillis(ms), Dialect::Postgres) => {
            format!("to_timestamp({} / 1000.0)", bind(dialect, values, Bound::Int(ms)))
        }
        // Counted from NOW(3): FROM_UNIXTIME stops at 2038 on MariaDB before 11.5, and DATETIME
        // columns hold the session's local time, as NOW(3) does.
        (Moment::UnixMillis(ms), Dialect::Mysql) => format!(
            "NOW(3) + INTERVAL ({} - UNIX_TIMESTAMP(NOW(3)) * 1000) * 1000 MICROSECOND",
            bind(dialect, values, Bound::Int(ms))
        ),
    }
}

/// The values as Postgres parameters.
pub(crate) fn postgres_params(values: &[Bound]) -> Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>> {
    values
        .iter()
        .map(|v| -> Box<dyn tokio_postgres::types::ToSql + Sync + Send> {
            match v {
                Bound::Text(t) => Box::new(t.clone()),
                Bound::Int(i) => Box::new(*i),
            }
        })
        .collect()
}

/// The values as MySQL parameters.
pub(crate) fn mysql_params(values: &[Bound]) -> Vec<mysql_async::Value> {
    values
        .iter()
        .map(|v| match v {
            Bound::Text(t) => t.clone().into(),
            Bound::Int(i) => (*i).into(),
        })
        .collect()
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_filter_is_a_bound_value_never_text_in_the_statement() {
        let selection = Selection {
            since: Some(Moment::Ago(Duration::from_secs(3600))),
            until: Some(Moment::UnixMillis(1_700_000_000_000)),
            event_type: Some("user.*".into()),
            aggregate_id: Some("a'; DROP TABLE x; --".into()),
            from_id: Some(10),
            ..Selection::default()
        };
        let mut values = vec![Bound::Text("consumer".into())];
        let sql = selection.render(Dialect::Postgres, "processed_at", &mut values);
        assert_eq!(
            sql,
            " AND processed_at >= now() - $2::bigint * interval '1 millisecond' AND processed_at < to_timestamp($3::bigint / 1000.0) \
             AND starts_with(event_type, $4::text) AND aggregate_id = $5::text AND id >= $6::bigint"
        );
        assert_eq!(values[3], Bound::Text("user.".into()));
        let mut values = Vec::new();
        let sql = selection.render(Dialect::Mysql, "received_at", &mut values);
        assert!(sql.starts_with(" AND received_at >= NOW(3) - INTERVAL ? * 1000 MICROSECOND"), "{sql}");
        assert!(!sql.contains("DROP"), "{sql}");
        assert_eq!(values.len(), 6);
    }

    #[test]
    fn a_moment_is_a_duration_ago_or_an_rfc3339_time() {
        assert_eq!(Moment::parse("2h"), Ok(Moment::Ago(Duration::from_secs(7200))));
        assert_eq!(Moment::parse("2023-11-14T22:13:20Z"), Ok(Moment::UnixMillis(1_700_000_000_000)));
        assert!(Moment::parse("yesterday").unwrap_err().to_string().contains("RFC 3339"));
    }
}
