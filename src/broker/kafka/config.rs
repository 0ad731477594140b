//! `[kafka]`: the Kafka cluster a relay may publish to (`[[relay]] broker = "kafka"`): its
//! bootstrap servers, TLS (`[kafka.tls]`, verified by default), SASL with the password read
//! from a file, how an entry becomes a message, and the few client properties an operator may
//! tune. Everything that makes a produce safe (idempotence, `acks=all`, the in-flight bound)
//! is handoff's and cannot be overridden.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::tls::config::{TlsConfig, TlsMode, check_shape};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// `host:port`, comma-separated: the brokers the client asks for the cluster's metadata
    /// first (it learns the rest).
    pub bootstrap_servers: String,
    /// TLS; any key, or `[kafka.sasl]`: on, `verify-full` unless `mode` says otherwise. No
    /// `server_name` (the advertised host is checked). Default: off.
    ///
    /// `mode = "disable"` is the only way to send SASL in the clear.
    #[serde(default)]
    pub tls: TlsConfig,
    /// SASL: `mechanism` (`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`), `user`, `password_file`.
    pub sasl: Option<SaslConfig>,
    /// The entry field whose value is the message key, so that one key's events land on one
    /// partition in order. An entry without it is sent without a key. Default: "aggregate_id".
    #[serde(default = "defaults::key_field")]
    pub key_field: String,
    /// The header that carries the event id (consumers dedupe on it; `handoff verify` checks
    /// it). Default: "event_id" ("id" with `layout = "debezium"`).
    pub event_id_header: Option<String>,
    /// `handoff`: every entry field but the payload a header. `debezium`: as Debezium's outbox
    /// event router, the event id as header `id` and no other. Default: "handoff".
    ///
    /// With `debezium`, topic and key come from the relay's `stream` and `key_field`, as there
    /// `outbox.event.{aggregate_type}` and `aggregate_id`.
    #[serde(default)]
    pub layout: Layout,
    /// How long the client waits for a broker's answer to a metadata or offset request.
    /// Default: "10s".
    #[serde(default = "defaults::timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// How long a message may wait to be stored; past it the row goes back to the outbox, no
    /// attempt counted. Default: "30s".
    ///
    /// librdkafka retries within it, keeping order.
    #[serde(default = "defaults::delivery_timeout", with = "humantime_serde")]
    pub delivery_timeout: Duration,
    /// librdkafka tuning: batching, compression, buffers, message size, timeouts, backoffs, client
    /// naming; others are refused. Default: `linger.ms = 5`, keep-alive on, `client.id` `handoff`
    /// (a bridge's consumer: its instance name).
    ///
    /// The list is `TUNABLE` (the error lists it). Fixed whatever is set:
    /// `enable.idempotence=true`, `acks=all`, `max.in.flight.requests.per.connection=5`,
    /// `message.timeout.ms` = `delivery_timeout`.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// What a message carries besides its key and value.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Every entry field but the payload as a header, the event id in its own.
    #[default]
    Handoff,
    /// As Debezium's outbox event router writes it: the event id as the only header.
    Debezium,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SaslConfig {
    /// How the client proves who it is.
    pub mechanism: SaslMechanism,
    /// The user name.
    pub user: String,
    /// A file holding the password (a mounted secret; never logged).
    pub password_file: PathBuf,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    /// Its name in librdkafka's `sasl.mechanism`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// The librdkafka properties `[kafka.properties]` may set: batching, compression, buffers,
/// timeouts of the connection and naming. Not the ones a delivery guarantee rests on.
pub(crate) const TUNABLE: &[&str] = &[
    "batch.num.messages",
    "batch.size",
    "broker.address.family",
    "client.id",
    "client.rack",
    "compression.level",
    "compression.type",
    "connections.max.idle.ms",
    "linger.ms",
    "message.max.bytes",
    "metadata.max.age.ms",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.messages",
    "reconnect.backoff.max.ms",
    "reconnect.backoff.ms",
    "request.timeout.ms",
    "socket.connection.setup.timeout.ms",
    "socket.keepalive.enable",
    "topic.metadata.refresh.interval.ms",
];

impl KafkaConfig {
    /// A plain connection to `bootstrap` with the defaults (for tests and the benchmark).
    pub fn new(bootstrap: &str) -> Self {
        Self {
            bootstrap_servers: bootstrap.to_owned(),
            tls: TlsConfig::default(),
            sasl: None,
            key_field: defaults::key_field(),
            event_id_header: None,
            layout: Layout::Handoff,
            timeout: defaults::timeout(),
            delivery_timeout: defaults::delivery_timeout(),
            properties: BTreeMap::new(),
        }
    }

    /// The header that carries the event id.
    pub(crate) fn event_id_header(&self) -> &str {
        match (&self.event_id_header, self.layout) {
            (Some(name), _) => name,
            (None, Layout::Handoff) => "event_id",
            (None, Layout::Debezium) => "id",
        }
    }

    /// Whether the connection is TLS: any `[kafka.tls]` key or SASL, unless `mode = "disable"`.
    pub(crate) fn tls_required(&self) -> bool {
        match self.tls.mode {
            Some(TlsMode::Disable) => false,
            Some(_) => true,
            None => self.tls.is_set() || self.sasl.is_some(),
        }
    }

    /// The TLS mode in force when [`tls_required`](Self::tls_required).
    pub(crate) fn tls_mode(&self) -> TlsMode {
        self.tls.mode_or(TlsMode::VerifyFull)
    }

    /// What is wrong with the section, each naming its key.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let servers: Vec<&str> = self.bootstrap_servers.split(',').map(str::trim).collect();
        for server in &servers {
            let port = server.rsplit_once(':').and_then(|(host, port)| (!host.is_empty()).then_some(port));
            if server.contains("://") || server.contains('@') || port.and_then(|p| p.parse::<u16>().ok()).is_none() {
                problems.push(format!("kafka.bootstrap_servers: `{server}` is not host:port"));
            }
        }
        if self.tls_required() {
            problems.extend(check_shape("kafka.tls", &self.tls, self.tls_mode()));
            if self.tls.server_name.is_some() {
                problems.push("kafka.tls.server_name: librdkafka checks the broker's advertised host name; it cannot check another".into());
            }
            if self.tls_mode() == TlsMode::Prefer {
                problems.push("kafka.tls.mode: prefer is not offered (librdkafka speaks TLS or does not)".into());
            }
        } else if self.tls.ca_file.is_some() || self.tls.cert_file.is_some() {
            problems.push("kafka.tls: certificates are given but mode is disable".into());
        }
        for (name, key) in [(self.key_field.as_str(), "key_field"), (self.event_id_header(), "event_id_header")] {
            if name.is_empty() {
                problems.push(format!("kafka.{key} must not be empty"));
            }
        }
        if self.timeout.is_zero() || self.delivery_timeout.is_zero() {
            problems.push("kafka.timeout and kafka.delivery_timeout must be > 0".into());
        }
        for name in self.properties.keys().filter(|name| !TUNABLE.contains(&name.as_str())) {
            problems.push(format!(
                "kafka.properties.{name}: not one handoff passes through (those are: {}); the delivery settings are handoff's own",
                TUNABLE.join(", ")
            ));
        }
        problems
    }
}

