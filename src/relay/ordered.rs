//! Tables whose key order matters (an entry's fields are written in the order configured).
//!
//! The configuration is merged from the file and the environment into figment's sorted maps, so
//! the order is read back from the file itself: keys it names keep its order, keys only the
//! environment adds follow in name order.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

/// Name → template, in the order configured.
pub(crate) type Fields = Vec<(String, String)>;

/// Deserializes a table into [`Fields`] (sorted by name; [`restore`] puts them in file order).
pub(crate) fn map<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Fields, D::Error> {
    Ok(BTreeMap::<String, String>::deserialize(deserializer)?.into_iter().collect())
}

/// Puts each relay's `fields` and `envelope` (given in the order of the `[[relay]]` entries) in
/// the order `text` (the TOML file) writes them.
pub(crate) fn restore<'a>(relays: impl Iterator<Item = (&'a mut Fields, &'a mut Fields)>, text: &str) {
    let Ok(document) = text.parse::<toml::Table>() else { return };
    let Some(raw_relays) = document.get("relay").and_then(toml::Value::as_array) else { return };
    for ((fields, envelope), raw) in relays.zip(raw_relays) {
        for (key, fields) in [("fields", fields), ("envelope", envelope)] {
            if let Some(table) = raw.get(key).and_then(toml::Value::as_table) {
                let order: Vec<&String> = table.keys().collect();
                // Stable: keys the file does not name keep their name order, after the others.
                fields.sort_by_key(|(name, _)| order.iter().position(|k| *k == name).unwrap_or(usize::MAX));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::load_str;

    #[test]
    fn fields_and_envelope_keep_the_order_written() {
        let toml = r#"
            [database]
            url = "postgres://x@localhost/db"
            [[relay]]
            name = "a"
            fields = { zeta = "z", alpha = "a", mid = "m" }
            [[relay]]
            name = "b"
            [relay.envelope]
            eventId = "{event_id}"
            eventType = "{event_type}"
            aggregateId = "{aggregate_id}"
            payload = "{payload}"
        "#;
        let config = load_str(toml).unwrap();
        let names = |f: &super::Fields| f.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        assert_eq!(names(&config.relays[0].fields), ["zeta", "alpha", "mid"]);
        assert_eq!(names(&config.relays[1].envelope), ["eventId", "eventType", "aggregateId", "payload"]);
    }
}
