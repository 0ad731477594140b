//! `[nats]`: the NATS server (with JetStream) a relay may publish to instead of Redis
//! (`[[relay]] broker = "nats"`). So far a plain URL; TLS and credentials from files come with
//! the rest of the NATS broker.

use std::time::Duration;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsConfig {
    /// `nats://host:port`. No credentials in it: they will be read from files.
    pub url: String,
    /// The JetStream stream that captures the relays' subjects (created and configured by the
    /// operator; its duplicate window is the relay's dedupe window). Default: "HANDOFF".
    #[serde(default = "defaults::stream")]
    pub stream: String,
    /// How long a publish waits for its PubAck, and any other call for its answer. Default: "5s".
    #[serde(default = "defaults::timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

/// Which broker a relay publishes to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Broker {
    #[default]
    Redis,
    Nats,
}

impl NatsConfig {
    /// What is wrong with the section, each naming its key.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        match self.url.split_once("://") {
            Some(("nats", rest)) if !rest.is_empty() && !rest.contains('@') => {}
            Some(("nats", rest)) if rest.contains('@') => {
                problems.push("nats.url: credentials do not belong in the URL (it is logged); NATS credentials from files are not supported yet".into())
            }
            _ => problems.push(format!("nats.url: `{}` is not nats://host:port", self.url)),
        }
        let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if self.stream.is_empty() || !self.stream.chars().all(valid) {
            problems.push("nats.stream: a JetStream stream name is 1 or more of [A-Za-z0-9_-]".into());
        }
        if self.timeout.is_zero() {
            problems.push("nats.timeout must be > 0".into());
        }
        problems
    }
}

mod defaults {
    use std::time::Duration;

    pub fn stream() -> String {
        "HANDOFF".into()
    }

    pub fn timeout() -> Duration {
        Duration::from_secs(5)
    }
}
