//! A batch published to JetStream with one subscription for its PubAcks: each message goes out
//! with a reply subject under a fresh inbox (`<inbox>.<place in the batch>`), and every PubAck
//! comes back on the one subscription to that inbox. This is JetStream's publish protocol, on
//! the core client: async-nats's JetStream publish makes a request per message (an inbox, a
//! channel, a timer and a boxed future each), which cost more than the rest of the relay
//! (docs/dev/performance-method.md).

use std::time::Duration;

use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::response::Response;
use async_nats::{Client, StatusCode};
use futures_util::StreamExt;

use super::message;
use crate::broker::seam::{AppendOutcome, Entry};

/// Publishes `entries` and gathers their outcomes, in order: every message sent before any
/// PubAck is awaited; an entry whose PubAck does not come within `timeout` of the last send is
/// an outage (published again later, its `Nats-Msg-Id` lets the stream drop the repeat).
pub(super) async fn publish(
    client: &Client,
    body_field: &bytes::Bytes,
    entries: &[&Entry],
    timeout: Duration,
) -> Vec<AppendOutcome> {
    // What cannot travel is the row's own fault, whatever the connection's state.
    let mut outcomes: Vec<Option<AppendOutcome>> = Vec::with_capacity(entries.len());
    let mut messages = Vec::with_capacity(entries.len());
    let mut names = message::HeaderNames::default();
    for entry in entries {
        let message = match message::subject_problem(&entry.stream) {
            Some(problem) => Err(problem),
            None => message::message(body_field, entry, &mut names).map_err(|e| e.to_string()),
        };
        outcomes.push(message.as_ref().err().map(|e| AppendOutcome::Rejected(e.clone())));
        messages.push(message.ok());
    }
    if outcomes.iter().all(Option::is_some) {
        return outcomes.into_iter().flatten().collect();
    }
    let inbox = client.new_inbox();
    let mut acks = match tokio::time::timeout(timeout, client.subscribe(format!("{inbox}.*"))).await {
        Ok(Ok(acks)) => acks,
        Ok(Err(e)) => return fill(outcomes, AppendOutcome::Unavailable(format!("nats: {e}"))),
        Err(_) => return fill(outcomes, no_answer(timeout)),
    };
    let mut waiting = 0;
    for (i, (entry, message)) in entries.iter().zip(messages).enumerate() {
        let Some((headers, body)) = message else { continue };
        // The client queues while it reconnects; a queue that stays full is an outage, and
        // the rest of the batch waits for the next turn rather than a timeout each.
        let sent = client.publish_with_reply_and_headers(entry.stream.clone(), format!("{inbox}.{i}"), headers, body);
        match tokio::time::timeout(timeout, sent).await {
            Ok(Ok(())) => waiting += 1,
            Ok(Err(e)) if !matches!(e.kind(), async_nats::client::PublishErrorKind::Send) => {
                outcomes[i] = Some(not_sent(&e))
            }
            Ok(Err(e)) => return fill(outcomes, not_sent(&e)),
            Err(_) => return fill(outcomes, no_answer(timeout)),
        }
    }
    let deadline = tokio::time::Instant::now() + timeout;
    while waiting > 0 {
        let Ok(Some(ack)) = tokio::time::timeout_at(deadline, acks.next()).await else { break };
        let place = ack.subject.rsplit('.').next().and_then(|p| p.parse::<usize>().ok());
        if let Some(i) = place.filter(|&i| i < entries.len() && outcomes[i].is_none()) {
            outcomes[i] = Some(acknowledged(&ack, &entries[i].stream));
            waiting -= 1;
        }
    }
    // Dropping the subscription unsubscribes: a PubAck that comes later goes nowhere.
    drop(acks);
    fill(outcomes, no_answer(timeout))
}

/// The outcomes, `outage` where none is known.
fn fill(outcomes: Vec<Option<AppendOutcome>>, outage: AppendOutcome) -> Vec<AppendOutcome> {
    outcomes.into_iter().map(|o| o.unwrap_or_else(|| outage.clone())).collect()
}

fn no_answer(timeout: Duration) -> AppendOutcome {
    AppendOutcome::Unavailable(format!("nats: no PubAck within {timeout:?}"))
}

/// A publish the client refused: the entry's own fault when it is larger than the server takes
/// (`max_payload`: no retry can send it); otherwise an outage.
fn not_sent(error: &async_nats::PublishError) -> AppendOutcome {
    match error.kind() {
        async_nats::client::PublishErrorKind::MaxPayloadExceeded => AppendOutcome::Rejected(format!("nats: {error}")),
        _ => AppendOutcome::Unavailable(format!("nats: {error}")),
    }
}

/// The outcome JetStream's answer gives the entry: a PubAck is its sequence (a duplicate's is
/// the first copy's); a refusal is the entry's own fault when it is too large for the stream
/// (`max_msg_size`, or headers over the stream's limit), since no retry can store it; anything
/// else (no stream listening, a stream that cannot store now) is an outage.
fn acknowledged(answer: &async_nats::Message, subject: &str) -> AppendOutcome {
    use async_nats::jetstream::ErrorCode;
    if answer.status == Some(StatusCode::NO_RESPONDERS) {
        return AppendOutcome::Unavailable(format!("nats: no JetStream stream takes subject {subject}"));
    }
    match serde_json::from_slice::<Response<PublishAck>>(&answer.payload) {
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
        Err(e) => AppendOutcome::Unavailable(format!("nats: an answer that is no PubAck ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(payload: &'static str, status: Option<StatusCode>) -> async_nats::Message {
        async_nats::Message {
            subject: "_INBOX.x.0".into(),
            reply: None,
            payload: bytes::Bytes::from_static(payload.as_bytes()),
            headers: None,
            status,
            description: None,
            length: payload.len(),
        }
    }

    #[test]
    fn a_pub_ack_is_the_entrys_sequence_and_only_a_message_too_large_for_the_stream_is_its_own_fault() {
        let outcome = |payload, status| acknowledged(&answer(payload, status), "audit.user");
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
        let nobody = outcome("", Some(StatusCode::NO_RESPONDERS));
        assert!(matches!(nobody, AppendOutcome::Unavailable(e) if e.contains("audit.user")));
        assert!(matches!(outcome("not json", None), AppendOutcome::Unavailable(_)));
    }
}
