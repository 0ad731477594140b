//! Claimed row → stream entry: the key from the stream template, then the fields.
//!
//! Built-in layout: `event_id`, then each of `event_type`, `aggregate_type`, `aggregate_id`,
//! `payload`, `headers` the claim returns (skipped when NULL), then `owner`, then the configured
//! `fields` in their order. With `[relay.envelope]` the entry is exactly its fields, in order.

use bytes::Bytes;

use crate::config::RelayConfig;
use crate::config::statements::ENTRY_COLUMNS;
use crate::config::template::{BoundTemplate, Template};
use crate::store::ClaimedRow;
use crate::stream::Entry;

#[derive(Debug, Clone)]
pub struct EntryBuilder {
    stream: BoundTemplate,
    layout: Layout,
    /// The claim's `headers` column, where a producer's trace context is.
    headers: Option<usize>,
}

#[derive(Debug, Clone)]
enum Layout {
    BuiltIn { columns: Vec<(Bytes, usize)>, owner: Bytes, extras: Vec<(Bytes, BoundTemplate)> },
    Envelope(Vec<(Bytes, EnvelopeField)>),
}

#[derive(Debug, Clone)]
enum EnvelopeField {
    /// One column, copied as it is; the field is left out when the column is NULL.
    Column(usize),
    Template(BoundTemplate),
}

impl EntryBuilder {
    /// Binds the relay's templates to the claim statement's `columns`; names what is missing.
    pub fn new(relay: &RelayConfig, columns: &[String]) -> Result<Self, String> {
        let bind = |key: &str, text: &str| {
            Template::parse(text)
                .and_then(|t| t.bind(columns))
                .map_err(|e| format!("relay `{}` {key}: {e}", relay.name))
        };
        let stream = bind("stream", &relay.stream)?;
        if !relay.envelope.is_empty() {
            let fields = relay
                .envelope
                .iter()
                .map(|(name, text)| {
                    let sole = Template::parse(text).ok().and_then(|t| t.sole_column().map(str::to_owned));
                    let field = match sole.and_then(|c| columns.iter().position(|x| *x == c)) {
                        Some(index) => EnvelopeField::Column(index),
                        None => EnvelopeField::Template(bind(&format!("envelope.{name}"), text)?),
                    };
                    Ok((Bytes::from(name.clone()), field))
                })
                .collect::<Result<_, String>>()?;
            return Ok(Self { stream, layout: Layout::Envelope(fields), headers: headers_column(columns) });
        }
        let extras = relay
            .fields
            .iter()
            .map(|(name, text)| Ok((Bytes::from(name.clone()), bind(&format!("fields.{name}"), text)?)))
            .collect::<Result<_, String>>()?;
        let entry_columns = ENTRY_COLUMNS
            .iter()
            .filter_map(|name| columns.iter().position(|c| c == name).map(|i| (Bytes::from_static(name.as_bytes()), i)))
            .collect();
        let headers = headers_column(columns);
        let owner = Bytes::from(relay.owner().to_owned());
        Ok(Self { stream, layout: Layout::BuiltIn { columns: entry_columns, owner, extras }, headers })
    }

    /// The entry for `row`, or why the row cannot become one (deterministic: retrying won't help).
    pub fn build(&self, row: &ClaimedRow) -> Result<Entry, String> {
        let stream = self.stream.render(&row.values).map_err(|e| format!("stream key: {e}"))?;
        let render = |name: &Bytes, template: &BoundTemplate| {
            template.render(&row.values).map_err(|e| format!("field {}: {e}", String::from_utf8_lossy(name)))
        };
        let fields = match &self.layout {
            Layout::BuiltIn { columns, owner, extras } => {
                let mut fields = Vec::with_capacity(2 + columns.len() + extras.len());
                fields.push((Bytes::from_static(b"event_id"), Bytes::copy_from_slice(row.event_id.as_bytes())));
                for (name, index) in columns {
                    if let Some(Some(value)) = row.values.get(*index) {
                        fields.push((name.clone(), Bytes::copy_from_slice(value.as_bytes())));
                    }
                }
                fields.push((Bytes::from_static(b"owner"), owner.clone()));
                for (name, template) in extras {
                    fields.push((name.clone(), Bytes::from(render(name, template)?)));
                }
                fields
            }
            Layout::Envelope(layout) => {
                let mut fields = Vec::with_capacity(layout.len());
                for (name, field) in layout {
                    match field {
                        EnvelopeField::Column(index) => {
                            if let Some(Some(value)) = row.values.get(*index) {
                                fields.push((name.clone(), Bytes::copy_from_slice(value.as_bytes())));
                            }
                        }
                        EnvelopeField::Template(template) => {
                            fields.push((name.clone(), Bytes::from(render(name, template)?)))
                        }
                    }
                }
                fields
            }
        };
        let trace = match self.headers {
            Some(index) if crate::telemetry::traces::enabled() => row.values.get(index).cloned().flatten(),
            _ => None,
        };
        Ok(Entry { stream, fields, event_id: row.event_id.clone(), run: None, trace })
    }
}

