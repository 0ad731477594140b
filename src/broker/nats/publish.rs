//! A batch published to JetStream on one of the relay's own connections (`link`): every
//! message is written into one buffer as `HPUB` with a reply subject under the connection's
//! inbox (`<inbox>.<batch>.<place in the batch>`), and the PubAcks come back on the one
//! subscription to that inbox. This is JetStream's publish protocol without a client's machinery: async-nats's
//! JetStream publish makes a request per message (an inbox, a channel, a timer and a boxed
//! future each), and even its core publish passes each message, as a header map, through a
//! channel to its connection task — together more CPU than the rest of the relay
//! (docs/dev/performance-method.md).

use std::time::Duration;

use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::response::Response;
use bytes::BytesMut;
use tokio::time::Instant;

use super::link::{Failure, LinkError, Links, Reply};
use super::message;
use crate::broker::seam::{AppendOutcome, Entry};

/// Publishes `entries` and gathers their outcomes, in order: every message sent before any
/// PubAck is awaited; an entry whose PubAck does not come within `timeout` is an outage
/// (published again later, its `Nats-Msg-Id` lets the stream drop the repeat).
pub(super) async fn publish(
    links: &Links,
    body_field: &[u8],
    entries: &[&Entry],
    timeout: Duration,
) -> Vec<AppendOutcome> {
    // What cannot travel is the row's own fault, whatever the connection's state.
    let mut outcomes: Vec<Option<AppendOutcome>> = entries
        .iter()
        .map(|entry| {
            let problem = message::subject_problem(&entry.stream)
                .or_else(|| message::problem(body_field, entry).map(|e| e.to_string()));
            problem.map(AppendOutcome::Rejected)
        })
        .collect();
    if outcomes.iter().all(Option::is_some) {
        return outcomes.into_iter().flatten().collect();
    }
    let deadline = Instant::now() + timeout;
    let outage = match exchange(links, body_field, entries, &mut outcomes, deadline, timeout).await {
        Ok(()) => LinkError::NoAnswer(timeout),
        Err(e) => e,
    };
    let outage = AppendOutcome::Unavailable(outage.to_string());
    outcomes.into_iter().map(|o| o.unwrap_or_else(|| outage.clone())).collect()
}

/// Sends the entries without an outcome on a link and records each reply as it comes, until
/// `deadline`. A link that sat idle and fails before any answer (the server dropped it
/// meanwhile) is replaced and the batch sent once more; a link that fails or runs out of time
/// is closed, with the idle ones to its server.
async fn exchange(
    links: &Links,
    body_field: &[u8],
    entries: &[&Entry],
    outcomes: &mut [Option<AppendOutcome>],
    deadline: Instant,
    timeout: Duration,
) -> Result<(), LinkError> {
    let connect = || async {
        tokio::time::timeout_at(deadline, links.connect()).await.map_err(|_| LinkError::NoAnswer(timeout))?
    };
    let (mut link, mut fresh) = match links.take_idle() {
        Some(link) => (link, false),
        None => (connect().await?, true),
    };
    loop {
        link.batch += 1;
        let mut out = BytesMut::new();
        let mut sent = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            if outcomes[i].is_some() {
                continue;
            }
            let size = message::size(body_field, entry);
            if link.max_payload > 0 && size > link.max_payload {
                let max = link.max_payload;
                let said = format!("nats: the message is {size} bytes, over the server's max_payload of {max}");
                outcomes[i] = Some(AppendOutcome::Rejected(said));
                continue;
            }
            message::encode(&mut out, body_field, entry, &link.inbox, link.batch, i);
            sent.push(i);
        }
        let settle = |reply: Reply<'_>| match reply {
            // An entry without an outcome was sent: the others have theirs.
            Reply::Answer { place, status, payload } => match outcomes.get_mut(place) {
                Some(outcome @ None) => {
                    *outcome = Some(acknowledged(status, payload, &entries[place].stream));
                    1
                }
                _ => 0,
            },
            // No PubAck comes for it: an outage (a grant to fix), its neighbours go on. The
            // server refuses in the order it was sent: the first without an outcome.
            Reply::Forbidden { subject, said } => {
                let refused = sent.iter().find(|&&i| outcomes[i].is_none() && entries[i].stream == subject);
                match refused {
                    Some(&i) => {
                        outcomes[i] = Some(AppendOutcome::Unavailable(format!("nats: {said}")));
                        1
                    }
                    None => 0,
                }
            }
        };
        let answered = tokio::time::timeout_at(deadline, link.exchange(&out, sent.len(), settle)).await;
        match answered {
            Ok(Ok(())) => {
                links.put_idle(link);
                return Ok(());
            }
            Ok(Err(Failure { answered: false, .. })) if !fresh => {
                links.forget(&link.server);
                link = connect().await?;
                fresh = true;
            }
            Ok(Err(Failure { why, .. })) => {
                links.forget(&link.server);
                return Err(why);
            }
            Err(_) => {
                links.forget(&link.server);
                return Err(LinkError::NoAnswer(timeout));
            }
        }
    }
}

