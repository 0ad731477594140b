//! librdkafka's settings from `[kafka]`: the delivery guarantees handoff rests on (fixed), TLS
//! and SASL (the password read from its file, never logged), the operator's tuning properties,
//! and librdkafka's own log lines sent to handoff's log.

use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;

use super::config::KafkaConfig;
use crate::tls::config::TlsMode;

/// Why the client could not be set up: the configuration's fault (an unreachable cluster is
/// not: the client keeps trying). Names the key, never a secret.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KafkaSetupError {
    #[error("{key}: cannot read {}: {detail}", file.display())]
    Unreadable { key: &'static str, file: std::path::PathBuf, detail: String },
    #[error("kafka: {0}")]
    Client(String),
}

/// The producer's settings. Idempotence with `acks=all` stores each message once per producer
/// session on every in-sync replica, in the order sent within a partition (librdkafka keeps at
/// most 5 requests in flight per partition with idempotence, and retries within
/// `delivery_timeout` without reordering).
pub(super) fn producer_config(config: &KafkaConfig) -> Result<ClientConfig, KafkaSetupError> {
    let mut client = common(config)?;
    client
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("max.in.flight.requests.per.connection", "5")
        .set("message.timeout.ms", millis(config.delivery_timeout))
        // The relay sends a claimed batch at once: a short linger lets it go out in few requests
        // without holding a lone row back.
        .set("linger.ms", "5");
    for (name, value) in &config.properties {
        client.set(name, value);
    }
    Ok(client)
}

/// A client for metadata and the admin API (`handoff check`).
pub(crate) fn admin_config(config: &KafkaConfig) -> Result<ClientConfig, KafkaSetupError> {
    common(config)
}

/// A consumer that commits only what it is told to (a bridge commits after the inbox did).
pub(super) fn consumer_config(config: &KafkaConfig) -> Result<ClientConfig, KafkaSetupError> {
    let mut client = common(config)?;
    client
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false");
    Ok(client)
}

/// A consumer that only reads given offsets (loss checks): it joins no group, commits nothing.
fn reader_config(config: &KafkaConfig) -> Result<ClientConfig, KafkaSetupError> {
    let mut client = consumer_config(config)?;
    client.set("group.id", "handoff-verify");
    Ok(client)
}

/// A reader of single offsets (it joins no group), shared by what reads through `slot`.
type Reader = std::sync::Arc<rdkafka::consumer::BaseConsumer<Logged>>;

/// The reader kept in `slot`, made there on first use.
pub(super) fn reader(slot: &std::sync::Mutex<Option<Reader>>, config: &KafkaConfig) -> Result<Reader, String> {
    let mut made = slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(client) = &*made {
        return Ok(client.clone());
    }
    let client = reader_config(config).map_err(|e| e.to_string())?;
    let client: Reader = std::sync::Arc::new(client.create_with_context(Logged).map_err(|e| e.to_string())?);
    *made = Some(client.clone());
    Ok(client)
}

