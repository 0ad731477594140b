//! Stream entries as the bridge sees them: raw bytes, possibly malformed, parsed out of the
//! replies of XREADGROUP / XCLAIM without trusting their shape.

use bytes::Bytes;
use fred::types::Value;

/// Bytes of a field name a poison record keeps.
const NAME_MAX: usize = 256;

/// Bytes of a value too large for a poison record that the record keeps, to recognise it by.
const PREFIX_BYTES: usize = 1024;

/// One entry; `fields` is `None` when the entry was deleted (trimmed) while pending. Names and
/// values share the bytes of the reply they were read from (no copy of a payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawEntry {
    pub id: String,
    pub fields: Option<Vec<(Bytes, Bytes)>>,
    /// Why the broker's client could not read the message, when it could not (its fields are
    /// then what could be made out of it): the entry goes to poison as such.
    pub unreadable: Option<String>,
}

impl RawEntry {
    pub(crate) fn new(id: String, fields: Option<Vec<(Bytes, Bytes)>>) -> Self {
        Self { id, fields, unreadable: None }
    }

    /// The first value of `name`, if present.
    pub(crate) fn field(&self, name: &str) -> Option<&Bytes> {
        self.fields.as_ref()?.iter().find(|(k, _)| k == name.as_bytes()).map(|(_, v)| v)
    }

    /// Bytes of every name and value: what reading the entry costs.
    pub(crate) fn size(&self) -> usize {
        self.fields.iter().flatten().map(|(k, v)| k.len() + v.len()).sum()
    }

    /// The fields as JSON for the poison record: UTF-8 values as strings, others as
    /// `{"base64": "…"}`; later duplicates of a name keep the first.
    ///
    /// What an entry carries does not set the size of its record (invariant 14): a value over
    /// `limit` bytes, or any value once the record holds `2 × limit`, is kept as
    /// `{"prefix": "<its first bytes>", "bytes": <its length>}` — enough to recognise it, not
    /// to append it again (`handoff poison retry` says so). Names are kept to 256 bytes, and
    /// once names and values hold `2 × limit` the fields left are only counted, under
    /// [`MORE_FIELDS`]: many small fields cannot grow the record either.
    pub(crate) fn fields_json(&self, limit: usize) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        // `kept`: bytes of values kept whole; `listed`: every byte the record holds so far.
        let (mut kept, mut listed) = (0usize, 0usize);
        let (mut left_out, mut left_out_bytes) = (0usize, 0usize);
        for (k, v) in self.fields.iter().flatten() {
            if listed > limit.saturating_mul(2) {
                (left_out, left_out_bytes) = (left_out + 1, left_out_bytes + k.len() + v.len());
                continue;
            }
            let k = &k[..k.len().min(NAME_MAX)];
            // jsonb holds neither invalid UTF-8 nor NUL; such names and values travel as base64.
            let key = match std::str::from_utf8(k) {
                Ok(text) if !text.contains('\0') => text.to_owned(),
                _ => format!("base64:{}", crate::base64::encode(k)),
            };
            if map.contains_key(&key) {
                continue;
            }
            listed += key.len();
            let value = if v.len() > limit || kept + v.len() > limit.saturating_mul(2) {
                let prefix = String::from_utf8_lossy(&v[..v.len().min(PREFIX_BYTES)]).replace('\0', "\\0");
                listed += prefix.len();
                serde_json::json!({ "prefix": prefix, "bytes": v.len() })
            } else {
                (kept, listed) = (kept + v.len(), listed + v.len());
                match std::str::from_utf8(v) {
                    Ok(text) if !text.contains('\0') => serde_json::Value::String(text.to_owned()),
                    _ => serde_json::json!({ "base64": crate::base64::encode(v) }),
                }
            };
            map.insert(key, value);
        }
        if left_out > 0 {
            map.insert(MORE_FIELDS.to_owned(), serde_json::json!({ "fields": left_out, "bytes": left_out_bytes }));
        }
        serde_json::Value::Object(map)
    }
}

/// The poison record's key for the fields past its bound: how many, and their bytes.
pub(crate) const MORE_FIELDS: &str = "(more fields)";

/// Entries of an XREADGROUP reply for a single stream (`[[key, [[id, [f, v, …]], …]]]`) or of
/// an XCLAIM reply (`[[id, [f, v, …]], …]`). Anything unexpected is skipped rather than fatal.
pub(crate) fn parse_read(reply: Value) -> Vec<RawEntry> {
    match reply {
        Value::Array(streams) => streams
            .into_iter()
            .flat_map(|stream| match stream {
                Value::Array(mut pair) if pair.len() == 2 => parse_entries(pair.pop().unwrap_or(Value::Null)),
                _ => Vec::new(),
            })
            .collect(),
        Value::Map(map) => map.inner().into_values().flat_map(parse_entries).collect(),
        _ => Vec::new(),
    }
}

