//! Is a stream entry an event this consumer takes over? Every refusal names a bounded reason
//! (a metric label) and a detail for the poison record.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use crate::bridge::config::{EnvelopeNames, EventIdFormat, StreamSource, UnknownTypes, ValidateConfig};
use crate::bridge::takeover::{InboxEvent, PoisonRecord, Text};
use crate::broker::read::RawEntry;
use crate::event_types::type_matches;
use crate::reasons::PoisonReason;

/// What becomes of one entry.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Take it over into the inbox (`ignored` marks a type kept but never handled).
    Take(InboxEvent),
    Poison(PoisonRecord),
}

pub(crate) struct Validator {
    config: ValidateConfig,
    /// Which entry field carries what.
    names: EnvelopeNames,
    schemas: HashMap<String, jsonschema::Validator>,
}

struct Refusal(PoisonReason, String);

/// A JSON Schema that cannot be used, naming the event type and the file.
#[derive(Debug, thiserror::Error)]
#[error("validate.schemas.{event_type} ({}): {detail}", file.display())]
pub(crate) struct SchemaError {
    pub event_type: String,
    pub file: std::path::PathBuf,
    pub detail: String,
}

impl Validator {
    /// Loads the JSON Schemas; names the event type and file of any that cannot be used.
    pub(crate) fn new(config: &ValidateConfig, names: &EnvelopeNames) -> Result<Self, SchemaError> {
        let mut schemas = HashMap::new();
        for (event_type, path) in &config.schemas {
            let context = |e: &dyn std::fmt::Display| SchemaError {
                event_type: event_type.clone(),
                file: path.clone(),
                detail: e.to_string(),
            };
            let text = std::fs::read_to_string(path).map_err(|e| context(&e))?;
            let schema: serde_json::Value = serde_json::from_str(&text).map_err(|e| context(&e))?;
            let validator = jsonschema::validator_for(&schema).map_err(|e| context(&e))?;
            schemas.insert(event_type.clone(), validator);
        }
        Ok(Self { config: config.clone(), names: names.clone(), schemas })
    }

    pub(crate) fn check(&self, source: &StreamSource, entry: &RawEntry) -> Verdict {
        match self.event(source, entry) {
            Ok(event) => Verdict::Take(event),
            Err(Refusal(reason, detail)) => Verdict::Poison(PoisonRecord {
                stream: source.key.clone(),
                entry_id: entry.id.clone(),
                event_id: self.event_id_of(entry),
                reason,
                detail,
                fields: entry.fields_json(self.config.payload_max_bytes),
            }),
        }
    }

    /// The entry's event id as far as it can be read (for a poison record).
    pub(crate) fn event_id_of(&self, entry: &RawEntry) -> Option<String> {
        entry
            .field(&self.names.event_id)
            .filter(|v| !v.contains(&0))
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(str::to_owned)
    }

