//! What an entry becomes on NATS: the message (the payload field as the body, every other field
//! a header, `Nats-Msg-Id` the event id) written as the protocol's `HPUB`, and the subjects a row
//! may not reach.

use bytes::BytesMut;

use crate::broker::seam::Entry;

/// The header JetStream drops a repeat by.
const MESSAGE_ID: &str = "Nats-Msg-Id";
/// The longest subject a row may render: a server's control line is 4 KiB by default
/// (`max_control_line`; longer ends the connection), and the `HPUB` line also holds the reply
/// subject and two sizes.
const MAX_SUBJECT: usize = 4096 - 128;

/// Why an entry's fields cannot travel as a NATS message: its own data, so it is rejected.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unsendable {
    #[error("a field name is not UTF-8")]
    FieldName,
    #[error("field {0} is not UTF-8")]
    NotText(String),
    #[error("field {0} cannot be a NATS header name: it must be printable ASCII without `:`")]
    HeaderName(String),
    #[error("field {0} cannot be a NATS header value: it holds a line break")]
    HeaderValue(String),
    #[error("the event id cannot be a NATS header value: it holds a line break")]
    EventId,
}

/// The fields `entry` sends as headers: every one but `body_field`, and none named as the
/// message-id header (the event id is sent under it).
fn header_fields<'a>(body_field: &'a [u8], entry: &'a Entry) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
    let fields = entry.fields.iter().map(|(name, value)| (&name[..], &value[..]));
    fields.filter(move |(name, _)| *name != body_field && !name.eq_ignore_ascii_case(MESSAGE_ID.as_bytes()))
}

fn has_line_break(text: &[u8]) -> bool {
    text.iter().any(|&b| b == b'\r' || b == b'\n')
}

/// Why `entry` cannot travel as a NATS message (its own data: it is rejected, its neighbours go
/// on), if it cannot. Checked once per entry; encoding trusts it.
pub(super) fn problem(body_field: &[u8], entry: &Entry) -> Option<Unsendable> {
    for (name, value) in header_fields(body_field, entry) {
        if name.is_empty() || !name.iter().all(|&b| b.is_ascii_graphic() && b != b':') {
            let text = std::str::from_utf8(name).map(str::to_owned);
            return Some(text.map_or(Unsendable::FieldName, Unsendable::HeaderName));
        }
        // Printable ASCII: the name is text.
        let named = || String::from_utf8_lossy(name).into_owned();
        if std::str::from_utf8(value).is_err() {
            return Some(Unsendable::NotText(named()));
        }
        if has_line_break(value) {
            return Some(Unsendable::HeaderValue(named()));
        }
    }
    has_line_break(entry.event_id.as_bytes()).then_some(Unsendable::EventId)
}

/// The size the server counts against its `max_payload`: header block and body.
pub(super) fn size(body_field: &[u8], entry: &Entry) -> usize {
    let (header_len, body) = measure(body_field, entry);
    header_len + body.len()
}

fn measure<'a>(body_field: &[u8], entry: &'a Entry) -> (usize, &'a [u8]) {
    let body = entry.fields.iter().find(|(name, _)| name == body_field).map_or(&b""[..], |(_, value)| value);
    let lines: usize = header_fields(body_field, entry).map(|(name, value)| name.len() + value.len() + 4).sum();
    let id = MESSAGE_ID.len() + entry.event_id.len() + 4;
    ("NATS/1.0\r\n".len() + lines + id + 2, body)
}

