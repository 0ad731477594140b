//! What a pause names and holds, as the operator sees it.

use std::time::Duration;

use serde::Serialize;

/// What can be paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ComponentKind {
    Relay,
    Bridge,
    Worker,
}

impl ComponentKind {
    /// The name in the table, the metric label and the API.
    pub(crate) fn label(self) -> &'static str {
        match self {
            ComponentKind::Relay => "relay",
            ComponentKind::Bridge => "bridge",
            ComponentKind::Worker => "worker",
        }
    }

    pub(crate) fn parse(label: &str) -> Option<Self> {
        [ComponentKind::Relay, ComponentKind::Bridge, ComponentKind::Worker].into_iter().find(|k| k.label() == label)
    }
}

/// A component and its configured name: what a pause names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub(crate) struct Target {
    pub component: ComponentKind,
    pub name: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.component.label(), self.name)
    }
}

/// An active pause, with its times by the database's clock.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Pause {
    #[serde(flatten)]
    pub target: Target,
    pub reason: Option<String>,
    /// Who paused it: an admin token's name, or the operating-system user of the CLI.
    pub paused_by: String,
    /// How long it has been paused.
    pub paused_for_seconds: f64,
    /// When the pause ends by itself, if it does.
    pub expires_in_seconds: Option<f64>,
}

/// A pause to write.
#[derive(Debug, Clone)]
pub(crate) struct PauseRequest {
    pub target: Target,
    pub reason: Option<String>,
    pub paused_by: String,
    /// Ends by itself after this long.
    pub expires_after: Option<Duration>,
}

/// Builds a pause from a row's columns: component, name, reason, paused_by, age, expires in.
pub(super) fn from_columns(
    component: &str,
    name: String,
    reason: Option<String>,
    paused_by: String,
    (age, expires_in): (Option<f64>, Option<f64>),
) -> Option<Pause> {
    Some(Pause {
        target: Target { component: ComponentKind::parse(component)?, name },
        reason,
        paused_by,
        paused_for_seconds: age.unwrap_or(0.0).max(0.0),
        expires_in_seconds: expires_in,
    })
}
