//! Event type patterns, as `[[bridge]]` and `[[worker.handler]]` name them.

/// `"*"` matches everything, `"order.*"` a prefix, anything else exactly.
pub(crate) fn type_matches(pattern: &str, event_type: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => event_type.starts_with(prefix),
        None => pattern == event_type,
    }
}
