//! Claimed row → stream entry: the key from the stream template, then the fields.
//!
//! Built-in layout: `event_id`, then each of `event_type`, `aggregate_type`, `aggregate_id`,
//! `payload`, `headers` the claim returns (skipped when NULL), then `owner`, then the configured
//! `fields` in their order. With `[relay.envelope]` the entry is exactly its fields, in order.

use bytes::Bytes;

use crate::broker::Entry;
use crate::reasons::DeadReason;
use crate::relay::cloudevents::{self, Mode, Presence, StructuredBody};
use crate::relay::config::RelayConfig;
use crate::relay::outbox::ClaimedRow;
use crate::relay::outbox::contract::ENTRY_COLUMNS;
use crate::template::{BoundTemplate, Template};

#[derive(Debug, Clone)]
pub(crate) struct EntryBuilder {
    stream: BoundTemplate,
    layout: Layout,
    /// The claim's `headers` column, where a producer's trace context is.
    headers: Option<usize>,
    /// The claim's `payload` column and the most bytes it may hold (`relay.payload_max_bytes`).
    payload: Option<(usize, usize)>,
    /// The most bytes of field names and values one entry may carry (`relay.entry_max_bytes`).
    entry_max_bytes: usize,
}

/// Why a row cannot become an entry (deterministic: retrying won't help; the row goes DEAD).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// A template cannot be rendered (a column it names is NULL, …).
    #[error("{0}")]
    Invalid(String),
    /// Larger than the relay appends: never sent, so it cannot fill the broker's memory or
    /// stop a bridge.
    #[error("{what} is {bytes} bytes, over relay.{limit_key} ({limit})")]
    TooLarge { what: &'static str, bytes: usize, limit: usize, limit_key: &'static str },
}

impl Refusal {
    /// The DEAD reason it is counted under.
    pub(crate) fn reason(&self) -> DeadReason {
        match self {
            Refusal::Invalid(_) => DeadReason::InvalidRow,
            Refusal::TooLarge { .. } => DeadReason::TooLarge,
        }
    }
}

#[derive(Debug, Clone)]
enum Layout {
    BuiltIn {
        columns: Vec<(Bytes, usize)>,
        owner: Bytes,
        extras: Vec<(Bytes, BoundTemplate)>,
    },
    /// Each field with its rule for a NULL or empty value (CloudEvents' attributes have one).
    Envelope(Vec<(Bytes, EnvelopeField, Presence)>),
}

/// A relay template that does not fit its claim statement, naming the relay and the key.
#[derive(Debug, Clone, thiserror::Error)]
#[error("relay `{relay}` {key}: {error}")]
pub(crate) struct TemplateKeyError {
    pub relay: String,
    pub key: String,
    pub error: crate::template::TemplateError,
}

#[derive(Debug, Clone)]
enum EnvelopeField {
    /// One column, copied as it is; the field is left out when the column is NULL.
    Column(usize),
    /// One column, percent-encoded (`"{percent(column)}"`); left out when NULL, as `Column`.
    PercentColumn(usize),
    Template(BoundTemplate),
    /// A CloudEvent in structured mode: the whole body.
    StructuredEvent(StructuredBody),
}

impl EntryBuilder {
    /// Binds the relay's templates to the claim statement's `columns`; names what is missing.
    pub(crate) fn new(relay: &RelayConfig, columns: &[String]) -> Result<Self, TemplateKeyError> {
        let bind = |key: &str, text: &str| {
            Template::parse(text).and_then(|t| t.bind(columns)).map_err(|error| TemplateKeyError {
                relay: relay.name.clone(),
                key: key.to_owned(),
                error,
            })
        };
        let stream = bind("stream", &relay.stream)?;
        if !relay.envelope.is_empty() {
            let events = relay.cloudevents.as_ref();
            let fields = relay
                .envelope
                .iter()
                .map(|(name, text)| {
                    let presence = events.map_or(Presence::AsIs, |_| cloudevents::presence(name));
                    if let Some(events) = events.filter(|e| e.mode == Mode::Structured && name == "payload") {
                        let body = StructuredBody::bind(events, columns).map_err(|error| TemplateKeyError {
                            relay: relay.name.clone(),
                            key: format!("envelope.{name}"),
                            error,
                        })?;
                        return Ok((Bytes::from(name.clone()), EnvelopeField::StructuredEvent(body), presence));
                    }
                    let parsed = Template::parse(text).ok();
                    let carried = parsed.as_ref().and_then(Template::carried_column);
                    let field =
                        match carried.and_then(|(c, percent)| Some((columns.iter().position(|x| x == c)?, percent))) {
                            Some((index, false)) => EnvelopeField::Column(index),
                            Some((index, true)) => EnvelopeField::PercentColumn(index),
                            None => EnvelopeField::Template(bind(&format!("envelope.{name}"), text)?),
                        };
                    Ok((Bytes::from(name.clone()), field, presence))
                })
                .collect::<Result<_, TemplateKeyError>>()?;
            let (headers, payload) = (headers_column(columns), payload_column(relay, columns));
            let entry_max_bytes = relay.entry_max_bytes;
            return Ok(Self { stream, layout: Layout::Envelope(fields), headers, payload, entry_max_bytes });
        }
        let extras = relay
            .fields
            .iter()
            .map(|(name, text)| Ok((Bytes::from(name.clone()), bind(&format!("fields.{name}"), text)?)))
            .collect::<Result<_, TemplateKeyError>>()?;
        let entry_columns = ENTRY_COLUMNS
            .iter()
            .filter_map(|name| columns.iter().position(|c| c == name).map(|i| (Bytes::from_static(name.as_bytes()), i)))
            .collect();
        let headers = headers_column(columns);
        let owner = Bytes::from(relay.owner().to_owned());
        let layout = Layout::BuiltIn { columns: entry_columns, owner, extras };
        let (payload, entry_max_bytes) = (payload_column(relay, columns), relay.entry_max_bytes);
        Ok(Self { stream, layout, headers, payload, entry_max_bytes })
    }

