//! The names a configuration gives: a component's (in metrics, logs, pauses and the admin API)
//! and a table's (written into statements, so never quoted input).

/// A relay's, bridge's or worker's name: 1-64 characters of `[A-Za-z0-9_.-]`.
pub(crate) fn is_label(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

/// A plain or schema-qualified SQL identifier (`audit_outbox`, `app.audit_outbox`).
pub(crate) fn is_identifier(name: &str) -> bool {
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let parts: Vec<&str> = name.split('.').collect();
    parts.len() <= 2 && parts.iter().all(|p| part_ok(p))
}
