//! Templates over claimed columns, e.g. `audit:{aggregate_type}` for the stream key.
//!
//! `{column}` is replaced by the row's value; `{{` and `}}` are literal braces, which Redis
//! Cluster hash tags need (`audit:{{{tenant}}}` renders `audit:{acme}`).
//!
//! `{shard(column, N)}` is replaced by the shard of the row's value: CRC-32 (IEEE, as zlib's
//! `crc32`) of its UTF-8 bytes modulo N, written in decimal (`0` … `N-1`). The same value always
//! lands in the same shard, so events of one key keep their order within it; any language can
//! compute it (Python: `zlib.crc32(key.encode()) % 16`).
//!
//! `{json(column)}` is replaced by the row's value as a JSON string, quoted and escaped: how a
//! value goes into a field whose text is JSON (a CloudEvent in structured mode).
//!
//! `{percent(column)}` is replaced by the row's value percent-encoded as CloudEvents' NATS and
//! HTTP bindings want header values: space, `"`, `%` and every character outside printable
//! ASCII as `%XY` of its UTF-8 bytes (a CloudEvent in binary mode on NATS).

use std::fmt;

/// A parsed template, not yet tied to a statement's columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Column(String),
    Shard { column: String, count: u32 },
    Encoded { column: String, encoding: Encoding },
}

/// How `Part::Encoded` writes a value: the call that names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Json,
    Percent,
}

impl Encoding {
    const ALL: [Encoding; 2] = [Encoding::Json, Encoding::Percent];

    fn call(self) -> &'static str {
        match self {
            Encoding::Json => "json",
            Encoding::Percent => "percent",
        }
    }

    fn write(self, value: &str, out: &mut String) {
        match self {
            Encoding::Json => json_string(value, out),
            Encoding::Percent => crate::percent::encode_header_value(value, out),
        }
    }
}

/// Most shards a template may spread a key over (streams per family and per other column).
pub(crate) const MAX_SHARDS: u32 = 4096;

/// A template whose columns were found in the claim result; renders rows by index.
#[derive(Debug, Clone)]
pub(crate) struct BoundTemplate {
    parts: Vec<BoundPart>,
}

#[derive(Debug, Clone)]
enum BoundPart {
    Text(String),
    Column { index: usize, name: String },
    Shard { index: usize, name: String, count: u32 },
    Encoded { index: usize, name: String, encoding: Encoding },
}

/// A template that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TemplateError {
    #[error("unclosed `{{{0}` (write {{{{ for a literal brace)")]
    Unclosed(String),
    #[error("`{{{0}}}` is not a column reference (write {{{{ for a literal brace)")]
    NotAColumn(String),
    #[error("unmatched `}}` (write }}}} for a literal brace)")]
    Unmatched,
    #[error("column `{0}` is not returned by the claim statement")]
    NotReturned(String),
    #[error("`{{{0}}}`: write shard(column, N) with N between 1 and {MAX_SHARDS}")]
    BadShard(String),
    #[error("more than one shard(…) in one template")]
    TwoShards,
}

