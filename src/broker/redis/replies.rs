//! What a Redis reply means for an append: the broker's outage (it passes by itself; nothing is
//! counted against the entry) or a refusal of this entry.

use std::time::{SystemTime, UNIX_EPOCH};

use fred::prelude::*;

use crate::broker::seam::AppendOutcome;

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
pub(crate) fn is_outage(error: &Error) -> bool {
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

/// The MINID for `min_age` trimming, by the relay's clock.
pub(super) fn min_id(age: std::time::Duration) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}-0", now.saturating_sub(age).as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_that_cannot_take_writes_is_an_outage_and_a_refusal_of_the_command_is_the_entrys() {
        for reply in [
            "LOADING Redis is loading the dataset in memory",
            "READONLY You can't write against a read only replica.",
            "OOM command not allowed when used memory > 'maxmemory'.",
            "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.",
            "NOREPLICAS Not enough good replicas to write.",
            "CLUSTERDOWN The cluster is down",
            "MOVED 3999 127.0.0.1:6381",
        ] {
            assert!(matches!(reply_outcome(reply), AppendOutcome::Unavailable(_)), "{reply}");
        }
        for reply in [
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "ERR The ID specified in XADD is equal or smaller than the target stream top item",
            // A code is the reply's first word, not a prefix of it.
            "OOMPH not a code",
        ] {
            assert!(matches!(reply_outcome(reply), AppendOutcome::Rejected(_)), "{reply}");
        }
    }
}
