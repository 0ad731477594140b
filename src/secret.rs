//! A string that never reaches logs: `Debug` and `Display` print a placeholder.

use serde::Deserialize;
use std::fmt;

#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub(crate) fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// Whether `given` is the secret, compared in time that does not depend on where they differ.
    pub(crate) fn matches(&self, given: &str) -> bool {
        let (a, b) = (given.as_bytes(), self.0.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
    }

    /// The secret itself, for the one place that needs it (opening a connection).
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A URL as it may be shown: scheme, host and port, with credentials, the path and the query
/// replaced by `***` (`https://***@hooks.internal:8443/***?***`): webhook URLs carry their
/// token in the path as often as in the query.
pub(crate) fn redacted_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return "***".into() };
    let (before_query, query) = match rest.split_once('?') {
        Some((before, _)) => (before, "?***"),
        None => (rest, ""),
    };
    let (authority, path) = before_query.split_once('/').map_or((before_query, ""), |(a, p)| (a, p));
    let host = match authority.rsplit_once('@') {
        Some((_, host)) => format!("***@{host}"),
        None => authority.to_owned(),
    };
    let path = if path.is_empty() { "" } else { "/***" };
    format!("{scheme}://{host}{path}{query}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_urls_keep_where_they_go_and_drop_credentials() {
        assert_eq!(
            redacted_url("https://u:hunter2@hooks.local:8443/events?token=abc"),
            "https://***@hooks.local:8443/***?***"
        );
        assert_eq!(redacted_url("http://127.0.0.1:9000/x"), "http://127.0.0.1:9000/***");
        assert_eq!(
            redacted_url("https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX"),
            "https://hooks.slack.com/***"
        );
        assert_eq!(redacted_url("https://hooks.local/"), "https://hooks.local");
        assert_eq!(redacted_url("https://hooks.local?key=1"), "https://hooks.local?***");
        assert_eq!(redacted_url("not a url with hunter2"), "***");
    }

    #[test]
    fn formatting_hides_the_value() {
        let s = Secret::new("postgres://u:hunter2@db/x");
        assert!(!format!("{s:?} {s}").contains("hunter2"));
        assert_eq!(s.expose(), "postgres://u:hunter2@db/x");
    }
}
