//! `[telemetry]`: the HTTP listener (metrics and probes), logs and traces.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use crate::secret::Secret;
use crate::tls::config::{ListenerTls, TlsConfig};

/// `[telemetry]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Address of the HTTP listener for `/metrics`, `/healthz`, `/readyz`. Default: "127.0.0.1:9464".
    pub listen: SocketAddr,
    /// `text` (human-readable) or `json` (one object per line, for containers). Default: "text".
    pub log_format: LogFormat,
    /// Log filter in `RUST_LOG` syntax. Default: "info".
    pub log_level: String,
    /// How often gauges that need a query (pending rows, oldest age, dead rows) are sampled. Default: "15s".
    #[serde(with = "humantime_serde")]
    pub sample_interval: Duration,
    /// A client must send a request's headers within this time, or the listener closes its
    /// connection (a slow client cannot hold it). Default: "5s".
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// Connections open at once; beyond it, the one open longest without a request is closed.
    /// Default: 32.
    ///
    /// So the kubelet's probes are answered whatever else is connected (an idle scraper, a client
    /// still sending its headers).
    pub max_connections: usize,
    /// Serve over TLS; `client_ca_file` requires client certificates. Default: plain HTTP.
    pub tls: Option<ListenerTls>,
    /// Credentials `/metrics` asks for (`[telemetry.auth]`); the probes never do (the kubelet
    /// would need them). Default: none.
    pub auth: Option<MetricsAuth>,
    /// OpenTelemetry traces over OTLP/HTTP (`[telemetry.tracing]`). Default: off.
    pub tracing: Option<TracingConfig>,
}

/// `[telemetry.auth]`: what a scrape of `/metrics` must carry, from mounted secret files.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MetricsAuth {
    /// A file holding the bearer token (`Authorization: Bearer <token>`).
    pub bearer_token_file: Option<std::path::PathBuf>,
    /// Basic authentication: the user name, with `basic_password_file`.
    pub basic_user: Option<String>,
    /// A file holding the basic-authentication password.
    pub basic_password_file: Option<std::path::PathBuf>,
    /// Read from the files when the configuration loads.
    #[serde(skip)]
    pub bearer_token: Option<Secret>,
    #[serde(skip)]
    pub basic_password: Option<Secret>,
}

/// `[telemetry.tracing]`: spans for each event's way through handoff, exported over OTLP/HTTP
/// (JSON). Unset keys follow the standard `OTEL_*` variables, then the defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracingConfig {
    /// Where spans go: the collector's OTLP/HTTP traces URL. Default: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
    /// else `OTEL_EXPORTER_OTLP_ENDPOINT` + "/v1/traces", else "http://localhost:4318/v1/traces".
    pub endpoint: Option<String>,
    /// Request headers (e.g. an API key), added to `OTEL_EXPORTER_OTLP_HEADERS`. Default: none.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Fraction of new traces sampled (a producer's sampled flag is followed). Default:
    /// `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`, else every trace.
    pub sample_ratio: Option<f64>,
    /// `service.name` of the spans. Default: `OTEL_SERVICE_NAME`, else "handoff".
    pub service_name: Option<String>,
    /// How long one export may take. Default: "10s".
    #[serde(default = "ten_seconds", with = "humantime_serde")]
    pub timeout: Duration,
    /// TLS for an `https://` endpoint. Default: verify-full against the system roots.
    #[serde(default)]
    pub tls: TlsConfig,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
            log_format: LogFormat::default(),
            log_level: "info".into(),
            sample_interval: Duration::from_secs(15),
            header_read_timeout: Duration::from_secs(5),
            max_connections: 32,
            tls: None,
            auth: None,
            tracing: None,
        }
    }
}

impl TelemetryConfig {
    /// Every problem of `[telemetry]`, each naming its key.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.header_read_timeout.is_zero() {
            errors.push("telemetry.header_read_timeout must be > 0".into());
        }
        if self.max_connections == 0 {
            errors.push("telemetry.max_connections must be > 0".into());
        }
        if self.sample_interval.is_zero() {
            errors.push("telemetry.sample_interval must be > 0".into());
        }
        if let Some(tracing) = &self.tracing {
            if tracing.sample_ratio.is_some_and(|r| !(0.0..=1.0).contains(&r)) {
                errors.push("telemetry.tracing.sample_ratio must be between 0 and 1".into());
            }
            if tracing.timeout.is_zero() {
                errors.push("telemetry.tracing.timeout must be > 0".into());
            }
        }
        errors
    }
}

fn ten_seconds() -> Duration {
    Duration::from_secs(10)
}
