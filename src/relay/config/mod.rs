//! `[[relay]]`: one outbox table relayed to a broker (Redis Streams, NATS JetStream or Kafka).

use std::time::Duration;

use serde::Deserialize;

use crate::relay::outbox::overrides::SqlOverrides;
use crate::runtime::loop_config::{ClaimLoopConfig, RelayLoop};

pub(crate) mod keep;
mod problems;

/// `[[relay]]`: one outbox table relayed to a broker.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    /// Name in metrics labels, logs and the claimant id. Required, unique.
    pub name: String,
    /// Table the default statements use. Default: "audit_outbox".
    #[serde(default = "defaults::table")]
    pub table: String,
    /// Written into every entry's `owner` field so consumers can check provenance. Default: the relay name.
    pub owner: Option<String>,
    /// Where the relay publishes: `redis`, `nats` (`[nats]`; `stream` is a subject template) or
    /// `kafka` (`[kafka]`; a topic template). Default: "redis".
    #[serde(default)]
    pub broker: crate::broker::Broker,
    /// Stream key template over claim columns, e.g. "audit:{aggregate_type}". Default: "audit:{aggregate_type}".
    #[serde(default = "defaults::stream")]
    pub stream: String,
    /// How the relay's claim loops run: `batch_size`, `concurrency`, `poll_interval`, `lease`,
    /// `max_attempts`, `backoff`, `outage_backoff`, `claim` (written in `[[relay]]` itself).
    #[serde(default)]
    pub claim_loop: ClaimLoopConfig<RelayLoop>,
    /// Times a row's lease may expire (its claimant died holding it) before it turns DEAD. Default: 3.
    #[serde(default = "defaults::max_expired_claims")]
    pub max_expired_claims: u32,
    /// `mark_delivered` keeps delivered rows (status DELIVERED); `delete` removes them. Default: "mark_delivered".
    #[serde(default)]
    pub settle: SettleMode,
    /// Stream trimming: one of `maxlen`, `min_age`, `acknowledged`; `[relay.trim] acknowledged =
    /// false` keeps every entry. Default on Redis: `acknowledged` every 30 s (a stream no group
    /// reads yet is kept whole).
    pub trim: Option<TrimConfig>,
    /// Wake up on LISTEN/NOTIFY instead of waiting for the next poll. Default: off.
    pub notify: Option<NotifyConfig>,
    /// Append each event at most once per window, even across a crash between append and
    /// settle (an atomic Redis script per event). Default: off.
    pub dedupe: Option<DedupeConfig>,
    /// Events with the same key reach the stream in commit order. Default: off.
    pub ordering: Option<OrderingConfig>,
    /// Purge delivered rows after an age. Default: delivered rows are deleted after 7 days on
    /// the reference outbox (no `[relay.sql]` statements, `settle = "mark_delivered"`, no
    /// `partitions`); kept otherwise. `[relay.retention] enabled = false` keeps them.
    pub retention: Option<RetentionConfig>,
    /// Keep a time-partitioned outbox's partitions: create ahead, drop old delivered ones.
    /// Default: off (a plain table).
    pub partitions: Option<crate::relay::partitions::config::PartitionsConfig>,
    /// Settle a batch only once its appends are on replicas (`WAIT`) and/or in the AOF
    /// (`WAITAOF`). Default: off (settle when Redis acknowledged the append).
    pub durability: Option<DurabilityConfig>,
    /// Notice when Redis lost appends it had acknowledged, and re-drive the affected rows.
    /// Default: on.
    #[serde(default)]
    pub broker_loss: BrokerLossConfig,
    /// Extra entry fields after the built-in ones, in the order written: name → template over
    /// claim columns (`"{tenant_id}"`) or a constant. Default: none.
    #[serde(default, deserialize_with = "crate::relay::ordered::map")]
    pub fields: crate::relay::ordered::Fields,
    /// The whole entry, field by field: name → template; one field must be `"{event_id}"`. Default:
    /// the built-in layout.
    ///
    /// A template that is one column (`"{payload}"`) copies it and leaves the field out when it is
    /// NULL.
    #[serde(default, deserialize_with = "crate::relay::ordered::map")]
    pub envelope: crate::relay::ordered::Fields,
    /// Entries as CloudEvents 1.0: `source` (required) and `mode`. Default: off.
    ///
    /// Loading turns it into the `envelope` it stands for.
    pub cloudevents: Option<crate::relay::cloudevents::CloudEventsConfig>,
    /// Largest `payload` column the relay appends, in bytes; a larger row turns DEAD with reason
    /// `too_large` and is never appended. Default: 262144 (the bridge's `payload_max_bytes`, so
    /// a row a bridge would refuse never travels).
    #[serde(default = "defaults::payload_max_bytes")]
    pub payload_max_bytes: usize,
    /// Largest entry the relay appends (the stream key and every field name and value), in
    /// bytes; a larger row turns DEAD with reason `too_large`. Default: 1048576.
    #[serde(default = "defaults::entry_max_bytes")]
    pub entry_max_bytes: usize,
    /// Statement overrides; absent ones use the defaults for the reference schema.
    #[serde(default)]
    pub sql: SqlOverrides,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SettleMode {
    #[default]
    MarkDelivered,
    Delete,
}

