//! What a statement's result lacks of the columns the SQL contract requires of it.

/// A result without the columns the SQL contract requires of it.
#[derive(Debug, thiserror::Error)]
#[error("result lacks required column(s): {}", .0.join(", "))]
pub(crate) struct MissingColumns(pub Vec<&'static str>);

impl MissingColumns {
    /// What `present` lacks of `required`; `None` when nothing is missing.
    pub(crate) fn of<'a>(required: &[&'static str], present: impl Iterator<Item = &'a str> + Clone) -> Option<Self> {
        let missing: Vec<&'static str> =
            required.iter().copied().filter(|c| !present.clone().any(|p| p == *c)).collect();
        (!missing.is_empty()).then_some(Self(missing))
    }
}