/// The outcome JetStream's answer gives the entry: a PubAck is its sequence (a duplicate's is
/// the first copy's); a refusal is the entry's own fault when it is too large for the stream
/// (`max_msg_size`, or headers over the stream's limit), since no retry can store it; anything
/// else (no stream listening, a stream that cannot store now) is an outage.
fn acknowledged(status: Option<u16>, payload: &[u8], subject: &str) -> AppendOutcome {
    use async_nats::jetstream::ErrorCode;
    if status == Some(503) {
        return AppendOutcome::Unavailable(format!("nats: no JetStream stream takes subject {subject}"));
    }
    match serde_json::from_slice::<Response<PublishAck>>(payload) {
        Ok(Response::Ok(ack)) if ack.duplicate => AppendOutcome::Duplicate(ack.sequence.to_string()),
        Ok(Response::Ok(ack)) => AppendOutcome::Appended(ack.sequence.to_string()),
        Ok(Response::Err { error }) => {
            let too_large = matches!(
                error.error_code(),
                ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM | ErrorCode::STREAM_HEADER_EXCEEDS_MAXIMUM
            );
            let said = format!("nats: the stream refused the message: {error}");
            if too_large { AppendOutcome::Rejected(said) } else { AppendOutcome::Unavailable(said) }
        }
        Err(e) => AppendOutcome::Unavailable(format!(
            "nats: an answer that is no PubAck{} ({e})",
            status.map(|s| format!(" (status {s})")).unwrap_or_default()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pub_ack_is_the_entrys_sequence_and_only_a_message_too_large_for_the_stream_is_its_own_fault() {
        let outcome = |payload: &str, status| acknowledged(status, payload.as_bytes(), "audit.user");
        assert_eq!(outcome(r#"{"stream":"AUDIT","seq":7}"#, None), AppendOutcome::Appended("7".into()));
        assert_eq!(
            outcome(r#"{"stream":"AUDIT","seq":3,"duplicate":true}"#, None),
            AppendOutcome::Duplicate("3".into())
        );
        let too_large =
            r#"{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}"#;
        assert!(matches!(outcome(too_large, None), AppendOutcome::Rejected(e) if e.contains("exceeds maximum")));
        let headers = r#"{"error":{"code":400,"err_code":10097,"description":"header size exceeds maximum allowed"}}"#;
        assert!(matches!(outcome(headers, None), AppendOutcome::Rejected(_)));
        let store = r#"{"error":{"code":503,"err_code":10077,"description":"error saving message"}}"#;
        assert!(matches!(outcome(store, None), AppendOutcome::Unavailable(e) if e.contains("error saving")));
        let nobody = outcome("", Some(503));
        assert!(matches!(nobody, AppendOutcome::Unavailable(e) if e.contains("audit.user")));
        assert!(matches!(outcome("not json", None), AppendOutcome::Unavailable(_)));
    }
}
