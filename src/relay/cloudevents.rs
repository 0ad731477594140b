//! `[relay.cloudevents]`: entries laid out as CloudEvents 1.0, for consumers that already read
//! them. A preset over `[relay.envelope]`: loading expands it into the envelope it stands for
//! (`RelayConfig::expand_cloudevents`).
//!
//! - **Binary mode** (the default): each attribute its own header (field), named as the
//!   protocol bindings name them — `ce_id` on Kafka (and on Redis, which has no binding), `ce-id`
//!   on NATS — and the payload the message body, with `content-type: application/json` (on
//!   NATS, `ce-datacontenttype`, and each value percent-encoded, as its binding says).
//! - **Structured mode**: the body is the whole event as one JSON object, with
//!   `content-type: application/cloudevents+json`; an `event_id` header beside it.
//!
//! `id` is the event id, `type` the event type, `subject` the aggregate id, `time` the row's
//! `created_at` (the claim returns it as RFC 3339 text for such a relay), `source` configured.
//!
//! CloudEvents requires a non-empty `id` and `type`: a row whose column is NULL or empty is
//! refused (it goes DEAD as an invalid row), in both modes. `subject`, `partitionkey` and `time`
//! are optional and, when present, non-empty: they are left out when their column is NULL or
//! empty, in both modes.

use serde::Deserialize;

use crate::broker::Broker;
use crate::relay::ordered::Fields;
use crate::template::{TemplateError, json_string};

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudEventsConfig {
    /// The events' `source`: a URI reference naming the producer, e.g. "/services/orders" or
    /// "urn:acme:orders".
    pub source: String,
    /// `binary` (attributes as headers, the payload the body) or `structured` (the body one
    /// JSON event). Default: "binary".
    #[serde(default)]
    pub mode: Mode,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Binary,
    Structured,
}

impl CloudEventsConfig {
    /// The entry field that is a Kafka message's key, as the binding says (the `partitionkey`
    /// extension: the aggregate id), and whether it is also a header (not in structured mode,
    /// where the attributes are in the body).
    pub(crate) fn kafka_key(&self) -> (&'static str, bool) {
        match self.mode {
            Mode::Binary => ("ce_partitionkey", true),
            Mode::Structured => ("partitionkey", false),
        }
    }
}

/// How a field of the preset treats a row whose column is NULL or empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Presence {
    /// No rule of its own: a constant, the body, the `event_id` beside a structured event.
    AsIs,
    /// The row is refused without it.
    Required { attribute: &'static str, column: &'static str },
    /// Left out when its column is NULL or empty.
    Optional,
}

/// The rule for the preset's field `name` (`ce_type`, `ce-subject`, `partitionkey`, …).
pub(crate) fn presence(name: &str) -> Presence {
    let attribute = name.strip_prefix("ce_").or_else(|| name.strip_prefix("ce-")).unwrap_or(name);
    match attribute {
        "id" => Presence::Required { attribute: "id", column: "event_id" },
        "type" => Presence::Required { attribute: "type", column: "event_type" },
        "subject" | "partitionkey" | "time" => Presence::Optional,
        _ => Presence::AsIs,
    }
}

/// Why a row without a required attribute is refused.
pub(crate) fn missing(attribute: &str, column: &str) -> String {
    format!("CloudEvents `{attribute}` is required, and column `{column}` is null or empty")
}

/// Structured mode's body, written from the row's columns: a template cannot leave out a JSON
/// member, and an optional attribute whose column is NULL or empty must be left out. It writes
/// what the envelope's `payload` template says for a row that has every value (a test holds
/// the two together).
#[derive(Debug, Clone)]
pub(crate) struct StructuredBody {
    /// The source as a JSON string.
    source: String,
    id: usize,
    event_type: usize,
    subject: usize,
    time: usize,
    data: usize,
}

