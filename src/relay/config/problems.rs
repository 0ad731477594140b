//! What a `[[relay]]` section may not say, checked on the section alone. The checks that read
//! other sections too (the statements' placeholders, which claim the database allows, names
//! used twice) are the root configuration's.

use super::{RelayConfig, keep};
use crate::names::{is_identifier, is_label};
use crate::template::Template;

/// Entry fields handoff writes itself; `fields` may not redefine them.
const RESERVED_FIELDS: &[&str] =
    &["event_id", "event_type", "aggregate_type", "aggregate_id", "payload", "headers", "owner"];

impl RelayConfig {
    /// Every problem of this section, each naming its key under `path`.
    pub(crate) fn problems(&self, path: &str) -> Vec<String> {
        let mut errors = Vec::new();
        let mut check = |ok: bool, message: &str| {
            if !ok {
                errors.push(format!("{path}.{message}"));
            }
        };
        check(is_label(&self.name), "name must be 1-64 characters of [A-Za-z0-9_.-]");
        check(is_identifier(&self.table), "table must be a plain or schema-qualified identifier");
        check(self.max_expired_claims >= 1, "max_expired_claims must be >= 1");
        check(self.payload_max_bytes >= 2, "payload_max_bytes must be >= 2");
        // 512 MB is what one Redis bulk string may hold at most (proto-max-bulk-len's default).
        check(
            (self.payload_max_bytes..=512 << 20).contains(&self.entry_max_bytes),
            "entry_max_bytes must be at least payload_max_bytes and at most 536870912",
        );
        errors.extend(self.claim_loop.problems(path));
        keep::retention_problems(self, path, &mut errors);
        if let Some(dedupe) = &self.dedupe {
            if dedupe.window < self.claim_loop.lease * 2 {
                errors.push(format!(
                    "{path}.dedupe.window must be at least twice the lease (a takeover happens after it expires)"
                ));
            }
            if dedupe.key_prefix.is_empty() || dedupe.key_prefix.contains(['{', '}']) {
                errors.push(format!("{path}.dedupe.key_prefix must be non-empty and hold no braces"));
            }
        }
        if self.notify.as_ref().is_some_and(|n| n.channel.is_empty()) {
            errors.push(format!("{path}.notify.channel must not be empty"));
        }
        if let Some(gate) = &self.durability {
            if gate.replicas == 0 && !gate.aof {
                errors.push(format!("{path}.durability: set replicas > 0 (WAIT) and/or aof = true (WAITAOF)"));
            }
            if gate.timeout.is_zero() {
                errors.push(format!("{path}.durability.timeout must be > 0"));
            }
        }
        let loss = &self.broker_loss;
        if loss.enabled && (loss.check_interval.is_zero() || loss.lookback.is_zero() || loss.max_window < loss.lookback)
        {
            errors.push(format!(
                "{path}.broker_loss: check_interval and lookback must be > 0 and max_window at least lookback"
            ));
        }
        if let Some(partitions) = &self.partitions {
            errors.extend(partitions.problems(path));
            if self.retention.as_ref().is_some_and(|r| r.enabled) {
                errors.push(format!(
                    "{path}: partitions drops old partitions and retention deletes old rows: choose one (partitions)"
                ));
            }
        }
        if let Err(e) = Template::parse(&self.stream) {
            errors.push(format!("{path}.stream: {e}"));
        }
        for (field, template) in &self.fields {
            if RESERVED_FIELDS.contains(&field.as_str()) {
                errors.push(format!("{path}.fields.{field}: `{field}` is written by handoff itself"));
            }
            if let Err(e) = Template::parse(template) {
                errors.push(format!("{path}.fields.{field}: {e}"));
            }
        }
        self.envelope_problems(path, &mut errors);
        errors
    }

    /// `[relay.envelope]`: the whole entry, so it must name the event id, and it replaces what
    /// the built-in layout adds (`owner`, `fields`).
    fn envelope_problems(&self, path: &str, errors: &mut Vec<String>) {
        if self.envelope.is_empty() {
            return;
        }
        if !self.fields.is_empty() {
            errors.push(format!(
                "{path}.fields: with an envelope, write every field in {path}.envelope (in entry order)"
            ));
        }
        if self.owner.is_some() {
            errors.push(format!(
                "{path}.owner: with an envelope, write the owner as a field of {path}.envelope (a constant)"
            ));
        }
        let mut carries_id = false;
        for (field, template) in &self.envelope {
            if field.is_empty() {
                errors.push(format!("{path}.envelope: a field name is empty"));
            }
            match Template::parse(template) {
                // Percent-encoded, only in a `ce-` header on NATS, which a bridge decodes.
                Ok(t) => {
                    let decoded =
                        self.broker == crate::broker::Broker::Nats && crate::percent::encoded_header(field.as_bytes());
                    carries_id |= t
                        .carried_column()
                        .is_some_and(|(column, percent)| column == "event_id" && (!percent || decoded))
                }
                Err(e) => errors.push(format!("{path}.envelope.{field}: {e}")),
            }
        }
        if !carries_id {
            errors.push(format!(
                "{path}.envelope: no field is \"{{event_id}}\"; consumers take events over by their id, so one field must carry it"
            ));
        }
    }
}
