//! Messages the NATS client cannot read. async-nats parses a message's headers as it reads the
//! connection, and a header it refuses (a name with a space or a colon, a line without a colon,
//! bytes that are not UTF-8) ends the connection instead of the message: the fetch under way is
//! lost, the client reconnects, and JetStream delivers the message again after `ack_wait` — for
//! ever, taking every fetch and acknowledgement in flight with it each time.
//!
//! Another client can publish such a message (the server does not check header names), so the
//! bridge finds it after a reconnect: it reads the messages between its consumer's
//! acknowledgement floor and the last one delivered through the stream API, which carries the
//! headers base64-encoded in JSON, checks each header block by the client's rules, and hands the
//! ones the client refuses to the bridge as unreadable entries. They go to poison with the header
//! lines as fields, and are then terminated (`+TERM`) through the consumer's acknowledgement
//! subject, so JetStream stops delivering them.

use std::str::FromStr;

use async_nats::HeaderName;
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::response::Response;
use bytes::Bytes;

use crate::broker::read::RawEntry;

/// At most this many messages are looked at after one reconnect. The unreadable message holds
/// the acknowledgement floor just below itself, so it is the first looked at once the messages
/// before it are acknowledged.
pub(super) const SCAN_MAX: u64 = 1000;

/// The messages from the consumer's acknowledgement floor up to the last one delivered (at most
/// [`SCAN_MAX`]) on `filter` whose headers the client cannot read, as unreadable entries: the
/// header lines as fields and the body as `body_field`.
pub(super) async fn find(
    jetstream: &async_nats::jetstream::Context,
    stream: &str,
    consumer: &async_nats::jetstream::consumer::Info,
    filter: &str,
    body_field: &Bytes,
) -> Result<Vec<RawEntry>, String> {
    let (floor, last) = (consumer.ack_floor.stream_sequence, consumer.delivered.stream_sequence);
    let mut found = Vec::new();
    for sequence in (floor + 1..=last).take(SCAN_MAX as usize) {
        let Some(stored) = stored(jetstream, stream, sequence).await? else { continue };
        if !captured(filter, &stored.subject) {
            continue;
        }
        let decode = |text: Option<String>| crate::base64::decode(&text.unwrap_or_default()).unwrap_or_default();
        let headers = decode(stored.hdrs);
        if let Some(why) = header_problem(&headers) {
            let mut fields = lenient_fields(&headers);
            fields.push((body_field.clone(), decode(stored.data).into()));
            found.push(RawEntry { id: sequence.to_string(), fields: Some(fields), unreadable: Some(why) });
        }
    }
    Ok(found)
}

/// A message as the stream API returns it (`STREAM.MSG.GET`): headers and body in base64.
#[derive(serde::Deserialize)]
struct Stored {
    subject: String,
    hdrs: Option<String>,
    data: Option<String>,
}

#[derive(serde::Deserialize)]
struct Got {
    message: Stored,
}

/// The message at `sequence`, or `None` when the stream no longer holds it.
async fn stored(
    jetstream: &async_nats::jetstream::Context,
    stream: &str,
    sequence: u64,
) -> Result<Option<Stored>, String> {
    let subject = format!("STREAM.MSG.GET.{stream}");
    let answer: Response<Got> = jetstream
        .request(subject, &serde_json::json!({ "seq": sequence }))
        .await
        .map_err(|e| format!("reading message {sequence} of {stream}: {e}"))?;
    match answer {
        Response::Ok(got) => Ok(Some(got.message)),
        Response::Err { error } if error.error_code() == ErrorCode::NO_MESSAGE_FOUND => Ok(None),
        Response::Err { error } => Err(format!("reading message {sequence} of {stream}: {error}")),
    }
}