/// `[relay.trim]`: exactly one of `maxlen`, `min_age`, `acknowledged`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TrimConfig {
    /// `XADD … MAXLEN ~ n`: keep about this many entries (drops unconsumed ones when consumers lag).
    pub maxlen: Option<u64>,
    /// `XADD … MINID ~ <now − age>`: drop entries older than this (by the relay's clock).
    #[serde(default, with = "humantime_serde::option")]
    pub min_age: Option<Duration>,
    /// Trim, every `interval`, below what every consumer group has delivered and acknowledged;
    /// `false` alone keeps every entry.
    pub acknowledged: Option<bool>,
    /// How often the `acknowledged` trim runs. Default: "30s".
    #[serde(default = "defaults::trim_interval", with = "humantime_serde")]
    pub interval: Duration,
    /// Set by handoff, not read from the file: the relay trims by default.
    #[serde(skip)]
    pub defaulted: bool,
}

impl TrimConfig {
    /// The default on Redis: below what every group acknowledged, every 30 s.
    pub(crate) fn acknowledged_by_default() -> Self {
        Self {
            maxlen: None,
            min_age: None,
            acknowledged: Some(true),
            interval: defaults::trim_interval(),
            defaulted: true,
        }
    }

    /// Whether the `acknowledged` trim is on.
    pub(crate) fn acknowledged(&self) -> bool {
        self.acknowledged == Some(true)
    }

    /// `acknowledged = false` and nothing else: keep every entry.
    pub(crate) fn off(&self) -> bool {
        self.acknowledged == Some(false) && self.maxlen.is_none() && self.min_age.is_none()
    }
}

/// `[relay.notify]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// Channel the outbox trigger notifies (`migrations/postgres/0014`). Default: "handoff_outbox".
    #[serde(default = "defaults::channel")]
    pub channel: String,
}

/// `[relay.dedupe]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DedupeConfig {
    /// How long an appended event id is remembered; keep it well above `lease`. Default: "1h".
    #[serde(default = "defaults::dedupe_window", with = "humantime_serde")]
    pub window: Duration,
    /// Prefix of the marker keys (`<prefix>{<stream hash tag>}:<event_id>`). Default: "handoff:dedupe:".
    #[serde(default = "defaults::dedupe_prefix")]
    pub key_prefix: String,
}

/// `[relay.ordering]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OrderingConfig {
    /// A failing or DEAD event: `hold` its key until it is delivered or re-driven, or `park` it
    /// and let the next event of the key go. Default: "hold".
    #[serde(default)]
    pub on_failure: OnFailure,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    #[default]
    Hold,
    Park,
}

/// `[relay.retention]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// `false` keeps delivered rows for ever. Default: true.
    #[serde(default = "defaults::yes")]
    pub enabled: bool,
    /// Delivered rows older than this (by `delivered_at`) are deleted. Default: "7d".
    #[serde(default = "defaults::seven_days", with = "humantime_serde")]
    pub delivered_after: Duration,
    /// Rows per delete statement; small batches keep locks short. Default: 1000.
    #[serde(default = "defaults::purge_batch")]
    pub batch: u32,
    /// Pause between purge passes. Default: "1m".
    #[serde(default = "defaults::purge_interval", with = "humantime_serde")]
    pub interval: Duration,
    /// Set by handoff, not read from the file: the relay purges by default.
    #[serde(skip)]
    pub defaulted: bool,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            delivered_after: defaults::seven_days(),
            batch: defaults::purge_batch(),
            interval: defaults::purge_interval(),
            defaulted: true,
        }
    }
}