/// `[[id, [f, v, …] | nil], …]`
pub(crate) fn parse_entries(entries: Value) -> Vec<RawEntry> {
    let Value::Array(entries) = entries else { return Vec::new() };
    entries
        .into_iter()
        .filter_map(|entry| {
            let Value::Array(mut parts) = entry else { return None };
            if parts.is_empty() {
                return None;
            }
            let body = if parts.len() > 1 { parts.remove(1) } else { Value::Null };
            let id = text(parts.remove(0))?;
            Some(RawEntry::new(id, parse_fields(body)))
        })
        .collect()
}

fn parse_fields(body: Value) -> Option<Vec<(Bytes, Bytes)>> {
    let Value::Array(flat) = body else { return None };
    let mut fields = Vec::with_capacity(flat.len() / 2);
    let mut items = flat.into_iter();
    while let (Some(k), Some(v)) = (items.next(), items.next()) {
        fields.push((bytes(k), bytes(v)));
    }
    Some(fields)
}

pub(crate) fn text(value: Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.to_string()),
        Value::Bytes(b) => String::from_utf8(b.to_vec()).ok(),
        Value::Integer(i) => Some(i.to_string()),
        _ => None,
    }
}

fn bytes(value: Value) -> Bytes {
    match value {
        Value::String(s) => s.into_inner(),
        Value::Bytes(b) => b,
        Value::Integer(i) => Bytes::from(i.to_string()),
        Value::Double(d) => Bytes::from(d.to_string()),
        Value::Boolean(b) => Bytes::from(b.to_string()),
        _ => Bytes::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Value {
        Value::String(text.into())
    }

    #[test]
    fn parses_a_single_stream_read_with_a_deleted_entry() {
        let reply = Value::Array(vec![Value::Array(vec![
            s("audit:user"),
            Value::Array(vec![
                Value::Array(vec![s("1-0"), Value::Array(vec![s("event_id"), s("e1")])]),
                Value::Array(vec![s("2-0"), Value::Null]),
            ]),
        ])]);
        let entries = parse_read(reply);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].field("event_id").map(|b| &b[..]), Some(&b"e1"[..]));
        assert_eq!(entries[1].fields, None);
    }

    #[test]
    fn unexpected_shapes_are_skipped() {
        assert!(parse_read(Value::Null).is_empty());
        assert!(parse_read(Value::Array(vec![s("nonsense")])).is_empty());
    }

    #[test]
    fn binary_values_are_kept_as_base64_in_poison_fields() {
        let entry = RawEntry::new(
            "1-0".into(),
            Some(vec![(Bytes::from_static(b"payload"), Bytes::from_static(&[0xff, 0xfe, 0x00]))]),
        );
        assert_eq!(entry.fields_json(1 << 20)["payload"]["base64"], "//4A");
    }

    #[test]
    fn many_small_fields_do_not_grow_the_poison_record_past_its_bound() {
        let limit = 1000;
        let fields = (0..100_000).map(|i| (Bytes::from(format!("f{i}")), Bytes::from_static(b"v"))).collect();
        let entry = RawEntry::new("1-0".into(), Some(fields));
        let json = entry.fields_json(limit);
        let record = json.to_string().len();
        assert!(record < 4 * limit + 2 * PREFIX_BYTES, "the record holds {record} bytes");
        let more = &json[MORE_FIELDS];
        let listed = json.as_object().unwrap().len() - 1;
        assert_eq!(more["fields"].as_u64().unwrap() as usize + listed, 100_000, "every field listed or counted");
        assert_eq!(json["f0"], "v", "the first fields are kept as they were");
    }

    #[test]
    fn many_values_kept_as_prefixes_do_not_grow_the_record_past_its_bound_either() {
        let limit = 100;
        let fields = (0..1000).map(|i| (Bytes::from(format!("f{i}")), Bytes::from(vec![b'x'; 5000]))).collect();
        let json = RawEntry::new("1-0".into(), Some(fields)).fields_json(limit);
        let record = json.to_string().len();
        assert!(record < 2 * limit + 2 * PREFIX_BYTES + 200, "the record holds {record} bytes");
        assert!(json[MORE_FIELDS]["fields"].as_u64().unwrap() > 990);
    }

    #[test]
    fn a_value_over_the_limit_and_values_past_twice_it_keep_only_a_prefix() {
        let field = |name: &'static [u8], byte: u8, n: usize| (Bytes::from_static(name), Bytes::from(vec![byte; n]));
        let fields = vec![field(b"big", b'x', 3000), field(b"a", b'a', 900)];
        let json = RawEntry::new("1-0".into(), Some(fields)).fields_json(1000);
        assert_eq!(json["big"]["bytes"], 3000, "over the limit: its length and a prefix");
        assert_eq!(json["big"]["prefix"].as_str().map(str::len), Some(PREFIX_BYTES));
        assert_eq!(json["a"].as_str().map(str::len), Some(900));
        let fields = vec![field(b"a", b'a', 900), field(b"c", b'c', 900), field(b"d", b'd', 900), field(b"e", b'e', 9)];
        let json = RawEntry::new("1-0".into(), Some(fields)).fields_json(1000);
        assert_eq!(json["c"].as_str().map(str::len), Some(900), "within twice the limit: whole");
        assert_eq!(json["d"]["bytes"], 900, "past twice the limit: a prefix");
        assert_eq!(json[MORE_FIELDS]["fields"], 1, "then only counted");
    }
}
