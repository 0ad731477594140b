//! What the configuration may not ask of NATS JetStream: `[nats]` itself, and the relays and
//! bridges with `broker = "nats"` (keys JetStream has no use for, or offers in its own way).

use crate::broker::Broker;
use crate::broker::nats::config::is_subject;
use crate::config::file::Config;

/// Every problem, each naming its key.
pub(crate) fn problems(config: &Config) -> Vec<String> {
    let mut errors = Vec::new();
    if let Some(nats) = &config.nats {
        errors.extend(nats.problems());
        if nats.tls_required() {
            let mode = nats.tls.mode_or(crate::tls::config::TlsMode::VerifyFull);
            errors.extend(crate::tls::config::check_shape("nats.tls", &nats.tls, mode));
        }
    }
    for (i, relay) in config.relays.iter().enumerate().filter(|(_, r)| r.broker == Broker::Nats) {
        if config.nats.is_none() {
            errors.push(format!("relay[{i}].broker: \"nats\" needs a [nats] section"));
        }
        // JetStream dedupes on Nats-Msg-Id within the stream's duplicate window, keeps what its
        // retention policy says and stores on the stream's replicas before its PubAck.
        for (set, key, instead) in [
            (relay.dedupe.is_some(), "dedupe", "the JetStream stream's duplicate_window"),
            (relay.trim.is_some(), "trim", "the JetStream stream's limits or retention policy"),
            (
                relay.durability.is_some(),
                "durability",
                "the JetStream stream's replicas (a PubAck means stored on a quorum)",
            ),
        ] {
            if set {
                errors.push(format!("relay[{i}].{key}: not for broker = \"nats\"; use {instead}"));
            }
        }
    }
    for (i, bridge) in config.bridges.iter().enumerate().filter(|(_, b)| b.broker == Broker::Nats) {
        if config.nats.is_none() {
            errors.push(format!("bridge[{i}].broker: \"nats\" needs a [nats] section"));
        }
        if !matches!(bridge.start.as_str(), "0" | "$") {
            errors.push(format!(
                "bridge[{i}].start: `{}` on NATS is \"0\" (the whole stream) or \"$\" (new messages)",
                bridge.start
            ));
        }
        if let Some(key) = &bridge.dead_letter_stream
            && (!is_subject(key) || key.split('.').any(|t| t == "*" || t == ">"))
        {
            errors.push(format!(
                "bridge[{i}].dead_letter_stream: `{key}` is not a NATS subject to publish to (tokens separated by dots, no wildcards)"
            ));
        }
        for (j, source) in bridge.streams.iter().enumerate() {
            if !is_subject(&source.key) {
                errors.push(format!(
                    "bridge[{i}].streams[{j}].key: `{}` is not a NATS subject (tokens separated by dots, no spaces)",
                    source.key
                ));
            }
        }
    }
    errors
}