mod defaults {
    use std::time::Duration;

    pub(super) fn key_field() -> String {
        "aggregate_id".into()
    }

    pub(super) fn timeout() -> Duration {
        Duration::from_secs(10)
    }

    pub(super) fn delivery_timeout() -> Duration {
        Duration::from_secs(30)
    }
}

/// Why `topic` (rendered from a row's values) cannot be a Kafka topic: the broker's own rule
/// (1 to 249 of `[A-Za-z0-9._-]`, not `.` or `..`). The row's data: it is refused, never sent.
pub(crate) fn topic_problem(topic: &str) -> Option<String> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let bad = topic.is_empty() || topic.len() > 249 || topic == "." || topic == ".." || !topic.chars().all(legal);
    bad.then(|| format!("topic `{}` is not a Kafka topic name (1 to 249 of A-Z a-z 0-9 . _ -)", topic.escape_debug()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_servers_are_host_port_without_credentials() {
        assert!(KafkaConfig::new("127.0.0.1:9092").problems().is_empty());
        assert!(KafkaConfig::new("k1.internal:9093, k2.internal:9093").problems().is_empty());
        for bad in ["kafka://k1:9092", "user:pw@k1:9092", "k1", ":9092", "k1:http"] {
            let problems = KafkaConfig::new(bad).problems();
            assert!(problems.iter().any(|p| p.starts_with("kafka.bootstrap_servers")), "{bad}: {problems:?}");
        }
    }

    #[test]
    fn sasl_means_verified_tls_unless_tls_is_disabled_by_name() {
        let sasl =
            SaslConfig { mechanism: SaslMechanism::ScramSha512, user: "relay".into(), password_file: "/p".into() };
        let mut config = KafkaConfig { sasl: Some(sasl), ..KafkaConfig::new("k1:9093") };
        assert!(config.tls_required());
        assert_eq!(config.tls_mode(), TlsMode::VerifyFull);
        config.tls.mode = Some(TlsMode::Disable);
        assert!(!config.tls_required(), "SASL in the clear only when asked for by name");
        assert!(!KafkaConfig::new("k1:9092").tls_required());
    }

    #[test]
    fn only_tuning_properties_pass_through() {
        let mut config = KafkaConfig::new("k1:9092");
        config.properties.insert("linger.ms".into(), "20".into());
        assert!(config.problems().is_empty());
        config.properties.insert("enable.idempotence".into(), "false".into());
        config.properties.insert("acks".into(), "1".into());
        let problems = config.problems();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("kafka.properties.acks: not one handoff passes through"), "{problems:?}");
    }

    #[test]
    fn a_topic_is_what_the_broker_accepts() {
        for ok in ["audit.order", "audit_order-1", "A"] {
            assert!(topic_problem(ok).is_none(), "{ok}");
        }
        let long = "a".repeat(250);
        for bad in ["", ".", "..", "audit order", "audit:order", "audit/x", long.as_str()] {
            assert!(topic_problem(bad).is_some(), "{bad}");
        }
    }
}
