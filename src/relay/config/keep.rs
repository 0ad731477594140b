//! What a relay keeps, unless told otherwise: nothing grows without bound by default. A Redis
//! relay trims its streams below what every consumer group has acknowledged (a stream no group
//! reads yet is kept whole: nothing vouches for its entries), and a relay on the reference
//! outbox deletes delivered rows after 7 days (replays reach that far back). An outbox of the
//! service's own layout (`[relay.sql]`), `settle = "delete"` and a partitioned outbox keep
//! their own ways. `[relay.trim] acknowledged = false` and `[relay.retention] enabled = false`
//! keep everything.

use super::{RelayConfig, RetentionConfig, SettleMode, TrimConfig};
use crate::broker::Broker;

impl RelayConfig {
    /// Fills in what the relay keeps by default, after validation (which saw only what the file
    /// says).
    pub(crate) fn keep_by_default(&mut self) {
        self.trim = match self.trim.take() {
            None if self.broker == Broker::Redis => Some(TrimConfig::acknowledged_by_default()),
            Some(trim) if trim.off() => None,
            trim => trim,
        };
        let reference = self.sql.is_empty() && self.settle == SettleMode::MarkDelivered && self.partitions.is_none();
        self.retention = match self.retention.take() {
            None if reference => Some(RetentionConfig::default()),
            Some(retention) if !retention.enabled => None,
            retention => retention,
        };
    }
}

/// What the file says of a relay's `trim` and `retention` that cannot hold, into `errors`.
pub(super) fn retention_problems(relay: &RelayConfig, path: &str, errors: &mut Vec<String>) {
    if let Some(trim) = &relay.trim {
        let set =
            usize::from(trim.maxlen.is_some()) + usize::from(trim.min_age.is_some()) + usize::from(trim.acknowledged());
        if set != 1 && !trim.off() {
            errors.push(format!(
                "{path}.trim: set exactly one of maxlen, min_age, acknowledged = true (acknowledged = false alone keeps every entry)"
            ));
        }
        if trim.maxlen == Some(0) {
            errors.push(format!("{path}.trim.maxlen must be > 0"));
        }
        if trim.interval.is_zero() {
            errors.push(format!("{path}.trim.interval must be > 0"));
        }
    }
    if let Some(retention) = &relay.retention {
        if retention.delivered_after.is_zero() || retention.interval.is_zero() {
            errors.push(format!("{path}.retention: delivered_after and interval must be > 0"));
        }
        if !(1..=100_000).contains(&retention.batch) {
            errors.push(format!("{path}.retention.batch must be between 1 and 100000"));
        }
    }
}

/// What a relay keeps, in words, for `check`.
pub(crate) fn described(relay: &RelayConfig) -> String {
    let default = |d: bool| if d { " (default)" } else { "" };
    let rows = match &relay.retention {
        Some(r) => format!(
            "deletes delivered rows after {}{}",
            humantime::format_duration(r.delivered_after),
            default(r.defaulted)
        ),
        None if relay.settle == SettleMode::Delete => "deletes each row when it is delivered".to_owned(),
        None if relay.partitions.is_some() => "drops old partitions ([relay.partitions])".to_owned(),
        None => "keeps delivered rows for ever (set [relay.retention])".to_owned(),
    };
    let entries = match (&relay.trim, relay.broker) {
        (_, Broker::Nats) => "the JetStream stream's limits decide what it keeps".to_owned(),
        (_, Broker::Kafka) => "the topics' retention decides what they keep".to_owned(),
        (Some(t), _) if t.acknowledged() => format!(
            "trims its streams below what every group acknowledged, every {}{}",
            humantime::format_duration(t.interval),
            default(t.defaulted)
        ),
        (Some(t), _) => match (t.maxlen, t.min_age) {
            (Some(n), _) => format!("trims its streams to about {n} entries"),
            (_, Some(age)) => format!("trims entries older than {}", humantime::format_duration(age)),
            _ => "keeps every stream entry".to_owned(),
        },
        (None, _) => "keeps every stream entry for ever ([relay.trim] acknowledged = false)".to_owned(),
    };
    format!("relay `{}`: {rows}; {entries}", relay.name)
}

#[cfg(test)]
mod tests {
    use crate::config::load_str;

    const BASE: &str = "[database]\nurl = \"postgres://x@h/db\"\n";

    #[test]
    fn a_relay_trims_acknowledged_entries_and_deletes_old_delivered_rows_unless_told_otherwise() {
        let config = load_str(&format!("{BASE}[[relay]]\nname = \"a\"\n")).unwrap();
        let relay = &config.relays[0];
        assert!(relay.trim.as_ref().is_some_and(|t| t.acknowledged() && t.defaulted));
        assert_eq!(relay.retention.as_ref().map(|r| r.delivered_after.as_secs()), Some(7 * 24 * 3600));
        let text = super::described(relay);
        assert!(text.contains("after 7days (default)") && text.contains("every 30s (default)"), "{text}");

        let off = "[[relay]]\nname = \"a\"\n[relay.trim]\nacknowledged = false\n[relay.retention]\nenabled = false\n";
        let config = load_str(&format!("{BASE}{off}")).unwrap();
        assert!(config.relays[0].trim.is_none() && config.relays[0].retention.is_none());
        assert!(super::described(&config.relays[0]).contains("keeps delivered rows for ever"));

        let own = "[[relay]]\nname = \"a\"\n[relay.sql]\nclaim = \"SELECT 1\"\n";
        let config = load_str(&format!("{BASE}{own}")).unwrap_or_else(|e| panic!("{e}"));
        assert!(config.relays[0].retention.is_none(), "an outbox of its own layout keeps its rows");
        let deleting = load_str(&format!("{BASE}[[relay]]\nname = \"a\"\nsettle = \"delete\"\n")).unwrap();
        assert!(deleting.relays[0].retention.is_none());
    }

    #[test]
    fn trim_settings_that_contradict_each_other_are_refused() {
        let both = "[[relay]]\nname = \"a\"\n[relay.trim]\nacknowledged = true\nmaxlen = 10\n";
        let error = format!("{}", load_str(&format!("{BASE}{both}")).unwrap_err());
        assert!(error.contains("trim"), "{error}");
    }
}