impl Template {
    pub(crate) fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, chars.peek()) {
                ('{', Some('{')) | ('}', Some('}')) => {
                    literal.push(c);
                    chars.next();
                }
                ('{', _) => {
                    let (name, closed) = read_until_close(&mut chars);
                    if !closed {
                        return Err(TemplateError::Unclosed(name));
                    }
                    let part = match shard_call(&name) {
                        Some(Ok((column, count))) => Part::Shard { column, count },
                        Some(Err(())) => return Err(TemplateError::BadShard(name)),
                        None => match encoded_call(&name) {
                            Some((column, encoding)) => Part::Encoded { column, encoding },
                            None if is_column_name(&name) => Part::Column(name),
                            None => return Err(TemplateError::NotAColumn(name)),
                        },
                    };
                    if matches!(part, Part::Shard { .. }) && parts.iter().any(|p| matches!(p, Part::Shard { .. })) {
                        return Err(TemplateError::TwoShards);
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(part);
                }
                ('}', _) => return Err(TemplateError::Unmatched),
                _ => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Self { parts })
    }

    /// The template's own text, its column references left out (what every rendering holds).
    pub(crate) fn literal_text(&self) -> String {
        self.parts.iter().filter_map(|p| if let Part::Text(t) = p { Some(t.as_str()) } else { None }).collect()
    }

    /// Whether the template reads `column`.
    pub(crate) fn mentions(&self, column: &str) -> bool {
        self.parts.iter().any(|part| match part {
            Part::Text(_) => false,
            Part::Column(name) | Part::Encoded { column: name, .. } | Part::Shard { column: name, .. } => {
                name == column
            }
        })
    }

    /// The column, when the template carries that one column whole, and whether
    /// percent-encoded (which a consumer decodes; CloudEvents' `ce-id` on NATS): such a field
    /// is left out when the column is NULL, as `"{column}"` is.
    pub(crate) fn carried_column(&self) -> Option<(&str, bool)> {
        match self.parts.as_slice() {
            [Part::Column(name)] => Some((name, false)),
            [Part::Encoded { column: name, encoding: Encoding::Percent }] => Some((name, true)),
            _ => None,
        }
    }

    /// The shard count, when the template spreads keys over shards.
    pub(crate) fn shard_count(&self) -> Option<u32> {
        self.parts.iter().find_map(|p| match p {
            Part::Shard { count, .. } => Some(*count),
            _ => None,
        })
    }

    /// The template with its shard count left out (`audit:{aggregate_type}:{shard(aggregate_id)}`):
    /// what names a family of sharded streams, whatever its count.
    pub(crate) fn family(&self) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(&text.replace('{', "{{").replace('}', "}}")),
                Part::Column(name) => out.push_str(&format!("{{{name}}}")),
                Part::Shard { column, .. } => out.push_str(&format!("{{shard({column})}}")),
                Part::Encoded { column, encoding } => out.push_str(&format!("{{{}({column})}}", encoding.call())),
            }
        }
        out
    }

    /// Resolves column names to positions in `columns`; names the first missing one.
    pub(crate) fn bind(&self, columns: &[String]) -> Result<BoundTemplate, TemplateError> {
        let parts = self
            .parts
            .iter()
            .map(|part| match part {
                Part::Text(text) => Ok(BoundPart::Text(text.clone())),
                Part::Column(name) => columns
                    .iter()
                    .position(|c| c == name)
                    .map(|index| BoundPart::Column { index, name: name.clone() })
                    .ok_or_else(|| TemplateError::NotReturned(name.clone())),
                Part::Shard { column, count } => columns
                    .iter()
                    .position(|c| c == column)
                    .map(|index| BoundPart::Shard { index, name: column.clone(), count: *count })
                    .ok_or_else(|| TemplateError::NotReturned(column.clone())),
                Part::Encoded { column, encoding } => columns
                    .iter()
                    .position(|c| c == column)
                    .map(|index| BoundPart::Encoded { index, name: column.clone(), encoding: *encoding })
                    .ok_or_else(|| TemplateError::NotReturned(column.clone())),
            })
            .collect::<Result<_, _>>()?;
        Ok(BoundTemplate { parts })
    }
}

/// A row value the template needs is NULL or empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MissingValue(pub String);

impl fmt::Display for MissingValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column `{}` is null or empty", self.0)
    }
}

impl BoundTemplate {
    pub(crate) fn render(&self, row: &[Option<String>]) -> Result<String, MissingValue> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                BoundPart::Text(text) => out.push_str(text),
                BoundPart::Column { index, name } => match row.get(*index).and_then(Option::as_deref) {
                    Some(value) if !value.is_empty() => out.push_str(value),
                    _ => return Err(MissingValue(name.clone())),
                },
                BoundPart::Shard { index, name, count } => match row.get(*index).and_then(Option::as_deref) {
                    Some(value) if !value.is_empty() => {
                        out.push_str(itoa::Buffer::new().format(shard_of(value, *count)));
                    }
                    _ => return Err(MissingValue(name.clone())),
                },
                BoundPart::Encoded { index, name, encoding } => match row.get(*index).and_then(Option::as_deref) {
                    Some(value) if !value.is_empty() => encoding.write(value, &mut out),
                    _ => return Err(MissingValue(name.clone())),
                },
            }
        }
        Ok(out)
    }
}

/// The shard of `key` among `count`: CRC-32 (IEEE) of its bytes, modulo `count`.
pub(crate) fn shard_of(key: &str, count: u32) -> u32 {
    crc32fast::hash(key.as_bytes()) % count.max(1)
}

/// `shard(column, N)` → `Some(Ok((column, N)))`; another call shape → `Some(Err)`; not a call → `None`.
fn shard_call(inside: &str) -> Option<Result<(String, u32), ()>> {
    let args = inside.trim().strip_prefix("shard(")?.strip_suffix(')');
    let parsed = args.and_then(|args| {
        let (column, count) = args.split_once(',')?;
        let (column, count) = (column.trim(), count.trim().parse::<u32>().ok()?);
        (is_column_name(column) && (1..=MAX_SHARDS).contains(&count)).then(|| (column.to_owned(), count))
    });
    Some(parsed.ok_or(()))
}

/// `json(column)` or `percent(column)` → the column and its encoding; anything else → `None`.
fn encoded_call(inside: &str) -> Option<(String, Encoding)> {
    let inside = inside.trim();
    Encoding::ALL.into_iter().find_map(|encoding| {
        let column = inside.strip_prefix(encoding.call())?.strip_prefix('(')?.strip_suffix(')')?.trim();
        is_column_name(column).then(|| (column.to_owned(), encoding))
    })
}