    fn event(&self, source: &StreamSource, entry: &RawEntry) -> Result<InboxEvent, Refusal> {
        if let Some(why) = &entry.unreadable {
            return Err(Refusal(PoisonReason::UnreadableMessage, why.clone()));
        }
        if entry.fields.is_none() {
            return Err(Refusal(PoisonReason::Deleted, "the entry was deleted from the stream while pending".into()));
        }
        let names = &self.names;
        let event_id = required(entry, &names.event_id)?;
        self.check_event_id(&event_id)?;
        let event_type = required(entry, &names.event_type)?;
        let ignored = !self.type_allowed(&event_type);
        if ignored && self.config.unknown_types == UnknownTypes::Poison {
            return Err(Refusal(PoisonReason::UnknownEventType, format!("event type `{event_type}` is not accepted")));
        }
        let owner = optional(entry, &names.owner)?;
        if let Some(expected) = &source.owner
            && owner.as_deref() != Some(expected.as_str())
        {
            let got = owner.as_deref().unwrap_or("(none)");
            return Err(Refusal(PoisonReason::OwnerMismatch, format!("owner is `{got}`, stream expects `{expected}`")));
        }
        // The size first: an oversized payload is refused before anything reads it.
        if let Some(raw) = entry.field(&names.payload)
            && raw.len() > self.config.payload_max_bytes
        {
            let detail = format!("payload is {} bytes, more than {}", raw.len(), self.config.payload_max_bytes);
            return Err(Refusal(PoisonReason::PayloadTooLarge, detail));
        }
        let payload_text = text_field(entry, &names.payload)?
            .ok_or_else(|| Refusal(PoisonReason::MissingField, format!("field `{}` is missing", names.payload)))?;
        let payload = self.check_payload(&event_id, &event_type, payload_text.as_str())?;
        let headers = match text_field(entry, &names.headers)? {
            None => Text::from_static("{}"),
            Some(text) => match serde_json::from_str::<serde_json::Value>(text.as_str()) {
                Ok(serde_json::Value::Object(_)) if !text.as_str().contains("\\u0000") => text,
                _ => {
                    return Err(Refusal(
                        PoisonReason::InvalidHeaders,
                        format!("{} is not a JSON object", names.headers),
                    ));
                }
            },
        };
        let aggregate_type = optional(entry, &names.aggregate_type)?;
        let aggregate_id = optional(entry, &names.aggregate_id)?;
        let fields = self.extra_fields(entry)?;
        let content_hash = content_hash(&event_type, &aggregate_type, &aggregate_id, &payload);
        Ok(InboxEvent {
            event_id,
            event_type,
            owner,
            aggregate_type,
            aggregate_id,
            payload: payload_text,
            headers,
            fields,
            content_hash,
            stream: source.key.clone(),
            entry_id: entry.id.clone(),
            ignored,
        })
    }

    /// Every field the envelope does not map, as a JSON object of strings (`{}` when none); the
    /// first of a repeated name wins, as for the mapped ones.
    fn extra_fields(&self, entry: &RawEntry) -> Result<Text, Refusal> {
        let mut extras = serde_json::Map::new();
        for (name, _) in entry.fields.iter().flatten() {
            if self.names.maps(name) {
                continue;
            }
            let Ok(key) = std::str::from_utf8(name) else {
                return Err(Refusal(PoisonReason::NotUtf8, "a field name is not UTF-8".into()));
            };
            if key.contains('\0') {
                return Err(Refusal(PoisonReason::NulByte, "a field name contains a NUL byte".into()));
            }
            if !extras.contains_key(key)
                && let Some(value) = text_field(entry, key)?
            {
                extras.insert(key.to_owned(), serde_json::Value::String(value.as_str().to_owned()));
            }
        }
        if extras.is_empty() {
            return Ok(Text::from_static("{}"));
        }
        let json = serde_json::Value::Object(extras).to_string();
        Ok(Text::new(bytes::Bytes::from(json)).unwrap_or_else(|| Text::from_static("{}")))
    }

    fn check_event_id(&self, id: &str) -> Result<(), Refusal> {
        let bad = |why: &str| Err(Refusal(PoisonReason::InvalidEventId, format!("event_id {why}")));
        if id.is_empty() {
            return bad("is empty");
        }
        if id.len() > self.config.event_id_max_len {
            return bad(&format!("is {} bytes, longer than {}", id.len(), self.config.event_id_max_len));
        }
        let ok = match self.config.event_id_format {
            EventIdFormat::Any => id.chars().all(|c| !c.is_control()),
            EventIdFormat::Token => id.chars().all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c)),
            EventIdFormat::Uuid => is_uuid(id),
        };
        if ok { Ok(()) } else { bad(&format!("is not of the {:?} form", self.config.event_id_format)) }
    }

    fn type_allowed(&self, event_type: &str) -> bool {
        let types = &self.config.event_types;
        types.is_empty() || types.iter().any(|pattern| type_matches(pattern, event_type))
    }

    fn check_payload(&self, event_id: &str, event_type: &str, text: &str) -> Result<serde_json::Value, Refusal> {
        let payload: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| Refusal(PoisonReason::InvalidPayload, format!("payload is not JSON: {e}")))?;
        if text.contains("\\u0000") {
            return Err(Refusal(
                PoisonReason::InvalidPayload,
                "payload contains \\u0000, which jsonb cannot store".into(),
            ));
        }
        if !payload.is_object() {
            return Err(Refusal(PoisonReason::InvalidPayload, "payload is not a JSON object".into()));
        }
        if let Some(field) = &self.config.payload_id_field
            && payload.get(field).and_then(|v| v.as_str()) != Some(event_id)
        {
            return Err(Refusal(PoisonReason::IdMismatch, format!("payload.{field} does not equal event_id")));
        }
        if let Some(schema) = self.schemas.get(event_type)
            && let Err(error) = schema.validate(&payload)
        {
            let detail = format!("payload violates the schema at `{}`: {error}", error.instance_path());
            return Err(Refusal(PoisonReason::SchemaViolation, detail));
        }
        Ok(payload)
    }
}

