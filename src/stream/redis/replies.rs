//! What a Redis reply means for an append: the broker's outage (it passes by itself; nothing is
//! counted against the entry) or a refusal of this entry.

use std::time::{SystemTime, UNIX_EPOCH};

use fred::prelude::*;

use crate::stream::seam::AppendOutcome;

/// The text of an error reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ErrorReply(pub String);

/// Server replies that mean the broker, not the entry, is the problem.
const OUTAGE_REPLIES: &[&str] = &[
    "LOADING",
    "READONLY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "BUSY",
    "OOM",
    "NOREPLICAS",
    "MISCONF",
    "NOAUTH",
    "WRONGPASS",
    "NOPERM",
    // The slot moved (a failover, a resharding): the slot map is refreshed and the call made again.
    "MOVED",
    "ASK",
];

pub(super) fn outcome(result: Result<String, Error>) -> AppendOutcome {
    match result {
        Ok(id) => AppendOutcome::Appended(id),
        Err(e) if is_outage(&e) => AppendOutcome::Unavailable(e.details().to_owned()),
        Err(e) => AppendOutcome::Rejected(e.details().to_owned()),
    }
}

/// An error reply (from inside the append script) as an outcome.
pub(super) fn reply_outcome(reply: &str) -> AppendOutcome {
    let code = reply.split_whitespace().next().unwrap_or_default();
    if OUTAGE_REPLIES.contains(&code) {
        AppendOutcome::Unavailable(reply.to_owned())
    } else {
        AppendOutcome::Rejected(reply.to_owned())
    }
}

/// Connection-level failures and broker states that pass by themselves are outages; a reply
/// about this particular command (WRONGTYPE, ERR …) is the entry's.
pub fn is_outage(error: &Error) -> bool {
    match error.kind() {
        ErrorKind::InvalidArgument | ErrorKind::InvalidCommand => false,
        ErrorKind::Unknown => {
            let code = error.details().split_whitespace().next().unwrap_or_default();
            OUTAGE_REPLIES.contains(&code)
                || error.details().contains("max number of clients")
                // The client gave up resending (connection trouble, cluster redirections).
                || error.details().starts_with("Too many failed write attempts")
        }
        _ => true,
    }
}

/// Milliseconds part of a Redis entry id (`1700000000000-0`).
pub fn entry_millis(entry_id: &str) -> Option<u64> {
    entry_id.split('-').next()?.parse().ok()
}

/// The MINID for `min_age` trimming, by the relay's clock.
pub(super) fn min_id(age: std::time::Duration) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}-0", now.saturating_sub(age).as_millis())
}