fn common(config: &KafkaConfig) -> Result<ClientConfig, KafkaSetupError> {
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", &config.bootstrap_servers)
        .set("client.id", "handoff")
        .set("socket.timeout.ms", millis(config.timeout))
        // A silent network failure (no RST, no FIN) must not hold a connection for ever.
        .set("socket.keepalive.enable", "true")
        // A partition's leader learned while its broker was dead and not yet fenced by the
        // controller stays the leader librdkafka sends to until the next metadata refresh
        // (5 minutes by default): every 10 s bounds how long a relay waits on a dead broker
        // after a failover, for one small request per client.
        .set("topic.metadata.refresh.interval.ms", "10000")
        .set_log_level(RDKafkaLogLevel::Warning);
    let tls = config.tls_required();
    let protocol = match (tls, config.sasl.is_some()) {
        (false, false) => "plaintext",
        (true, false) => "ssl",
        (false, true) => "sasl_plaintext",
        (true, true) => "sasl_ssl",
    };
    client.set("security.protocol", protocol);
    if tls {
        let mode = config.tls_mode();
        client.set("enable.ssl.certificate.verification", if mode.verifies() { "true" } else { "false" });
        let host_check = if mode == TlsMode::VerifyFull { "https" } else { "none" };
        client.set("ssl.endpoint.identification.algorithm", host_check);
        // OpenSSL is built into the binary: it knows no system store until told where to look.
        let roots = config.tls.ca_file.as_ref().map_or("probe".into(), |f| f.display().to_string());
        client.set("ssl.ca.location", roots);
        if let (Some(cert), Some(key)) = (&config.tls.cert_file, &config.tls.key_file) {
            client.set("ssl.certificate.location", cert.display().to_string());
            client.set("ssl.key.location", key.display().to_string());
        }
    }
    if let Some(sasl) = &config.sasl {
        let password = std::fs::read_to_string(&sasl.password_file).map_err(|e| KafkaSetupError::Unreadable {
            key: "kafka.sasl.password_file",
            file: sasl.password_file.clone(),
            detail: e.kind().to_string(),
        })?;
        client.set("sasl.mechanism", sasl.mechanism.name()).set("sasl.username", &sasl.user);
        client.set("sasl.password", password.trim_end_matches(['\r', '\n']));
    }
    Ok(client)
}

fn millis(duration: std::time::Duration) -> String {
    duration.as_millis().clamp(1, i32::MAX as u128).to_string()
}

/// Sends librdkafka's log lines and client errors to handoff's log (they name brokers, never
/// credentials).
#[derive(Clone, Default)]
pub(crate) struct Logged;

impl ClientContext for Logged {
    /// A broker that cannot be reached is an outage the relay waits out (warn, as on the other
    /// brokers); librdkafka suppresses repeats of the same line itself.
    fn log(&self, level: RDKafkaLogLevel, facility: &str, line: &str) {
        match level {
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical => {
                tracing::error!(facility, "librdkafka: {line}")
            }
            RDKafkaLogLevel::Error | RDKafkaLogLevel::Warning => tracing::warn!(facility, "librdkafka: {line}"),
            _ => tracing::debug!(facility, "librdkafka: {line}"),
        }
    }

    /// The same events as [`log`](Self::log) says, as error values: said once, there; a fatal
    /// one (the idempotent producer cannot go on) is an error here too.
    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(error, KafkaError::Global(rdkafka::types::RDKafkaErrorCode::Fatal)) {
            tracing::error!(error = %error, "kafka: {reason}");
        } else {
            tracing::debug!(error = %error, "kafka: {reason}");
        }
    }
}

impl rdkafka::consumer::ConsumerContext for Logged {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::kafka::config::{SaslConfig, SaslMechanism};

    #[test]
    fn the_delivery_settings_are_handoffs_and_tls_verifies_by_default() {
        let dir = tempfile::tempdir().unwrap();
        let password = dir.path().join("password");
        std::fs::write(&password, "s3cret\n").unwrap();
        let sasl = SaslConfig { mechanism: SaslMechanism::ScramSha256, user: "relay".into(), password_file: password };
        let mut config = KafkaConfig { sasl: Some(sasl), ..KafkaConfig::new("k1:9093") };
        config.properties.insert("linger.ms".into(), "20".into());
        let client = producer_config(&config).unwrap();
        for (key, value) in [
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("security.protocol", "sasl_ssl"),
            ("enable.ssl.certificate.verification", "true"),
            ("ssl.endpoint.identification.algorithm", "https"),
            ("sasl.mechanism", "SCRAM-SHA-256"),
            ("sasl.password", "s3cret"),
            ("linger.ms", "20"),
            ("message.timeout.ms", "30000"),
        ] {
            assert_eq!(client.get(key), Some(value), "{key}");
        }
        let missing = KafkaConfig {
            sasl: Some(SaslConfig { mechanism: SaslMechanism::Plain, user: "r".into(), password_file: "/nope".into() }),
            ..KafkaConfig::new("k1:9093")
        };
        let error = producer_config(&missing).unwrap_err().to_string();
        assert!(error.starts_with("kafka.sasl.password_file: cannot read /nope"), "{error}");
    }
}
