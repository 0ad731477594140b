//! What the configuration may not ask of Kafka: `[kafka]` itself, and the relays and bridges with
//! `broker = "kafka"` (keys Kafka has no use for, and names it cannot carry).

use crate::broker::Broker;
use crate::config::file::Config;

/// Every problem, each naming its key.
pub(crate) fn problems(config: &Config) -> Vec<String> {
    let mut errors = config.kafka.as_ref().map(|k| k.problems()).unwrap_or_default();
    for (i, relay) in config.relays.iter().enumerate().filter(|(_, r)| r.broker == Broker::Kafka) {
        if config.kafka.is_none() {
            errors.push(format!("relay[{i}].broker: \"kafka\" needs a [kafka] section"));
        }
        // The template's own text is in every topic it renders: a character Kafka refuses
        // there (the default template's `:`) would turn every row DEAD.
        let text = crate::template::Template::parse(&relay.stream).map(|t| t.literal_text()).unwrap_or_default();
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if let Some(bad) = text.chars().find(|c| !legal(*c)) {
            errors.push(format!(
                "relay[{i}].stream: `{}` holds `{bad}`, which a Kafka topic cannot (A-Z a-z 0-9 . _ -); e.g. \"audit.{{aggregate_type}}\"",
                relay.stream
            ));
        }
        // The idempotent producer stores each message once per session, on every in-sync
        // replica before its report; the topic's retention decides what it keeps.
        for (set, key, instead) in [
            (relay.dedupe.is_some(), "dedupe", "the inbox's insert-if-absent on the event id header"),
            (relay.trim.is_some(), "trim", "the topic's retention.ms / retention.bytes"),
            (
                relay.durability.is_some(),
                "durability",
                "the topic's replication factor and min.insync.replicas (acks=all)",
            ),
        ] {
            if set {
                errors.push(format!("relay[{i}].{key}: not for broker = \"kafka\"; use {instead}"));
            }
        }
    }
    for (i, bridge) in config.bridges.iter().enumerate().filter(|(_, b)| b.broker == Broker::Kafka) {
        if config.kafka.is_none() {
            errors.push(format!("bridge[{i}].broker: \"kafka\" needs a [kafka] section"));
        }
        if !matches!(bridge.start.as_str(), "0" | "$") {
            errors.push(format!(
                "bridge[{i}].start: `{}` on Kafka is \"0\" (the earliest offset) or \"$\" (new messages), for a group without committed offsets",
                bridge.start
            ));
        }
        for (j, source) in bridge.streams.iter().enumerate() {
            if let Some(problem) = crate::broker::kafka::config::topic_problem(&source.key) {
                errors.push(format!("bridge[{i}].streams[{j}].key: {problem}"));
            }
        }
        if let Some(problem) =
            bridge.dead_letter_stream.as_deref().and_then(crate::broker::kafka::config::topic_problem)
        {
            errors.push(format!("bridge[{i}].dead_letter_stream: {problem}"));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use crate::config::load_str;

    const BASE: &str = "[database]\nurl = \"postgres://x@h/db\"\n";

    #[test]
    fn a_kafka_relay_needs_kafka_and_is_told_what_kafka_does_instead_of_dedupe() {
        let relay = "[[relay]]\nname = \"a\"\nbroker = \"kafka\"\nstream = \"audit.{aggregate_type}\"\n";
        let error = load_str(&format!("{BASE}{relay}")).unwrap_err().to_string();
        assert!(error.contains("relay[0].broker: \"kafka\" needs a [kafka] section"), "{error}");
        let colon = "[[relay]]\nname = \"a\"\nbroker = \"kafka\"\n[kafka]\nbootstrap_servers = \"k1:9092\"\n";
        let error = load_str(&format!("{BASE}{colon}")).unwrap_err().to_string();
        assert!(error.contains("relay[0].stream: `audit:{aggregate_type}` holds `:`"), "the default template: {error}");
        let kafka = "[kafka]\nbootstrap_servers = \"k1:9092\"\n";
        let config = load_str(&format!("{BASE}{relay}{kafka}")).unwrap_or_else(|e| panic!("{e}"));
        assert!(config.relays[0].trim.is_none(), "the topic's retention keeps what Kafka keeps");
        let deduped = format!("{BASE}{relay}[relay.dedupe]\nwindow = \"1h\"\n{kafka}");
        let error = load_str(&deduped).unwrap_err().to_string();
        assert!(error.contains("relay[0].dedupe: not for broker = \"kafka\""), "{error}");
    }

    #[test]
    fn a_bridge_on_kafka_reads_topics_and_starts_at_either_end() {
        let bridge = |key: &str, start: &str| {
            format!(
                "[[bridge]]\nname = \"b\"\nconsumer = \"c\"\nbroker = \"kafka\"\nstart = \"{start}\"\n[[bridge.streams]]\nkey = \"{key}\"\n"
            )
        };
        let kafka = "[kafka]\nbootstrap_servers = \"k1:9092\"\n";
        load_str(&format!("{BASE}{}{kafka}", bridge("audit.user", "0"))).unwrap_or_else(|e| panic!("{e}"));
        let error = load_str(&format!("{BASE}{}", bridge("audit.user", "$"))).unwrap_err().to_string();
        assert!(error.contains("bridge[0].broker: \"kafka\" needs a [kafka] section"), "{error}");
        let error =
            load_str(&format!("{BASE}{}{kafka}", bridge("audit:user", "1700000000000-0"))).unwrap_err().to_string();
        assert!(error.contains("bridge[0].start: `1700000000000-0` on Kafka"), "{error}");
        assert!(error.contains("bridge[0].streams[0].key: topic `audit:user` is not a Kafka topic name"), "{error}");
    }
}
