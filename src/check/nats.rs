//! What `handoff check` asks of the JetStream stream a relay publishes to: that it exists,
//! captures every subject the relay's template can render, and remembers message ids for longer
//! than a row may take to be published again; of the stream a bridge reads, that it captures
//! the bridge's subjects; and what it says about the rest.

use std::time::Duration;

use crate::relay::config::RelayConfig;

pub(crate) use crate::broker::nats::StreamSettings;

/// The subject pattern a relay's template can render: each `{column}` is one token (`*`).
pub(crate) fn subject_pattern(template: &str) -> String {
    let mut out = String::new();
    let mut in_var = false;
    for c in template.chars() {
        match c {
            '{' if !in_var => {
                in_var = true;
                out.push('*');
            }
            '}' if in_var => in_var = false,
            _ if in_var => {}
            c => out.push(c),
        }
    }
    out
}

/// Whether every subject `pattern` matches is captured by the stream subject `filter` (NATS
/// wildcards: `*` one token, `>` the rest).
pub(crate) fn captured(pattern: &str, filter: &str) -> bool {
    let (mut p, mut f) = (pattern.split('.'), filter.split('.'));
    loop {
        match (p.next(), f.next()) {
            (_, Some(">")) => return true,
            (Some(pt), Some(ft)) if ft == "*" || (pt == ft && pt != "*" && pt != ">") => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// How long after a publish the same row may be published again: a relay that died holding it
/// (its lease), one that timed out waiting for the PubAck (its outage backoff), a retried row
/// (its row backoff). A duplicate window shorter than that lets a republished row through.
pub(crate) fn retry_horizon(relay: &RelayConfig) -> Duration {
    let loop_ = &relay.claim_loop;
    loop_.lease + loop_.outage_backoff.max + loop_.backoff.max
}

/// What `handoff migrate` creates a missing stream with for `relays`: their subject patterns
/// and a duplicate window of twice the longest retry horizon, at least ten minutes.
pub(crate) fn to_create<'a>(relays: impl IntoIterator<Item = &'a RelayConfig>) -> (Vec<String>, Duration) {
    let mut subjects: Vec<String> = Vec::new();
    let mut window = Duration::from_secs(600);
    for relay in relays {
        let pattern = subject_pattern(&relay.stream);
        if !subjects.contains(&pattern) {
            subjects.push(pattern);
        }
        window = window.max(2 * retry_horizon(relay));
    }
    (subjects, window)
}

/// Problems with `settings` for `relay`, each naming the key to change; and lines saying what
/// holds.
pub(crate) fn review(stream: &str, settings: &StreamSettings, relay: &RelayConfig) -> (Vec<String>, Vec<String>) {
    let (mut ok, mut problems) = (Vec::new(), Vec::new());
    let name = &relay.name;
    let pattern = subject_pattern(&relay.stream);
    if !settings.subjects.iter().any(|filter| captured(&pattern, filter)) {
        problems.push(format!(
            "relay `{name}`.stream: subjects `{pattern}` are not all captured by JetStream stream {stream} (subjects {:?})",
            settings.subjects
        ));
    }
    let horizon = retry_horizon(relay);
    if settings.duplicate_window < horizon {
        problems.push(format!(
            "nats.stream: JetStream stream {stream}'s duplicate_window {:?} is shorter than relay `{name}`'s retry horizon {horizon:?} (lease + outage_backoff.max + backoff.max): a row published again after it would be stored twice",
            settings.duplicate_window
        ));
    }
    if let Some(max) = settings.max_message_bytes.filter(|&max| max < relay.entry_max_bytes) {
        problems.push(format!(
            "relay `{name}`.entry_max_bytes: {} is over JetStream stream {stream}'s max_msg_size {max}: a row whose message falls between would be refused by the stream and turn DEAD; set entry_max_bytes below {max}, leaving room for the message's header framing",
            relay.entry_max_bytes
        ));
    }
    ok.push(format!(
        "relay `{name}`: JetStream stream {stream} captures `{pattern}`, duplicate window {:?}, R{}{}",
        settings.duplicate_window,
        settings.replicas,
        if settings.replicas < 3 { " (a PubAck means stored on fewer than 3 servers)" } else { "" }
    ));
    if settings.limits_drop_unread {
        ok.push(format!(
            "relay `{name}`: JetStream stream {stream} drops messages at its limits whether or not a consumer read them (retention = limits, discard = old)"
        ));
    }
    (ok, problems)
}

/// Problems with `settings` for a bridge reading `subject` (its `streams[index].key`), and
/// lines saying what holds.
pub(crate) fn review_bridge(
    stream: &str,
    settings: &StreamSettings,
    (bridge, index, subject): (&str, usize, &str),
) -> (Vec<String>, Vec<String>) {
    let (mut ok, mut problems) = (Vec::new(), Vec::new());
    if settings.subjects.iter().any(|filter| captured(subject, filter)) {
        ok.push(format!("bridge `{bridge}`: JetStream stream {stream} captures `{subject}`"));
    } else {
        problems.push(format!(
            "bridge `{bridge}`.streams[{index}].key: `{subject}` is not captured by JetStream stream {stream} (subjects {:?}): the bridge would read nothing",
            settings.subjects
        ));
    }
    if settings.limits_drop_unread {
        ok.push(format!(
            "bridge `{bridge}`: JetStream stream {stream} drops messages at its limits whether or not this bridge read them (retention = limits, discard = old); size the limits above the longest consumer outage"
        ));
    }
    (ok, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_renders_one_token_per_column_and_a_filter_captures_it_or_not() {
        assert_eq!(subject_pattern("audit.{aggregate_type}"), "audit.*");
        assert_eq!(subject_pattern("audit.{owner}.{aggregate_type}"), "audit.*.*");
        assert!(captured("audit.*", "audit.>"));
        assert!(captured("audit.*", "audit.*"));
        assert!(captured("audit.user", "audit.*"));
        assert!(!captured("audit.*", "audit.user"), "a literal does not capture every value");
        assert!(!captured("audit.*.*", "audit.*"));
        assert!(!captured("orders.*", "audit.>"));
        assert!(captured("a.b.c", ">"));
    }

    #[test]
    fn a_short_duplicate_window_and_an_uncaptured_subject_are_problems_naming_the_key() {
        let config = crate::config::load_str(
            "[database]\nurl = \"postgres://u@h/db\"\n[nats]\nurl = \"nats://h:4222\"\n[[relay]]\nname = \"r\"\nbroker = \"nats\"\nstream = \"audit.{aggregate_type}\"\n",
        )
        .unwrap();
        let relay = &config.relays[0];
        let good = StreamSettings {
            subjects: vec!["audit.>".into()],
            duplicate_window: Duration::from_secs(3600),
            replicas: 3,
            limits_drop_unread: false,
            max_message_bytes: None,
        };
        let (_, problems) = review("AUDIT", &good, relay);
        assert!(problems.is_empty(), "{problems:?}");
        let short = StreamSettings { duplicate_window: Duration::from_secs(1), ..good.clone() };
        let (_, problems) = review("AUDIT", &short, relay);
        assert!(
            problems.iter().any(|p| p.starts_with("nats.stream") && p.contains("duplicate_window")),
            "{problems:?}"
        );
        let elsewhere = StreamSettings { subjects: vec!["orders.>".into()], ..good.clone() };
        let (_, problems) = review("AUDIT", &elsewhere, relay);
        assert!(problems.iter().any(|p| p.contains("relay `r`.stream")), "{problems:?}");
        let small = StreamSettings { max_message_bytes: Some(4096), ..good.clone() };
        let (_, problems) = review("AUDIT", &small, relay);
        assert!(problems.iter().any(|p| p.starts_with("relay `r`.entry_max_bytes")), "{problems:?}");
        let large = StreamSettings { max_message_bytes: Some(relay.entry_max_bytes), ..good };
        assert!(review("AUDIT", &large, relay).1.is_empty());
    }
}