impl StructuredBody {
    /// The body over a claim returning `columns`; names a column it lacks.
    pub(crate) fn bind(events: &CloudEventsConfig, columns: &[String]) -> Result<Self, TemplateError> {
        let at = |name: &str| {
            columns.iter().position(|c| c == name).ok_or_else(|| TemplateError::NotReturned(name.to_owned()))
        };
        let mut source = String::new();
        json_string(&events.source, &mut source);
        Ok(Self {
            source,
            id: at("event_id")?,
            event_type: at("event_type")?,
            subject: at("aggregate_id")?,
            time: at("created_at")?,
            data: at("payload")?,
        })
    }

    /// The event for `row`, or why the row cannot be one.
    pub(crate) fn render(&self, row: &[Option<String>]) -> Result<String, String> {
        let value = |index: usize| row.get(index).and_then(Option::as_deref).filter(|v| !v.is_empty());
        let id = value(self.id).ok_or_else(|| missing("id", "event_id"))?;
        let event_type = value(self.event_type).ok_or_else(|| missing("type", "event_type"))?;
        let data = value(self.data).ok_or_else(|| "column `payload` is null or empty".to_owned())?;
        let mut out = String::with_capacity(160 + self.source.len() + data.len());
        out.push_str("{\"specversion\":\"1.0\",\"id\":");
        json_string(id, &mut out);
        out.push_str(",\"source\":");
        out.push_str(&self.source);
        out.push_str(",\"type\":");
        json_string(event_type, &mut out);
        for (name, index) in [("subject", self.subject), ("time", self.time)] {
            if let Some(v) = value(index) {
                out.push_str(",\"");
                out.push_str(name);
                out.push_str("\":");
                json_string(v, &mut out);
            }
        }
        out.push_str(",\"datacontenttype\":\"application/json\",\"data\":");
        out.push_str(data);
        out.push('}');
        Ok(out)
    }
}

