//! `[redis]`: where handoff connects to Redis, and how securely.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::secret::Secret;
use crate::tls::{TlsConfig, TlsMode};

/// `[redis]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// `redis://`, `redis-cluster://host:port?node=…` or
    /// `redis-sentinel://host:port/db?sentinelServiceName=…` (`rediss…` for TLS). Default:
    /// `redis://127.0.0.1:6379`.
    ///
    /// A secret like the database URL (`HANDOFF_REDIS__URL`, `url_file`).
    pub url: Option<Secret>,
    /// File holding the URL.
    pub url_file: Option<PathBuf>,
    /// A command that gets no reply within this time fails and is treated as an outage. Default: "5s".
    #[serde(with = "humantime_serde")]
    pub command_timeout: Duration,
    /// TLS, with a `rediss…` URL. Default mode: `verify-full` against the system roots (or
    /// `ca_file`).
    ///
    /// Cluster nodes and a sentinel's primary, found by IP address, are verified against the URL's
    /// host name.
    pub tls: TlsConfig,
    /// Whether the URL was given (file, environment or its file) rather than defaulted (set
    /// when the configuration is loaded): `check` then looks at it even if nothing uses it.
    #[serde(skip)]
    pub named: bool,
}

impl RedisConfig {
    /// The TLS mode in force: the scheme decides whether TLS is on.
    pub(crate) fn tls_mode(&self) -> TlsMode {
        if self.tls_scheme() { self.tls.mode_or(TlsMode::VerifyFull) } else { TlsMode::Disable }
    }

    fn tls_scheme(&self) -> bool {
        self.url.as_ref().is_some_and(|u| redis_scheme_is_tls(u.expose()))
    }

    /// Every problem of `[redis]`: TLS settings that agree with the URL's scheme.
    pub(crate) fn problems(&self) -> Vec<String> {
        if !self.tls_scheme() {
            let set = self.tls.is_set();
            return set
                .then(|| {
                    "redis.tls is set but redis.url is not a TLS URL; use rediss:// (or rediss-cluster://, rediss-sentinel://)"
                        .to_owned()
                })
                .into_iter()
                .collect();
        }
        let mode = self.tls_mode();
        let mut errors = crate::tls::config::check_shape("redis.tls", &self.tls, mode);
        if matches!(mode, TlsMode::Disable | TlsMode::Prefer) {
            errors.push(format!(
                "redis.tls.mode: {} makes no sense with rediss:// (always TLS); use redis:// for plain TCP",
                mode.name()
            ));
        }
        errors
    }
}

/// `rediss://`, `rediss-cluster://`, `rediss-sentinel://` (and fred's `valkeys` spellings).
pub(crate) fn redis_scheme_is_tls(url: &str) -> bool {
    let scheme = url.trim_start().split("://").next().unwrap_or_default().to_ascii_lowercase();
    scheme.starts_with("rediss") || scheme.starts_with("valkeys")
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: None,
            url_file: None,
            command_timeout: Duration::from_secs(5),
            tls: TlsConfig::default(),
            named: false,
        }
    }
}