fn headers_column(columns: &[String]) -> Option<usize> {
    columns.iter().position(|c| c == "headers")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;
    use std::time::Duration;

    fn relay(extra: &str) -> RelayConfig {
        let toml = format!("[database]\nurl = \"postgres://x@localhost/db\"\n[[relay]]\nname = \"auth\"\n{extra}");
        load_str(&toml).unwrap().relays.remove(0)
    }

    fn row(values: &[Option<&str>]) -> ClaimedRow {
        ClaimedRow {
            id: "1".into(),
            token: 1,
            event_id: "e-1".into(),
            attempts: 0,
            expired_claims: 0,
            age: Duration::ZERO,
            reclaimed: false,
            order_key: None,
            values: values.iter().map(|v| v.map(str::to_owned)).collect(),
        }
    }

    #[test]
    fn fields_follow_the_documented_order_and_skip_nulls() {
        let columns: Vec<String> = ["id", "event_id", "aggregate_type", "payload", "headers", "tenant"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let builder = EntryBuilder::new(&relay("fields = { tenant = \"t-{tenant}\" }"), &columns).unwrap();
        let entry =
            builder.build(&row(&[Some("1"), Some("e-1"), Some("order"), Some("{}"), None, Some("acme")])).unwrap();
        assert_eq!(entry.stream, "audit:order");
        let names: Vec<&str> = entry.fields.iter().map(|(n, _)| std::str::from_utf8(n).unwrap()).collect();
        assert_eq!(names, ["event_id", "aggregate_type", "payload", "owner", "tenant"]);
        assert_eq!(entry.fields[3].1, "auth");
        assert_eq!(entry.fields[4].1, "t-acme");
    }

    #[test]
    fn an_envelope_is_the_whole_entry_in_its_order() {
        let columns: Vec<String> = ["id", "event_id", "event_type", "aggregate_id", "payload", "headers", "version"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let toml = "stream = \"orders\"\n[relay.envelope]\neventId = \"{event_id}\"\neventType = \"{event_type}\"\n\
                    aggregateId = \"{aggregate_id}\"\naggregateVersion = \"{version}\"\nschemaVersion = \"2\"\n\
                    payload = \"{payload}\"\nheaders = \"{headers}\"\n";
        let builder = EntryBuilder::new(&relay(toml), &columns).unwrap();
        let row = row(&[Some("1"), Some("e-1"), Some("OrderPlaced"), Some("o-9"), Some("{}"), None, Some("3")]);
        let entry = builder.build(&row).unwrap();
        let fields: Vec<(&str, &str)> = entry
            .fields
            .iter()
            .map(|(n, v)| (std::str::from_utf8(n).unwrap(), std::str::from_utf8(v).unwrap()))
            .collect();
        // headers is NULL: a one-column field is left out, as the built-in layout does.
        assert_eq!(
            fields,
            [
                ("eventId", "e-1"),
                ("eventType", "OrderPlaced"),
                ("aggregateId", "o-9"),
                ("aggregateVersion", "3"),
                ("schemaVersion", "2"),
                ("payload", "{}")
            ]
        );
    }

    #[test]
    fn a_null_routing_column_is_a_row_error() {
        let columns: Vec<String> = ["id", "aggregate_type"].iter().map(|s| s.to_string()).collect();
        let builder = EntryBuilder::new(&relay(""), &columns).unwrap();
        let err = builder.build(&row(&[Some("1"), None])).unwrap_err();
        assert!(err.contains("aggregate_type"), "{err}");
    }

    #[test]
    fn a_template_over_a_column_the_claim_lacks_is_a_config_error() {
        let err = EntryBuilder::new(&relay("stream = \"s:{missing}\""), &["id".to_string()]).unwrap_err();
        assert!(err.contains("relay `auth` stream") && err.contains("missing"), "{err}");
    }
}