/// `value` as a JSON string literal: quoted, with `"`, `\\` and control characters escaped.
pub(crate) fn json_string(value: &str, out: &mut String) {
    use std::fmt::Write;
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn read_until_close(chars: &mut impl Iterator<Item = char>) -> (String, bool) {
    let mut name = String::new();
    for c in chars {
        if c == '}' {
            return (name, true);
        }
        name.push(c);
    }
    (name, false)
}

fn is_column_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn renders_columns_and_literal_braces() {
        let t = Template::parse("audit:{{{tenant}}}:{aggregate_type}").unwrap();
        let bound = t.bind(&cols(&["id", "aggregate_type", "tenant"])).unwrap();
        let row = vec![Some("1".into()), Some("order".into()), Some("acme".into())];
        assert_eq!(bound.render(&row).unwrap(), "audit:{acme}:order");
    }

    #[test]
    fn a_plain_name_is_a_constant() {
        let t = Template::parse("audit").unwrap();
        assert_eq!(t.bind(&[]).unwrap().render(&[]).unwrap(), "audit");
    }

    #[test]
    fn null_or_empty_column_is_reported_by_name() {
        let bound = Template::parse("s:{kind}").unwrap().bind(&cols(&["kind"])).unwrap();
        assert_eq!(bound.render(&[None]).unwrap_err(), MissingValue("kind".into()));
        assert_eq!(bound.render(&[Some(String::new())]).unwrap_err(), MissingValue("kind".into()));
    }

    #[test]
    fn shard_renders_crc32_modulo_count_and_names_its_family() {
        let t = Template::parse("audit:{aggregate_type}:{shard(aggregate_id, 16)}").unwrap();
        assert_eq!(t.shard_count(), Some(16));
        assert_eq!(t.family(), "audit:{aggregate_type}:{shard(aggregate_id)}");
        let bound = t.bind(&cols(&["aggregate_type", "aggregate_id"])).unwrap();
        // Python's `zlib.crc32(b"order-42") % 16` is 14: the documented function, by value.
        let expected = 14;
        let row = vec![Some("order".into()), Some("order-42".into())];
        assert_eq!(bound.render(&row).unwrap(), format!("audit:order:{expected}"));
        assert_eq!(shard_of("123456789", 1_000_000), 0xCBF4_3926 % 1_000_000, "the CRC-32 check value");
        assert_eq!(bound.render(&[Some("order".into()), None]).unwrap_err(), MissingValue("aggregate_id".into()));
        let tagged = Template::parse("audit:{{{shard(aggregate_id,4)}}}").unwrap();
        assert_eq!(tagged.family(), "audit:{{{shard(aggregate_id)}}}");
        assert_eq!(Template::parse("audit").unwrap().shard_count(), None);
    }

    #[test]
    fn json_renders_a_quoted_escaped_json_string() {
        let t = Template::parse("{{\"id\":{json(event_id)},\"data\":{payload}}}").unwrap();
        assert_eq!(t.family(), "{{\"id\":{json(event_id)},\"data\":{payload}}}");
        let bound = t.bind(&cols(&["event_id", "payload"])).unwrap();
        let hostile = "a\"b\\c\nd\u{1}é";
        let rendered = bound.render(&[Some(hostile.into()), Some("{\"n\":1}".into())]).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&rendered).unwrap();
        assert_eq!(parsed["id"], hostile, "any value comes back as it was");
        assert_eq!(parsed["data"]["n"], 1);
        assert_eq!(bound.render(&[None, Some("{}".into())]).unwrap_err(), MissingValue("event_id".into()));
        assert!(Template::parse("{json(a b)}").is_err());
        assert!(t.bind(&cols(&["payload"])).is_err(), "the column must be returned");
    }

    #[test]
    fn percent_encodes_what_a_cloudevents_header_value_may_not_hold() {
        let t = Template::parse("{percent(aggregate_id)}").unwrap();
        assert_eq!(t.family(), "{percent(aggregate_id)}");
        assert!(t.mentions("aggregate_id"));
        let bound = t.bind(&cols(&["aggregate_id"])).unwrap();
        // The binding's own example, then what else it names: `"`, `%`, a control character.
        let render = |v: &str| bound.render(&[Some(v.to_owned())]).unwrap();
        assert_eq!(render("Euro \u{20AC} \u{1F600}"), "Euro%20%E2%82%AC%20%F0%9F%98%80");
        assert_eq!(render("o-\"7\"%\t~!"), "o-%227%22%25%09~!");
        assert!(Template::parse("{percent(a b)}").is_err());
    }

    #[test]
    fn bad_shard_calls_are_errors() {
        for bad in ["s:{shard(id)}", "s:{shard(id, 0)}", "s:{shard(id, 5000)}", "s:{shard(a b, 2)}", "s:{shard(id, x)}"]
        {
            assert!(matches!(Template::parse(bad), Err(TemplateError::BadShard(_))), "{bad}");
        }
        assert_eq!(Template::parse("s:{shard(a, 2)}:{shard(b, 2)}"), Err(TemplateError::TwoShards));
    }

    #[test]
    fn unknown_column_and_bad_braces_are_errors() {
        let t = Template::parse("s:{nope}").unwrap();
        assert!(t.bind(&cols(&["id"])).unwrap_err().to_string().contains("`nope`"));
        assert!(Template::parse("s:{a b}").is_err());
        assert!(Template::parse("s:}").is_err());
        assert!(Template::parse("s:{open").is_err());
    }
}
