//! The JSON bodies of the admin API's mutations: unknown keys are refused, defaults are the
//! CLI's.

use serde::Deserialize;

use crate::pause::ComponentKind;
use crate::store::selection::{Moment, MomentError, Selection};

fn hundred() -> u32 {
    100
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeadBody {
    pub(super) relay: Option<String>,
    pub(super) worker: Option<String>,
    pub(super) event_id: Option<String>,
    pub(super) older_than: Option<String>,
    pub(super) error: Option<String>,
    #[serde(default = "hundred")]
    pub(super) limit: u32,
    #[serde(default)]
    pub(super) dry_run: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PoisonBody {
    pub(super) bridge: Option<String>,
    pub(super) reason: Option<String>,
    pub(super) event_id: Option<String>,
    #[serde(default = "hundred")]
    pub(super) limit: u32,
    #[serde(default)]
    pub(super) dry_run: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PauseBody {
    pub(super) component: ComponentKind,
    pub(super) name: String,
    pub(super) reason: Option<String>,
    #[serde(rename = "for")]
    pub(super) expires_after: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ResumeBody {
    pub(super) component: ComponentKind,
    pub(super) name: String,
}

/// The filters of `replay` and `reprocess`, as JSON (`since` / `until`: "2h" or RFC 3339).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct SelectionBody {
    since: Option<String>,
    until: Option<String>,
    event_type: Option<String>,
    aggregate_type: Option<String>,
    aggregate_id: Option<String>,
    event_id: Option<String>,
    from_id: Option<i64>,
    to_id: Option<i64>,
}

/// A time filter of the body that is not a time, naming its key.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {error}")]
pub(super) struct BadMoment {
    key: &'static str,
    error: MomentError,
}

impl SelectionBody {
    pub(super) fn into_selection(self) -> Result<Selection, BadMoment> {
        let moment = |key: &'static str, v: Option<String>| {
            v.map(|t| Moment::parse(&t).map_err(|error| BadMoment { key, error })).transpose()
        };
        Ok(Selection {
            since: moment("since", self.since)?,
            until: moment("until", self.until)?,
            event_type: self.event_type,
            aggregate_type: self.aggregate_type,
            aggregate_id: self.aggregate_id,
            event_id: self.event_id,
            from_id: self.from_id,
            to_id: self.to_id,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReprocessBody {
    pub(super) worker: String,
    #[serde(default)]
    pub(super) states: Vec<crate::reprocess::Settled>,
    #[serde(default = "received")]
    pub(super) time: crate::reprocess::InboxTime,
    #[serde(default)]
    pub(super) selection: SelectionBody,
    #[serde(default)]
    pub(super) all: bool,
    #[serde(default = "ten_thousand")]
    pub(super) limit: u32,
    #[serde(default)]
    pub(super) dry_run: bool,
}

fn received() -> crate::reprocess::InboxTime {
    crate::reprocess::InboxTime::Received
}

fn ten_thousand() -> u32 {
    10_000
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RewindBody {
    pub(super) bridge: String,
    pub(super) to: String,
    pub(super) stream: Option<String>,
    #[serde(default)]
    pub(super) dry_run: bool,
}

/// `POST /api/replay`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReplayBody {
    pub(super) relay: String,
    #[serde(default)]
    pub(super) selection: SelectionBody,
    #[serde(default = "created")]
    pub(super) time: crate::replay::OutboxTime,
    pub(super) to_stream: Option<String>,
    #[serde(default = "thousand")]
    pub(super) rate: u32,
    #[serde(default = "five_hundred")]
    pub(super) batch: u32,
    pub(super) job: Option<String>,
    #[serde(default)]
    pub(super) restart: bool,
    #[serde(default)]
    pub(super) allow_partial: bool,
    #[serde(default)]
    pub(super) dry_run: bool,
}

fn created() -> crate::replay::OutboxTime {
    crate::replay::OutboxTime::Created
}

fn thousand() -> u32 {
    1000
}

fn five_hundred() -> u32 {
    500
}

/// Every body kind read from `data` as its endpoint reads it (JSON, then its times and
/// durations), for the fuzz target.
#[cfg(fuzzing)]
pub(crate) fn read_every_kind(data: &[u8]) {
    let duration = |text: Option<&str>| text.map(humantime::parse_duration);
    if let Ok(b) = serde_json::from_slice::<DeadBody>(data) {
        let _ = duration(b.older_than.as_deref());
    }
    let _ = serde_json::from_slice::<PoisonBody>(data);
    if let Ok(b) = serde_json::from_slice::<PauseBody>(data) {
        let _ = duration(b.expires_after.as_deref());
    }
    let _ = serde_json::from_slice::<ResumeBody>(data);
    if let Ok(b) = serde_json::from_slice::<ReprocessBody>(data) {
        let _ = b.selection.into_selection();
    }
    if let Ok(b) = serde_json::from_slice::<RewindBody>(data) {
        let _ = crate::rewind::RewindTo::parse(&b.to);
    }
    if let Ok(b) = serde_json::from_slice::<ReplayBody>(data) {
        let _ = b.selection.into_selection();
    }
}