    /// The entry for `row`, or why the row cannot become one (deterministic: retrying won't help).
    /// The row's column values move into the entry (no copy of the payloads): templates render
    /// first, and `row.values` is empty afterwards.
    pub(crate) fn build(&self, row: &mut ClaimedRow) -> Result<Entry, Refusal> {
        if let Some((index, limit)) = self.payload {
            let bytes = row.values.get(index).and_then(Option::as_ref).map_or(0, String::len);
            if bytes > limit {
                return Err(Refusal::TooLarge { what: "the payload", bytes, limit, limit_key: "payload_max_bytes" });
            }
        }
        let stream = self.stream.render(&row.values).map_err(|e| Refusal::Invalid(format!("stream key: {e}")))?;
        let render = |name: &Bytes, template: &BoundTemplate| {
            template
                .render(&row.values)
                .map_err(|e| Refusal::Invalid(format!("field {}: {e}", String::from_utf8_lossy(name))))
        };
        let trace = match self.headers {
            Some(index) if crate::telemetry::traces::enabled() => row.values.get(index).cloned().flatten(),
            _ => None,
        };
        let fields = match &self.layout {
            Layout::BuiltIn { columns, owner, extras } => {
                let extras = extras
                    .iter()
                    .map(|(name, template)| Ok((name.clone(), Bytes::from(render(name, template)?))))
                    .collect::<Result<Vec<_>, Refusal>>()?;
                let mut fields = Vec::with_capacity(2 + columns.len() + extras.len());
                fields.push((Bytes::from_static(b"event_id"), Bytes::copy_from_slice(row.event_id.as_bytes())));
                // Each entry column appears once in the built-in layout: its value can move.
                for (name, index) in columns {
                    if let Some(value) = row.values.get_mut(*index).and_then(Option::take) {
                        fields.push((name.clone(), Bytes::from(value)));
                    }
                }
                fields.push((Bytes::from_static(b"owner"), owner.clone()));
                fields.extend(extras);
                fields
            }
            Layout::Envelope(layout) => {
                let invalid = |name: &Bytes, e: &dyn std::fmt::Display| {
                    Refusal::Invalid(format!("field {}: {e}", String::from_utf8_lossy(name)))
                };
                let mut rendered = Vec::with_capacity(layout.len());
                for (name, field, presence) in layout {
                    rendered.push(match field {
                        EnvelopeField::Column(_) => None,
                        EnvelopeField::PercentColumn(index) => {
                            row.values.get(*index).and_then(Option::as_deref).map(|v| {
                                let mut encoded = String::with_capacity(v.len());
                                crate::percent::encode_header_value(v, &mut encoded);
                                Bytes::from(encoded)
                            })
                        }
                        EnvelopeField::Template(template) => match template.render(&row.values) {
                            Ok(value) => Some(Bytes::from(value)),
                            Err(_) if *presence == Presence::Optional => None,
                            Err(e) => return Err(invalid(name, &e)),
                        },
                        EnvelopeField::StructuredEvent(body) => {
                            Some(Bytes::from(body.render(&row.values).map_err(|e| invalid(name, &e))?))
                        }
                    });
                }
                // An envelope may name a column twice: values become shared bytes, each used
                // by reference.
                let cells: Vec<Option<Bytes>> =
                    std::mem::take(&mut row.values).into_iter().map(|v| v.map(Bytes::from)).collect();
                let mut fields = Vec::with_capacity(layout.len());
                for ((name, field, presence), rendered) in layout.iter().zip(rendered) {
                    let value = match field {
                        EnvelopeField::Column(index) => cells.get(*index).cloned().flatten(),
                        _ => rendered,
                    };
                    // Without a rule a value is kept, empty or not; with one, empty is absent.
                    match (value, presence) {
                        (Some(value), Presence::AsIs) => fields.push((name.clone(), value)),
                        (Some(value), _) if !value.is_empty() => fields.push((name.clone(), value)),
                        (_, Presence::Required { attribute, column }) => {
                            return Err(Refusal::Invalid(cloudevents::missing(attribute, column)));
                        }
                        _ => {}
                    }
                }
                fields
            }
        };
        row.values = Vec::new();
        let bytes: usize = stream.len() + fields.iter().map(|(name, value)| name.len() + value.len()).sum::<usize>();
        if bytes > self.entry_max_bytes {
            let limit = self.entry_max_bytes;
            return Err(Refusal::TooLarge { what: "the entry", bytes, limit, limit_key: "entry_max_bytes" });
        }
        Ok(Entry { stream, fields, event_id: row.event_id.clone(), run: None, trace })
    }
}