/// The envelope `events` stands for on `broker`.
pub(crate) fn envelope(events: &CloudEventsConfig, broker: Broker) -> Fields {
    let content_type = if broker == Broker::Nats { "Content-Type" } else { "content-type" };
    // A template's literal braces are doubled.
    let source = events.source.replace('{', "{{").replace('}', "}}");
    let field = |name: &str, template: &str| (name.to_owned(), template.to_owned());
    match events.mode {
        // NATS's binding: header values percent-encoded (a header holds printable ASCII only),
        // and `datacontenttype` a `ce-` header like any attribute (`Content-Type` there says
        // that a message is structured).
        Mode::Binary if broker == Broker::Nats => {
            let mut encoded = String::new();
            crate::percent::encode_header_value(&events.source, &mut encoded);
            let source = encoded.replace('{', "{{").replace('}', "}}");
            vec![
                field("ce-specversion", "1.0"),
                field("ce-id", "{percent(event_id)}"),
                field("ce-source", &source),
                field("ce-type", "{percent(event_type)}"),
                field("ce-subject", "{percent(aggregate_id)}"),
                field("ce-partitionkey", "{percent(aggregate_id)}"),
                field("ce-time", "{percent(created_at)}"),
                field("ce-datacontenttype", "application/json"),
                field("payload", "{payload}"),
            ]
        }
        Mode::Binary => {
            let attribute = |name: &str, template: &str| field(&format!("ce_{name}"), template);
            vec![
                attribute("specversion", "1.0"),
                attribute("id", "{event_id}"),
                attribute("source", &source),
                attribute("type", "{event_type}"),
                attribute("subject", "{aggregate_id}"),
                // The partitioning extension: what a Kafka message's key is (broker/kafka).
                attribute("partitionkey", "{aggregate_id}"),
                attribute("time", "{created_at}"),
                field(content_type, "application/json"),
                field("payload", "{payload}"),
            ]
        }
        Mode::Structured => {
            let source = serde_json::to_string(&source).unwrap_or_default();
            let event = format!(
                "{{{{\"specversion\":\"1.0\",\"id\":{{json(event_id)}},\"source\":{source},\"type\":{{json(event_type)}},\
                 \"subject\":{{json(aggregate_id)}},\"time\":{{json(created_at)}},\"datacontenttype\":\"application/json\",\
                 \"data\":{{payload}}}}}}"
            );
            let mut fields = vec![
                field("event_id", "{event_id}"),
                field(content_type, "application/cloudevents+json"),
                field("payload", &event),
            ];
            if broker == Broker::Kafka {
                // The message key, not a header (broker/kafka).
                fields.push(field("partitionkey", "{aggregate_id}"));
            }
            fields
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::Template;

    fn events(mode: Mode) -> CloudEventsConfig {
        CloudEventsConfig { source: "/services/{orders}".into(), mode }
    }

    fn render(fields: &Fields) -> Vec<(String, String)> {
        let columns: Vec<String> =
            ["event_id", "event_type", "aggregate_id", "payload", "created_at"].iter().map(|c| c.to_string()).collect();
        let row = ["e-1", "order.placed", "o-\"7\"", "{\"total\":3}", "2026-12-06T10:00:00.000001Z"];
        let row: Vec<Option<String>> = row.iter().map(|v| Some(v.to_string())).collect();
        fields
            .iter()
            .map(|(name, template)| {
                let bound = Template::parse(template).unwrap().bind(&columns).unwrap();
                (name.clone(), bound.render(&row).unwrap())
            })
            .collect()
    }

    #[test]
    fn binary_mode_names_each_attribute_as_the_brokers_binding_does() {
        let kafka = render(&envelope(&events(Mode::Binary), Broker::Kafka));
        let expected = [
            ("ce_specversion", "1.0"),
            ("ce_id", "e-1"),
            ("ce_source", "/services/{orders}"),
            ("ce_type", "order.placed"),
            ("ce_subject", "o-\"7\""),
            ("ce_partitionkey", "o-\"7\""),
            ("ce_time", "2026-12-06T10:00:00.000001Z"),
            ("content-type", "application/json"),
            ("payload", "{\"total\":3}"),
        ];
        assert_eq!(kafka, expected.map(|(n, v)| (n.to_owned(), v.to_owned())));
    }

    #[test]
    fn binary_mode_on_nats_percent_encodes_each_value_and_names_the_content_type_an_attribute() {
        let nats =
            render(&envelope(&CloudEventsConfig { source: "/shop {eu} €".into(), mode: Mode::Binary }, Broker::Nats));
        let expected = [
            ("ce-specversion", "1.0"),
            ("ce-id", "e-1"),
            ("ce-source", "/shop%20{eu}%20%E2%82%AC"),
            ("ce-type", "order.placed"),
            ("ce-subject", "o-%227%22"),
            ("ce-partitionkey", "o-%227%22"),
            ("ce-time", "2026-12-06T10:00:00.000001Z"),
            ("ce-datacontenttype", "application/json"),
            ("payload", "{\"total\":3}"),
        ];
        assert_eq!(nats, expected.map(|(n, v)| (n.to_owned(), v.to_owned())));
    }

    #[test]
    fn structured_mode_is_one_json_event_whatever_the_values_hold() {
        let fields = render(&envelope(&events(Mode::Structured), Broker::Redis));
        assert_eq!(fields[0], ("event_id".into(), "e-1".into()));
        assert_eq!(fields[1], ("content-type".into(), "application/cloudevents+json".into()));
        let event: serde_json::Value = serde_json::from_str(&fields[2].1).unwrap();
        assert_eq!(
            event,
            serde_json::json!({
                "specversion": "1.0", "id": "e-1", "source": "/services/{orders}", "type": "order.placed",
                "subject": "o-\"7\"", "time": "2026-12-06T10:00:00.000001Z",
                "datacontenttype": "application/json", "data": {"total": 3}
            })
        );
    }

    const COLUMNS: [&str; 5] = ["event_id", "event_type", "aggregate_id", "payload", "created_at"];

    fn body(values: [Option<&str>; 5]) -> Result<String, String> {
        let columns: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
        let body = StructuredBody::bind(&events(Mode::Structured), &columns).unwrap();
        body.render(&values.map(|v| v.map(str::to_owned)))
    }

    #[test]
    fn the_structured_body_is_what_the_envelope_template_says_for_a_full_row() {
        let fields = render(&envelope(&events(Mode::Structured), Broker::Kafka));
        let full = [
            Some("e-1"),
            Some("order.placed"),
            Some("o-\"7\""),
            Some("{\"total\":3}"),
            Some("2026-12-06T10:00:00.000001Z"),
        ];
        assert_eq!(body(full).unwrap(), fields[2].1, "byte for byte");
    }

    #[test]
    fn the_structured_body_leaves_out_an_empty_subject_or_time_and_refuses_an_empty_id_or_type() {
        let event = |values| serde_json::from_str::<serde_json::Value>(&body(values).unwrap()).unwrap();
        let no_subject = event([Some("e-1"), Some("t"), Some(""), Some("{}"), None]);
        assert_eq!(
            no_subject,
            serde_json::json!({"specversion": "1.0", "id": "e-1", "source": "/services/{orders}", "type": "t",
                "datacontenttype": "application/json", "data": {}})
        );
        let err = body([Some("e-1"), Some(""), Some("o"), Some("{}"), None]).unwrap_err();
        assert_eq!(err, "CloudEvents `type` is required, and column `event_type` is null or empty");
        let err = body([None, Some("t"), Some("o"), Some("{}"), None]).unwrap_err();
        assert!(err.contains("`id`") && err.contains("`event_id`"), "{err}");
    }

    #[test]
    fn the_attributes_rules_name_the_same_attribute_in_every_binding() {
        for name in ["ce_id", "ce-id"] {
            assert_eq!(presence(name), Presence::Required { attribute: "id", column: "event_id" });
        }
        for name in ["ce_subject", "ce-partitionkey", "partitionkey", "ce_time"] {
            assert_eq!(presence(name), Presence::Optional, "{name}");
        }
        for name in ["event_id", "payload", "content-type", "ce_source", "ce_specversion"] {
            assert_eq!(presence(name), Presence::AsIs, "{name}");
        }
    }

    #[test]
    fn a_relay_that_lays_out_its_entry_otherwise_is_refused_by_key() {
        let toml = "[database]\nurl = \"postgres://h/db\"\n[[relay]]\nname = \"orders\"\nowner = \"x\"\n\
                    [relay.cloudevents]\nsource = \"/orders\"\n[relay.fields]\nregion = \"eu\"\n";
        let errors = crate::config::load_str(toml).unwrap_err().to_string();
        assert!(errors.contains("relay `orders`.fields: not with cloudevents"), "{errors}");
        assert!(errors.contains("relay `orders`.owner: not with cloudevents"), "{errors}");
        let toml = "[database]\nurl = \"postgres://h/db\"\n[[relay]]\nname = \"orders\"\n[relay.cloudevents]\nsource = \" \"\n";
        let errors = crate::config::load_str(toml).unwrap_err().to_string();
        assert!(errors.contains("cloudevents.source: a URI reference"), "{errors}");
    }

    #[test]
    fn the_preset_becomes_the_relays_envelope_and_its_claim_returns_created_at() {
        let toml = "[database]\nurl = \"postgres://h/db\"\n[[relay]]\nname = \"orders\"\n[relay.cloudevents]\nsource = \"/orders\"\n";
        let config = crate::config::load_str(toml).unwrap();
        let relay = &config.relays[0];
        assert_eq!(relay.envelope, envelope(relay.cloudevents.as_ref().unwrap(), Broker::Redis));
        assert!(relay.claims_created_at());
        assert_eq!(relay.payload_field(), Some("payload"));
    }
}
