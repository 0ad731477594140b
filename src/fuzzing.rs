//! What the fuzz targets in `fuzz/` call: each parser that takes bytes from outside handoff,
//! fed the way handoff feeds it. Built only under `cfg(fuzzing)` (cargo fuzz sets it), so none
//! of this is in the shipped binary or its public API. Each must return for any input: no
//! panic, no overflow of the stack, no unbounded allocation, no endless loop.

use std::str::from_utf8;

use bytes::{Bytes, BytesMut};

use crate::bridge::config::{EnvelopeNames, StreamSource, ValidateConfig};
use crate::bridge::validate::Validator;
use crate::broker::read::RawEntry;
use crate::config::load::load_str;

/// A reply from a Redis server, or from anyone posing as one on a plain `redis://` connection:
/// whole replies are taken off the front until the rest is incomplete or refused.
pub fn redis_reply(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(_)) = crate::broker::redis::parse_reply(&mut buf) {}
}

/// What a NATS server sends a relay's publishing connection, operation after operation.
pub fn nats_server_ops(data: &[u8]) {
    crate::broker::nats::server_ops(data)
}

/// A configuration file (and the environment overrides it names are not read).
pub fn config_file(data: &[u8]) {
    if let Ok(text) = from_utf8(data) {
        let _ = load_str(text);
    }
}

/// A stream or field template (its first line), rendered with a row's values (the other lines,
/// a value per column; an empty line is NULL).
pub fn template(data: &[u8]) {
    let Ok(text) = from_utf8(data) else { return };
    let mut lines = text.split('\n');
    let Ok(template) = crate::template::Template::parse(lines.next().unwrap_or_default()) else { return };
    let columns: Vec<String> =
        ["aggregate_type", "aggregate_id", "event_type", "tenant", "region"].map(String::from).to_vec();
    let row: Vec<Option<String>> = lines.map(|v| (!v.is_empty()).then(|| v.to_owned())).collect();
    if let Ok(bound) = template.bind(&columns) {
        let _ = bound.render(&row);
    }
    let _ = (template.family(), template.literal_text(), template.shard_count());
}

/// A stream entry as a bridge reads it: fields are the byte runs between `0xFF` bytes, name
/// then value, checked by the default validation (event id, type, owner, payload, headers) and
/// once more with a payload id field and the `any` id format.
pub fn stream_entry(data: &[u8]) {
    let runs: Vec<Bytes> = data.split(|b| *b == 0xff).map(Bytes::copy_from_slice).collect();
    let fields = runs.chunks(2).map(|pair| (pair[0].clone(), pair.get(1).cloned().unwrap_or_default())).collect();
    let entry = RawEntry::new("1-0".into(), Some(fields));
    let source = StreamSource { key: "audit:user".into(), owner: Some("auth".into()), shard_count: None, shards: None };
    let names = EnvelopeNames::default();
    let strict = ValidateConfig::default();
    let loose = ValidateConfig {
        event_id_format: crate::bridge::config::EventIdFormat::Any,
        payload_id_field: Some("auditId".into()),
        payload_max_bytes: 512,
        ..ValidateConfig::default()
    };
    for config in [strict, loose] {
        if let Ok(validator) = Validator::new(&config, &names) {
            let _ = validator.check(&source, &entry);
            let _ = entry.fields_json(config.payload_max_bytes);
        }
    }
}

/// The JSON body of an admin API mutation, read as each endpoint reads it.
pub fn admin_body(data: &[u8]) {
    crate::admin::read_every_kind(data);
}

/// A NATS message's header block as the bridge checks it after a reconnect.
pub fn nats_headers(data: &[u8]) {
    crate::broker::nats::check_headers(data);
}