/// Why the client refuses this header block (the bytes before the body: `NATS/1.0` and header
/// lines), by the rules it reads a connection with; `None` when it reads it.
pub(super) fn header_problem(raw: &[u8]) -> Option<String> {
    let Ok(text) = std::str::from_utf8(raw) else { return Some("the headers are not UTF-8".into()) };
    let mut lines = text.lines().peekable();
    let Some(version) = lines.next().and_then(|line| line.strip_prefix("NATS/1.0")) else {
        return Some("the header block does not begin with `NATS/1.0`".into());
    };
    let status = version.trim().split_once(' ').map_or(version.trim(), |(status, _)| status.trim());
    if !status.is_empty() && async_nats::StatusCode::from_str(status).is_err() {
        return Some(format!("the status `{}` is not a number", status.escape_debug()));
    }
    while let Some(line) = lines.next() {
        if line.is_empty() {
            continue;
        }
        let Some((name, _)) = line.split_once(':') else {
            return Some(format!("the header line `{}` has no colon", shown(line)));
        };
        if let Err(e) = HeaderName::from_str(name) {
            return Some(format!("the header name `{}` is not valid: {e}", shown(name)));
        }
        // Continuation lines belong to the value (as the client reads them).
        while lines.next_if(|next| next.starts_with(char::is_whitespace)).is_some() {}
    }
    None
}

/// The header lines as fields, as far as they can be made out (name before the first colon,
/// value after it, `Nats-*` headers aside as for a readable message), for the poison record.
pub(super) fn lenient_fields(raw: &[u8]) -> Vec<(Bytes, Bytes)> {
    let mut fields = Vec::new();
    for line in raw.split(|b| *b == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let (name, value) = match line.iter().position(|b| *b == b':') {
            Some(at) => (&line[..at], line[at + 1..].trim_ascii()),
            None => (line, &b""[..]),
        };
        if name.len() >= 5 && name[..5].eq_ignore_ascii_case(b"nats-") {
            continue;
        }
        fields.push((Bytes::copy_from_slice(name), Bytes::copy_from_slice(value)));
    }
    fields
}

/// Whether `subject` is one the consumer's `filter` (which may hold `*` and `>`) captures.
pub(super) fn captured(filter: &str, subject: &str) -> bool {
    let mut tokens = subject.split('.');
    for wanted in filter.split('.') {
        match (wanted, tokens.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (wanted, Some(token)) if wanted == token => {}
            _ => return false,
        }
    }
    tokens.next().is_none()
}

/// At most 200 characters of `text`, escaped, for a poison detail.
fn shown(text: &str) -> String {
    text.chars().take(200).collect::<String>().escape_debug().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_reads_ordinary_headers_a_status_and_continuation_lines() {
        assert_eq!(header_problem(b"NATS/1.0\r\nevent_id: e-1\r\nowner: relay\r\n\r\n"), None);
        assert_eq!(header_problem(b"NATS/1.0 503\r\n\r\n"), None);
        assert_eq!(header_problem(b"NATS/1.0\r\nlong: a\r\n  b\r\n\r\n"), None);
    }

    #[test]
    fn what_the_client_refuses_is_named() {
        let problem = |raw: &[u8]| header_problem(raw).unwrap_or_default();
        assert!(problem(b"NATS/1.0\r\nbad name: x\r\n\r\n").contains("header name `bad name`"));
        assert!(problem(b"NATS/1.0\r\nno colon here\r\n\r\n").contains("has no colon"));
        assert!(problem(b"NATS/1.0\r\nname: \xff\r\n\r\n").contains("not UTF-8"));
        assert!(problem(b"HTTP/1.1\r\n\r\n").contains("NATS/1.0"));
        assert!(problem(b"NATS/1.0 abc\r\n\r\n").contains("status"));
    }

    #[test]
    fn the_fields_of_an_unreadable_block_keep_every_line_but_the_nats_ones() {
        let fields = lenient_fields(b"NATS/1.0\r\nNats-Msg-Id: m\r\nevent_id: e-1\r\nbad name: x\r\nbare\r\n\r\n");
        let fields: Vec<(&[u8], &[u8])> = fields.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        assert_eq!(fields, vec![(&b"event_id"[..], &b"e-1"[..]), (b"bad name", b"x"), (b"bare", b"")]);
    }

    #[test]
    fn a_filter_captures_by_token_with_wildcards() {
        assert!(captured("audit.user", "audit.user"));
        assert!(!captured("audit.user", "audit.user.x"));
        assert!(captured("audit.*", "audit.user"));
        assert!(!captured("audit.*", "audit"));
        assert!(captured("audit.>", "audit.user.x"));
        assert!(!captured("audit.>", "audit"));
        assert!(!captured("audit.user", "audit.order"));
    }
}
