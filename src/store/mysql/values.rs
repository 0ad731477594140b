//! Values between configured SQL and MySQL: named parameters bound positionally (a name used
//! twice is bound twice), arrays as JSON arrays, result cells read as text.

use mysql_async::{Row, Value};

use crate::sql::params::NamedSql;

/// Text as text; arrays as JSON arrays, for `JSON_TABLE(:ids, '$[*]' …)`.
pub(crate) use crate::store::param::Param;

impl From<&Param> for Value {
    fn from(p: &Param) -> Value {
        match p {
            Param::Null => Value::NULL,
            Param::Text(s) | Param::Json(s) => Value::Bytes(s.clone().into_bytes()),
            Param::Int(i) => Value::Int(*i),
            Param::Texts(v) => Value::Bytes(serde_json::to_vec(v).unwrap_or_default()),
            Param::Ints(v) => Value::Bytes(serde_json::to_vec(v).unwrap_or_default()),
            Param::Column(v) => Value::Bytes(serde_json::to_vec(v).unwrap_or_default()),
            Param::JsonColumn(v) => Value::Bytes(format!("[{}]", v.join(",")).into_bytes()),
        }
    }
}

/// The positional values for `sql`, each name's value from `bind`.
pub(crate) fn bind(sql: &NamedSql, bind: impl Fn(&str) -> Param) -> Vec<Value> {
    sql.names.iter().map(|name| Value::from(&bind(name))).collect()
}

/// A result cell as text; NULL as `None`.
pub(crate) fn text(value: &Value) -> Option<String> {
    match value {
        Value::NULL => None,
        Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Int(i) => Some(i.to_string()),
        Value::UInt(u) => Some(u.to_string()),
        Value::Float(f) => Some(f.to_string()),
        Value::Double(d) => Some(d.to_string()),
        Value::Date(y, mo, d, h, mi, s, us) => {
            Some(format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.{:03}", us / 1000))
        }
        Value::Time(neg, d, h, mi, s, us) => {
            Some(format!("{}{}:{mi:02}:{s:02}.{:03}", if *neg { "-" } else { "" }, d * 24 + u32::from(*h), us / 1000))
        }
    }
}

/// Every cell of `row` as text, and which cells hold bytes that are not UTF-8 (read as `None`):
/// a claimed row's values travel as they are, never with replacement characters in them.
pub(crate) fn row_texts_strict(row: &Row) -> (Vec<Option<String>>, Vec<usize>) {
    let mut unreadable = Vec::new();
    let values = (0..row.len())
        .map(|i| match row.as_ref(i) {
            Some(Value::Bytes(b)) => match std::str::from_utf8(b) {
                Ok(text) => Some(text.to_owned()),
                Err(_) => {
                    unreadable.push(i);
                    None
                }
            },
            other => other.and_then(text),
        })
        .collect();
    (values, unreadable)
}

/// Every cell of `row` as text.
pub(crate) fn row_texts(row: &Row) -> Vec<Option<String>> {
    (0..row.len()).map(|i| row.as_ref(i).and_then(text)).collect()
}

/// The column names of `row`.
pub(crate) fn row_columns(row: &Row) -> Vec<String> {
    row.columns_ref().iter().map(|c| c.name_str().into_owned()).collect()
}