fn required(entry: &RawEntry, name: &str) -> Result<String, Refusal> {
    optional(entry, name)?.ok_or_else(|| Refusal(PoisonReason::MissingField, format!("field `{name}` is missing")))
}

/// A field as text; `None` when absent or when the envelope maps nothing to it (`name` empty).
fn optional(entry: &RawEntry, name: &str) -> Result<Option<String>, Refusal> {
    if name.is_empty() {
        return Ok(None);
    }
    Ok(text_field(entry, name)?.map(|text| text.as_str().to_owned()))
}

/// A field as text, without copying it: UTF-8 and free of NUL (Postgres text cannot hold NUL,
/// so such a value could never be taken over).
fn text_field(entry: &RawEntry, name: &str) -> Result<Option<Text>, Refusal> {
    if name.is_empty() {
        return Ok(None);
    }
    let Some(bytes) = entry.field(name) else { return Ok(None) };
    let text = Text::new(bytes.clone())
        .ok_or_else(|| Refusal(PoisonReason::NotUtf8, format!("field `{name}` is not UTF-8")))?;
    if text.as_bytes().contains(&0) {
        return Err(Refusal(PoisonReason::NulByte, format!("field `{name}` contains a NUL byte")));
    }
    Ok(Some(text))
}

/// sha256 over what makes the event what it is; the same event published twice hashes the same.
fn content_hash(
    event_type: &str,
    aggregate_type: &Option<String>,
    aggregate_id: &Option<String>,
    payload: &serde_json::Value,
) -> String {
    let mut hasher = HashWriter(Sha256::new());
    for part in [event_type, aggregate_type.as_deref().unwrap_or(""), aggregate_id.as_deref().unwrap_or("")] {
        hasher.0.update(part.as_bytes());
        hasher.0.update([0]);
    }
    // Hash the parsed value so key order or spacing differences between publishers don't count;
    // written straight into the hasher, not into a copy of the payload first.
    let _ = serde_json::to_writer(&mut hasher, payload);
    // Lowercase hex by table: a `format!` per byte cost several percent of the bridge's CPU.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(64);
    for byte in hasher.0.finalize() {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    hex
}

struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.update(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn is_uuid(id: &str) -> bool {
    let parts: Vec<&str> = id.split('-').collect();
    parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12]) && parts.iter().all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::content_hash;

    #[test]
    fn the_content_hash_is_the_sha256_of_the_canonical_event_in_lowercase_hex() {
        let hash = |payload: &str| {
            let payload = serde_json::from_str(payload).unwrap();
            content_hash("user.created", &Some("user".into()), &Some("u-1".into()), &payload)
        };
        // sha256("user.created\0user\0u-1\0" + r#"{"a":1,"b":"x"}"#), computed independently.
        let expected = "54ff67040f2b9b11482d16eb6357652b4f85bf5fa7fd13bd50547670b0a2d975";
        assert_eq!(hash(r#"{"a":1,"b":"x"}"#), expected);
        assert_eq!(hash(r#"{ "b": "x", "a": 1 }"#), expected, "key order and spacing do not count");
    }
}
