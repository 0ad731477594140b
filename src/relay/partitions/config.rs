//! `[relay.partitions]`: housekeeping of a time-partitioned outbox (`handoff migrate --partitioned`).

use std::time::Duration;

use serde::Deserialize;

/// `[relay.partitions]`: the relay keeps partitions of its table created ahead of time and drops
/// old ones whose rows are all delivered, instead of deleting delivered rows one by one.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PartitionsConfig {
    /// The span of `created_at` each partition covers, aligned to UTC (a day starts at
    /// midnight UTC). Whole hours, from "1h" to "31d". Default: "1d".
    #[serde(default = "defaults::every", with = "humantime_serde")]
    pub every: Duration,
    /// Partitions kept created after the current one, so inserts never wait for housekeeping.
    /// Default: 3.
    #[serde(default = "defaults::ahead")]
    pub ahead: u32,
    /// A partition is dropped this long after its span ended, once every row in it is DELIVERED.
    ///
    /// PENDING, IN_FLIGHT or DEAD rows make the drop wait, as does a row delivered within this
    /// long.
    #[serde(with = "humantime_serde")]
    pub drop_after: Duration,
    /// Pause between housekeeping passes. Default: "10m".
    #[serde(default = "defaults::interval", with = "humantime_serde")]
    pub interval: Duration,
}

impl PartitionsConfig {
    /// Problems with the values, each naming its key under `path`.
    pub(crate) fn problems(&self, path: &str) -> Vec<String> {
        let mut errors = Vec::new();
        let hour = Duration::from_secs(3600);
        if self.every < hour
            || self.every > hour * 24 * 31
            || !self.every.as_secs().is_multiple_of(3600)
            || self.every.subsec_nanos() != 0
        {
            errors.push(format!("{path}.partitions.every must be whole hours between 1h and 31d"));
        }
        if !(1..=366).contains(&self.ahead) {
            errors.push(format!("{path}.partitions.ahead must be between 1 and 366"));
        }
        if self.drop_after.is_zero() || self.interval.is_zero() {
            errors.push(format!("{path}.partitions: drop_after and interval must be > 0"));
        }
        errors
    }
}

mod defaults {
    use std::time::Duration;

    pub(super) fn every() -> Duration {
        Duration::from_secs(86_400)
    }
    pub(super) fn ahead() -> u32 {
        3
    }
    pub(super) fn interval() -> Duration {
        Duration::from_secs(600)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::load_str;

    fn errors(url: &str, relay: &str) -> String {
        let toml = format!(
            "[database]\nurl = \"{url}\"\n[redis]\nurl = \"redis://127.0.0.1\"\n[[relay]]\nname = \"r\"\n{relay}"
        );
        match load_str(&toml) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    const PG: &str = "postgres://db/app";

    #[test]
    fn daily_partitions_with_a_drop_after_load() {
        assert_eq!(errors(PG, "[relay.partitions]\ndrop_after = \"7d\"\n"), "");
    }

    #[test]
    fn drop_after_is_required_and_spans_are_whole_hours() {
        assert!(errors(PG, "[relay.partitions]\n").contains("drop_after"));
        let e = errors(PG, "[relay.partitions]\nevery = \"90m\"\ndrop_after = \"7d\"\n");
        assert!(e.contains("relay[0].partitions.every must be whole hours"), "{e}");
        let e = errors(PG, "[relay.partitions]\nahead = 0\ndrop_after = \"7d\"\n");
        assert!(e.contains("relay[0].partitions.ahead"), "{e}");
    }

    #[test]
    fn partitions_and_row_retention_are_one_or_the_other() {
        let e = errors(PG, "[relay.partitions]\ndrop_after = \"7d\"\n[relay.retention]\ndelivered_after = \"7d\"\n");
        assert!(e.contains("choose one"), "{e}");
    }

    #[test]
    fn a_partitioned_outbox_on_mariadb_is_refused() {
        let e = errors("mysql://db/app", "[relay.partitions]\ndrop_after = \"7d\"\n");
        assert!(e.contains("relay[0].partitions: a partitioned outbox needs Postgres"), "{e}");
    }
}
