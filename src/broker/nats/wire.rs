//! The server's side of the NATS protocol, as far as a publishing connection reads it: whole
//! operations taken off the front of what has arrived (`INFO`, `PING`, `PONG`, `+OK`, `-ERR`,
//! and `MSG` / `HMSG` PubAcks), every size checked before it is trusted.

use bytes::{Buf, Bytes, BytesMut};

/// What the server sent cannot be read as the protocol: the connection can no longer be trusted.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct Unreadable(pub String);

/// The longest control line (`INFO` with a cluster's URLs is the longest a server sends).
const MAX_LINE: usize = 1 << 20;
/// The most a batch's answers may hold before the exchange is given up as a protocol error.
pub(super) const MAX_READ: usize = 64 << 20;
/// How much of what a server says goes into an error (it is copied into each row's outcome).
const MAX_SAID: usize = 200;

/// At most [`MAX_SAID`] characters of what a server said.
pub(super) fn clip(said: &str) -> String {
    match said.char_indices().nth(MAX_SAID) {
        Some((end, _)) => format!("{}…", &said[..end]),
        None => said.to_owned(),
    }
}

/// What the server sent, as far as publishing needs.
pub(super) enum Op {
    Info(Bytes),
    /// A message on the link's inbox: the batch and place its subject names, the status of its
    /// header block (503: no responders), its payload.
    Answer {
        to: Option<(u64, usize)>,
        status: Option<u16>,
        payload: Bytes,
    },
    Ping,
    Pong,
    Ok,
    Err(String),
}

/// One operation from the front of `read`, `None` until all of it has arrived.
pub(super) fn parse(read: &mut BytesMut) -> Result<Option<Op>, Unreadable> {
    let Some(end) = read.windows(2).position(|w| w == b"\r\n") else {
        return if read.len() > MAX_LINE { Err(Unreadable(format!("a line over {MAX_LINE} bytes"))) } else { Ok(None) };
    };
    let line = std::str::from_utf8(&read[..end]).map_err(|_| Unreadable("a line that is not UTF-8".into()))?;
    let bad_line = || Unreadable(clip(&format!("the line `{}`", line.escape_debug())));
    let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
    let is = |name: &str| verb.eq_ignore_ascii_case(name);
    let simple = if is("PING") {
        Op::Ping
    } else if is("PONG") {
        Op::Pong
    } else if is("+OK") {
        Op::Ok
    } else if is("-ERR") {
        Op::Err(rest.trim().trim_matches('\'').to_owned())
    } else if is("INFO") {
        Op::Info(Bytes::copy_from_slice(rest.as_bytes()))
    } else if is("MSG") || is("HMSG") {
        return message(read, end, is("HMSG"));
    } else {
        return Err(bad_line());
    };
    read.advance(end + 2);
    Ok(Some(simple))
}

/// `MSG <subject> <sid> [reply] <size>` or `HMSG <subject> <sid> [reply] <header size> <size>`
/// (its line `end` bytes long), with its payload, once all of it has arrived.
fn message(read: &mut BytesMut, end: usize, with_headers: bool) -> Result<Option<Op>, Unreadable> {
    let line = std::str::from_utf8(&read[..end]).unwrap_or_default();
    let bad_line = || Unreadable(clip(&format!("the message line `{}`", line.escape_debug())));
    let mut parts = [""; 6];
    let mut count = 0;
    for part in line.split_ascii_whitespace().skip(1) {
        *parts.get_mut(count).ok_or_else(bad_line)? = part;
        count += 1;
    }
    let number = |s: &str| s.parse::<usize>().ok();
    let (header_len, total) = match (with_headers, count) {
        (false, 3 | 4) => (Some(0), number(parts[count - 1])),
        (true, 4 | 5) => (number(parts[count - 2]), number(parts[count - 1])),
        _ => return Err(bad_line()),
    };
    let (Some(header_len), Some(total)) = (header_len, total) else { return Err(bad_line()) };
    if header_len > total || total > MAX_READ {
        return Err(bad_line());
    }
    if read.len() < end + 2 + total + 2 {
        return Ok(None);
    }
    if &read[end + 2 + total..end + 2 + total + 2] != b"\r\n" {
        return Err(Unreadable("a message not followed by CRLF".into()));
    }
    let to = reply_place(parts[0]);
    read.advance(end + 2);
    let message = read.split_to(total).freeze();
    read.advance(2);
    let status = with_headers.then(|| status(&message[..header_len])).flatten();
    Ok(Some(Op::Answer { to, status, payload: message.slice(header_len..) }))
}