/// `[relay.durability]`: what "appended" must mean before a row is settled.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DurabilityConfig {
    /// Replicas that must hold the batch's appends (`WAIT n`). Default: 0.
    #[serde(default)]
    pub replicas: u32,
    /// The appends must be fsynced to the primary's AOF (and, with `replicas`, to that many
    /// replicas' AOFs): `WAITAOF`, Redis ≥ 7.2. Default: false.
    #[serde(default)]
    pub aof: bool,
    /// How long to wait; a batch whose gate is not met in time is released, not failed.
    /// Default: "1s".
    #[serde(default = "defaults::gate_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

/// `[relay.broker_loss]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BrokerLossConfig {
    /// `false` turns the watch off (`handoff verify` still works). Default: true.
    pub enabled: bool,
    /// How often the relay looks for signs of lost writes (a restarted or failed-over server, a
    /// stream gone or with fewer entries ever added than before). Default: "10s".
    #[serde(with = "humantime_serde")]
    pub check_interval: Duration,
    /// After a sign of loss, how far before the last clean check the rows' entries are looked up.
    /// Default: "30s".
    ///
    /// Or since the oldest entry a consumer group still needed, if longer; all of `max_window`
    /// when a Kafka topic or NATS stream is gone, made again or cut below what the relay
    /// appended (no group's floor bounds what matters there).
    #[serde(with = "humantime_serde")]
    pub lookback: Duration,
    /// The longest window one verification looks at. Default: "1h".
    #[serde(with = "humantime_serde")]
    pub max_window: Duration,
    /// Move rows whose entries are missing back to PENDING (false: detect and alert only).
    /// Default: true.
    pub repair: bool,
    /// Delivered rows read and looked up at a time, whatever the window (about 600 bytes of
    /// memory each). Default: 10000.
    pub page_rows: usize,
}

impl Default for BrokerLossConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            check_interval: Duration::from_secs(10),
            lookback: Duration::from_secs(30),
            max_window: Duration::from_secs(3600),
            repair: true,
            page_rows: 10_000,
        }
    }
}

impl RelayConfig {
    /// Replaces `[relay.cloudevents]` by the envelope it stands for; what clashes with it, each
    /// naming its key, instead (`debezium_layout`: `[kafka] layout = "debezium"`, which sends no
    /// header but the event id).
    pub(crate) fn expand_cloudevents(&mut self, debezium_layout: bool) -> Vec<String> {
        let Some(events) = &self.cloudevents else { return Vec::new() };
        let path = format!("relay `{}`", self.name);
        let mut clashes = Vec::new();
        for (key, set) in [("envelope", !self.envelope.is_empty()), ("fields", !self.fields.is_empty())] {
            if set {
                clashes.push(format!("{path}.{key}: not with cloudevents, which lays out the whole entry"));
            }
        }
        if self.owner.is_some() {
            clashes.push(format!("{path}.owner: not with cloudevents (its `source` names the producer)"));
        }
        if self.broker == crate::broker::Broker::Kafka && debezium_layout {
            clashes.push(format!(
                "{path}.cloudevents: kafka.layout = \"debezium\" sends no header but the event id; CloudEvents needs its own"
            ));
        }
        if events.source.trim().is_empty() || events.source.chars().any(char::is_control) {
            clashes.push(format!("{path}.cloudevents.source: a URI reference, e.g. \"/services/orders\""));
        }
        if clashes.is_empty() {
            self.envelope = crate::relay::cloudevents::envelope(events, self.broker);
        }
        clashes
    }

    /// On Kafka, the entry field that is the message key instead of `[kafka] key_field`, and
    /// whether it is also a header: a CloudEvents relay's `partitionkey` (the aggregate id).
    pub(crate) fn kafka_key(&self) -> Option<(&'static str, bool)> {
        self.cloudevents.as_ref().map(crate::relay::cloudevents::CloudEventsConfig::kafka_key)
    }

    /// Whether the reference claims return `created_at` (as RFC 3339 text) for the relay's
    /// templates: only when one names it, as CloudEvents' `time` does; others skip the work.
    pub(crate) fn claims_created_at(&self) -> bool {
        let templates = self.envelope.iter().chain(&self.fields).map(|(_, t)| t.as_str());
        templates
            .chain([self.stream.as_str()])
            .any(|text| crate::template::Template::parse(text).is_ok_and(|t| t.mentions("created_at")))
    }

    /// The `owner` entry field: configured, or the relay name.
    pub(crate) fn owner(&self) -> &str {
        self.owner.as_deref().unwrap_or(&self.name)
    }