/// Appends `entry` (checked by [`problem`]) as `HPUB <subject> <inbox>.<batch>.<place> <header
/// size> <size>`, its header block and its body.
pub(super) fn encode(out: &mut BytesMut, body_field: &[u8], entry: &Entry, inbox: &str, batch: u64, place: usize) {
    let (header_len, body) = measure(body_field, entry);
    let mut number = itoa::Buffer::new();
    out.reserve(entry.stream.len() + inbox.len() + header_len + body.len() + 64);
    out.extend_from_slice(b"HPUB ");
    out.extend_from_slice(entry.stream.as_bytes());
    out.extend_from_slice(b" ");
    out.extend_from_slice(inbox.as_bytes());
    out.extend_from_slice(b".");
    out.extend_from_slice(number.format(batch).as_bytes());
    out.extend_from_slice(b".");
    out.extend_from_slice(number.format(place).as_bytes());
    out.extend_from_slice(b" ");
    out.extend_from_slice(number.format(header_len).as_bytes());
    out.extend_from_slice(b" ");
    out.extend_from_slice(number.format(header_len + body.len()).as_bytes());
    out.extend_from_slice(b"\r\nNATS/1.0\r\n");
    for (name, value) in header_fields(body_field, entry) {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(MESSAGE_ID.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(entry.event_id.as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

/// Why `subject` (rendered from a row's values) cannot be published to: a row must not reach
/// subjects it was not meant for through a wildcard, nor break the protocol with whitespace.
pub(super) fn subject_problem(subject: &str) -> Option<String> {
    if subject.len() > MAX_SUBJECT {
        return Some(format!(
            "subject of {} bytes is longer than a NATS control line allows ({MAX_SUBJECT})",
            subject.len()
        ));
    }
    let bad_token = subject.split('.').any(|t| t.is_empty() || t == "*" || t == ">");
    let bad_char = subject.chars().any(|c| c.is_whitespace() || c.is_control());
    (bad_token || bad_char).then(|| {
        format!(
            "subject `{}` is not a NATS subject (empty tokens, wildcards and whitespace are refused)",
            subject.escape_debug()
        )
    })
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn entry(fields: &[(&'static str, &'static str)]) -> Entry {
        let fields = fields.iter().map(|(n, v)| (Bytes::from_static(n.as_bytes()), Bytes::from_static(v.as_bytes())));
        Entry { stream: "audit.user".into(), fields: fields.collect(), event_id: "e-1".into(), run: None, trace: None }
    }

    #[test]
    fn an_entry_is_one_hpub_whose_sizes_count_its_headers_and_body_and_the_event_id_is_its_message_id() {
        let good = entry(&[("event_type", "user.changed"), ("payload", "{}"), ("Nats-Msg-Id", "spoofed")]);
        assert!(problem(b"payload", &good).is_none());
        let mut out = BytesMut::new();
        encode(&mut out, b"payload", &good, "_INBOX.x", 9, 3);
        let expected = "HPUB audit.user _INBOX.x.9.3 56 58\r\nNATS/1.0\r\nevent_type: user.changed\r\nNats-Msg-Id: e-1\r\n\r\n{}\r\n";
        assert_eq!(std::str::from_utf8(&out).unwrap(), expected, "the event id, not a field");
        assert_eq!(size(b"payload", &good), 58);
    }

    #[test]
    fn a_field_that_cannot_be_a_header_is_the_entrys_fault_and_names_the_field() {
        let bad = problem(b"payload", &entry(&[("a:b", "x")])).unwrap();
        assert!(bad.to_string().contains("a:b"), "{bad}");
        let bad = problem(b"payload", &entry(&[("note", "line\r\nbreak")])).unwrap();
        assert!(bad.to_string().contains("note"), "{bad}");
        let bad = problem(b"payload", &Entry { event_id: "e\n1".into(), ..entry(&[]) }).unwrap();
        assert!(bad.to_string().contains("event id"), "{bad}");
    }

    #[test]
    fn a_subject_too_long_for_a_control_line_is_the_rows_fault() {
        let at_most = format!("audit.{}", "x".repeat(MAX_SUBJECT - 6));
        assert_eq!(subject_problem(&at_most), None);
        let over = format!("{at_most}x");
        assert!(subject_problem(&over).is_some_and(|p| p.contains("control line")));
    }
}