/// The claim's `payload` column with its limit, if the claim returns one.
fn payload_column(relay: &RelayConfig, columns: &[String]) -> Option<(usize, usize)> {
    columns.iter().position(|c| c == "payload").map(|i| (i, relay.payload_max_bytes))
}

fn headers_column(columns: &[String]) -> Option<usize> {
    columns.iter().position(|c| c == "headers")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    fn relay(extra: &str) -> RelayConfig {
        let toml = format!("[database]\nurl = \"postgres://x@localhost/db\"\n[[relay]]\nname = \"auth\"\n{extra}");
        load_str(&toml).unwrap().relays.remove(0)
    }

    fn names(columns: &[&str]) -> Vec<String> {
        columns.iter().map(|s| s.to_string()).collect()
    }

    /// An entry's fields as text, names with values.
    fn pairs(entry: &Entry) -> Vec<(&str, &str)> {
        entry.fields.iter().map(|(n, v)| (std::str::from_utf8(n).unwrap(), std::str::from_utf8(v).unwrap())).collect()
    }

    fn row(values: &[Option<&str>]) -> ClaimedRow {
        ClaimedRow::first_claim("1".into(), 1, "e-1".into(), values.iter().map(|v| v.map(str::to_owned)).collect())
    }

    #[test]
    fn fields_follow_the_documented_order_and_skip_nulls() {
        let columns = names(&["id", "event_id", "aggregate_type", "payload", "headers", "tenant"]);
        let builder = EntryBuilder::new(&relay("fields = { tenant = \"t-{tenant}\" }"), &columns).unwrap();
        let entry =
            builder.build(&mut row(&[Some("1"), Some("e-1"), Some("order"), Some("{}"), None, Some("acme")])).unwrap();
        assert_eq!(entry.stream, "audit:order");
        let names: Vec<&str> = entry.fields.iter().map(|(n, _)| std::str::from_utf8(n).unwrap()).collect();
        assert_eq!(names, ["event_id", "aggregate_type", "payload", "owner", "tenant"]);
        assert_eq!(entry.fields[3].1, "auth");
        assert_eq!(entry.fields[4].1, "t-acme");
    }

    #[test]
    fn an_envelope_is_the_whole_entry_in_its_order() {
        let columns = names(&["id", "event_id", "event_type", "aggregate_id", "payload", "headers", "version"]);
        let toml = "stream = \"orders\"\n[relay.envelope]\neventId = \"{event_id}\"\neventType = \"{event_type}\"\n\
                    aggregateId = \"{aggregate_id}\"\naggregateVersion = \"{version}\"\nschemaVersion = \"2\"\n\
                    payload = \"{payload}\"\nheaders = \"{headers}\"\n";
        let builder = EntryBuilder::new(&relay(toml), &columns).unwrap();
        let mut row = row(&[Some("1"), Some("e-1"), Some("OrderPlaced"), Some("o-9"), Some("{}"), None, Some("3")]);
        let entry = builder.build(&mut row).unwrap();
        let fields = pairs(&entry);
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
    fn a_column_named_twice_fills_both_fields_and_templates_see_moved_columns() {
        // The values move into the entry: a second use of a column, and a template over a column
        // that is also a field of its own, must still see it.
        let columns = names(&["id", "event_id", "aggregate_type", "payload"]);
        let envelope = "stream = \"s\"\n[relay.envelope]\nid = \"{event_id}\"\nbody = \"{payload}\"\n\
                        copy = \"{payload}\"\nkind = \"k-{aggregate_type}\"\n";
        let builder = EntryBuilder::new(&relay(envelope), &columns).unwrap();
        let mut claimed = row(&[Some("1"), Some("e-1"), Some("order"), Some("{\"a\":1}")]);
        let entry = builder.build(&mut claimed).unwrap();
        assert_eq!(pairs(&entry), [("id", "e-1"), ("body", "{\"a\":1}"), ("copy", "{\"a\":1}"), ("kind", "k-order")]);

        let builtin = EntryBuilder::new(&relay("fields = { kind = \"k-{aggregate_type}\" }"), &columns).unwrap();
        let mut claimed = row(&[Some("1"), Some("e-1"), Some("order"), Some("{}")]);
        let entry = builtin.build(&mut claimed).unwrap();
        let fields = pairs(&entry);
        assert_eq!(
            fields,
            [
                ("event_id", "e-1"),
                ("aggregate_type", "order"),
                ("payload", "{}"),
                ("owner", "auth"),
                ("kind", "k-order")
            ]
        );
    }

    #[test]
    fn a_percent_encoded_column_is_left_out_when_null_like_a_copied_one() {
        let columns = names(&["id", "event_id", "aggregate_id"]);
        let toml = "stream = \"s\"\n[relay.envelope]\nid = \"{event_id}\"\nsubject = \"{percent(aggregate_id)}\"\n";
        let builder = EntryBuilder::new(&relay(toml), &columns).unwrap();
        let entry = builder.build(&mut row(&[Some("1"), Some("e-1"), None])).unwrap();
        assert_eq!(pairs(&entry), [("id", "e-1")]);
        let entry = builder.build(&mut row(&[Some("1"), Some("e-1"), Some("a b")])).unwrap();
        assert_eq!(pairs(&entry), [("id", "e-1"), ("subject", "a%20b")]);
        let entry = builder.build(&mut row(&[Some("1"), Some("e-1"), Some("")])).unwrap();
        assert_eq!(pairs(&entry), [("id", "e-1"), ("subject", "")], "empty: kept, as a copied column keeps it");
    }

    #[test]
    fn cloudevents_leave_out_an_empty_optional_attribute_and_refuse_an_empty_id_or_type() {
        let columns = names(&["id", "event_id", "event_type", "aggregate_id", "payload", "created_at"]);
        let preset = |mode: &str| format!("stream = \"s\"\n[relay.cloudevents]\nsource = \"/s\"\nmode = \"{mode}\"\n");
        let binary = EntryBuilder::new(&relay(&preset("binary")), &columns).unwrap();
        let entry = binary.build(&mut row(&[Some("1"), Some("e-1"), Some("t"), Some(""), Some("{}"), None])).unwrap();
        let names: Vec<&str> = pairs(&entry).into_iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["ce_specversion", "ce_id", "ce_source", "ce_type", "content-type", "payload"]);

        let structured = EntryBuilder::new(&relay(&preset("structured")), &columns).unwrap();
        let entry =
            structured.build(&mut row(&[Some("1"), Some("e-1"), Some("t"), None, Some("{}"), Some("")])).unwrap();
        let event: serde_json::Value = serde_json::from_str(pairs(&entry)[2].1).unwrap();
        assert!(event.get("subject").is_none() && event.get("time").is_none(), "{event}");

        for builder in [&binary, &structured] {
            let no_type = [Some("1"), Some("e-1"), Some(""), Some("o"), Some("{}"), Some("2026-12-07T00:00:00Z")];
            let err = builder.build(&mut row(&no_type)).unwrap_err();
            assert_eq!(err.reason(), DeadReason::InvalidRow);
            assert!(err.to_string().contains("CloudEvents `type` is required"), "{err}");
        }
    }

    #[test]
    fn a_null_routing_column_is_a_row_error() {
        let columns = names(&["id", "aggregate_type"]);
        let builder = EntryBuilder::new(&relay(""), &columns).unwrap();
        let err = builder.build(&mut row(&[Some("1"), None])).unwrap_err();
        assert_eq!(err.reason(), DeadReason::InvalidRow);
        assert!(err.to_string().contains("aggregate_type"), "{err}");
    }

    #[test]
    fn a_template_over_a_column_the_claim_lacks_is_a_config_error() {
        let err = EntryBuilder::new(&relay("stream = \"s:{missing}\""), &["id".to_string()]).unwrap_err().to_string();
        assert!(err.contains("relay `auth` stream") && err.contains("missing"), "{err}");
    }
}