    /// The entry field that carries the row's payload, which a broker with a message body (NATS)
    /// sends as the body: `payload` in the built-in layout; with `[relay.envelope]`, the first
    /// field whose template is the `payload` column alone; none when no field is.
    pub(crate) fn payload_field(&self) -> Option<&str> {
        // CloudEvents: the payload, or in structured mode the whole event, is `payload`.
        if self.envelope.is_empty() || self.cloudevents.is_some() {
            return Some("payload");
        }
        self.envelope.iter().find(|(_, template)| template.trim() == "{payload}").map(|(name, _)| name.as_str())
    }
}

mod defaults {
    use std::time::Duration;

    pub(super) fn table() -> String {
        "audit_outbox".into()
    }
    pub(super) fn stream() -> String {
        "audit:{aggregate_type}".into()
    }
    pub(super) fn max_expired_claims() -> u32 {
        3
    }
    pub(super) fn trim_interval() -> Duration {
        Duration::from_secs(30)
    }
    pub(super) fn channel() -> String {
        "handoff_outbox".into()
    }
    pub(super) fn dedupe_window() -> Duration {
        Duration::from_secs(3600)
    }
    pub(super) fn dedupe_prefix() -> String {
        "handoff:dedupe:".into()
    }
    pub(super) fn purge_batch() -> u32 {
        1000
    }
    pub(super) fn seven_days() -> Duration {
        Duration::from_secs(7 * 24 * 3600)
    }
    pub(super) fn purge_interval() -> Duration {
        Duration::from_secs(60)
    }
    pub(super) fn gate_timeout() -> Duration {
        Duration::from_secs(1)
    }
    pub(super) fn yes() -> bool {
        true
    }
    pub(super) fn payload_max_bytes() -> usize {
        256 * 1024
    }
    pub(super) fn entry_max_bytes() -> usize {
        1024 * 1024
    }
}

#[cfg(test)]
mod tests {
    fn relay(extra: &str) -> super::RelayConfig {
        let toml = format!("[database]\nurl = \"postgres://x@localhost/db\"\n[[relay]]\nname = \"auth\"\n{extra}");
        crate::config::load_str(&toml).unwrap().relays.remove(0)
    }

    #[test]
    fn the_payload_field_is_payload_or_the_envelope_field_that_copies_the_column() {
        assert_eq!(relay("").payload_field(), Some("payload"));
        let renamed = relay("[relay.envelope]\nid = \"{event_id}\"\ndata = \"{payload}\"\n");
        assert_eq!(renamed.payload_field(), Some("data"));
        let wrapped = relay("[relay.envelope]\nid = \"{event_id}\"\ndata = \"v1:{payload}\"\n");
        assert_eq!(wrapped.payload_field(), None, "a template that is more than the column is not the payload");
    }

    fn errors(relay_extra: &str) -> Vec<String> {
        let toml = format!(
            "[database]\nurl = \"postgres://x@localhost/db\"\n[redis]\nurl = \"redis://localhost\"\ncommand_timeout = \"2s\"\n\
             [[relay]]\nname = \"auth\"\n{relay_extra}"
        );
        match crate::config::load_str(&toml) {
            Ok(_) => Vec::new(),
            Err(e) => e.to_string().lines().map(str::to_owned).collect(),
        }
    }

    #[test]
    fn a_dedupe_window_shorter_than_twice_the_lease_is_refused_naming_it() {
        let short = errors("lease = \"30s\"\n[relay.dedupe]\nwindow = \"59s\"\n");
        assert!(
            short.iter().any(|e| e.contains("relay[0].dedupe.window must be at least twice the lease")),
            "{short:?}"
        );
        assert_eq!(errors("lease = \"30s\"\n[relay.dedupe]\nwindow = \"60s\"\n"), Vec::<String>::new());
    }

    #[test]
    fn a_locked_lease_must_outlast_the_command_timeout_and_the_durability_gate_together() {
        // 2 s of command timeout + 3 s of gate: a 4 s lease outlasts each alone, not both.
        let gated = errors("claim = \"locked\"\nlease = \"4s\"\n[relay.durability]\nreplicas = 1\ntimeout = \"3s\"\n");
        assert!(
            gated.iter().any(|e| e.contains("must be longer than redis.command_timeout + durability.timeout (5s)")),
            "{gated:?}"
        );
        let enough = "claim = \"locked\"\nlease = \"6s\"\n[relay.durability]\nreplicas = 1\ntimeout = \"3s\"\n";
        assert_eq!(errors(enough), Vec::<String>::new());
    }
}