/// The batch and place a PubAck's subject (`<inbox>.<batch>.<place>`) names.
fn reply_place(subject: &str) -> Option<(u64, usize)> {
    let mut tokens = subject.rsplit('.');
    let place = tokens.next()?.parse().ok()?;
    let batch = tokens.next()?.parse().ok()?;
    Some((batch, place))
}

/// The subject of a publish the server refused for the connection's permissions
/// (`Permissions Violation for Publish to "<subject>"`): the server keeps the connection.
pub(super) fn forbidden_subject(said: &str) -> Option<&str> {
    let rest = said.strip_prefix("Permissions Violation for Publish to ")?;
    rest.trim().strip_prefix('"')?.strip_suffix('"')
}

/// Operations taken off the front of `data` until the rest is incomplete or refused (the fuzz
/// target).
#[cfg(fuzzing)]
pub(super) fn parse_all(data: &[u8]) {
    let mut read = BytesMut::from(data);
    while let Ok(Some(_)) = parse(&mut read) {}
}

/// The status code of a header block (`NATS/1.0 503`), if it has one.
fn status(headers: &[u8]) -> Option<u16> {
    let first = headers.split(|&b| b == b'\r').next()?;
    let code = std::str::from_utf8(first).ok()?.strip_prefix("NATS/1.0")?.split_ascii_whitespace().next()?;
    code.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(input: &[u8]) -> Vec<Op> {
        let mut read = BytesMut::from(input);
        let mut ops = Vec::new();
        while let Some(op) = parse(&mut read).unwrap() {
            ops.push(op);
        }
        assert!(read.is_empty(), "left: {read:?}");
        ops
    }

    #[test]
    fn answers_carry_their_batch_place_status_and_payload_and_a_partial_one_waits() {
        let input = b"PING\r\nMSG _INBOX.a.3.7 1 10\r\n{\"seq\":42}\r\nHMSG _INBOX.a.3.2 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n+OK\r\n";
        let got = ops(input);
        assert!(matches!(got[0], Op::Ping));
        let first = &got[1];
        assert!(
            matches!(first, Op::Answer { to: Some((3, 7)), status: None, payload } if &payload[..] == b"{\"seq\":42}")
        );
        assert!(matches!(&got[2], Op::Answer { to: Some((3, 2)), status: Some(503), payload } if payload.is_empty()));
        assert!(matches!(got[3], Op::Ok));
        let mut partial = BytesMut::from(&b"MSG _INBOX.a.3.7 1 10\r\n{\"seq\":"[..]);
        assert!(parse(&mut partial).unwrap().is_none(), "the payload has not all come");
    }

    #[test]
    fn a_bad_line_is_a_protocol_error_naming_it_in_a_few_words() {
        let long = format!("WHAT{}\r\n", "x".repeat(10_000));
        for bad in [&b"WHAT\r\n"[..], b"MSG a 1\r\n", b"HMSG a 1 9 4\r\n", b"MSG a 1 2\r\nabXY", long.as_bytes()] {
            let error = parse(&mut BytesMut::from(bad)).err().expect("refused");
            assert!(!error.0.is_empty(), "{error}");
            assert!(error.to_string().len() < 300, "{error}");
        }
        let huge = format!("MSG a 1 {}\r\n", usize::MAX);
        assert!(parse(&mut BytesMut::from(huge.as_bytes())).is_err(), "a size past what is read is refused");
    }

    #[test]
    fn only_a_publish_permission_refusal_names_a_subject() {
        assert_eq!(forbidden_subject("Permissions Violation for Publish to \"audit.user\""), Some("audit.user"));
        assert_eq!(forbidden_subject("Permissions Violation for Subscription to \"_INBOX.>\""), None);
        assert_eq!(forbidden_subject("Authorization Violation"), None);
    }
}
