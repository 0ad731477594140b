//! The few pieces of RESP2 the relay's own append connections speak: commands written straight
//! into one buffer, and replies read back one at a time from whatever has arrived.
//!
//! A batch's appends are encoded here instead of through the Redis client's command objects:
//! that machinery (a command, its arguments as values, a frame and a response slot per `XADD`,
//! copied again when a pipeline is sent) was half of the relay's CPU per event.

use bytes::{Buf, Bytes, BytesMut};

/// A reply, as far as appends and their gate need one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+OK`
    Status(String),
    /// `-WRONGTYPE …`: the error code comes first.
    Error(String),
    Int(i64),
    /// `None` is the null bulk string.
    Bulk(Option<Bytes>),
    /// `None` is the null array.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The reply as text, for an entry id or a status.
    pub(super) fn text(&self) -> Option<String> {
        match self {
            Reply::Status(s) => Some(s.clone()),
            Reply::Bulk(Some(b)) => std::str::from_utf8(b).ok().map(str::to_owned),
            _ => None,
        }
    }

    pub(super) fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            _ => None,
        }
    }
}

/// The stream would not parse as RESP: the connection can no longer be trusted.
#[derive(Debug, thiserror::Error)]
#[error("redis sent a reply handoff cannot read: {0}")]
pub(crate) struct ProtocolError(String);

/// Appends one command (`*n`, then each argument as a bulk string) to `out`.
pub(super) fn command(out: &mut BytesMut, args: &[&[u8]]) {
    header(out, b'*', args.len());
    for arg in args {
        bulk(out, arg);
    }
}

/// `XADD key [MAXLEN|MINID ~ limit] * field value …`.
pub(super) fn xadd(out: &mut BytesMut, key: &[u8], cap: Option<(&[u8], &[u8])>, fields: &[(Bytes, Bytes)]) {
    let count = 3 + if cap.is_some() { 3 } else { 0 } + 2 * fields.len();
    header(out, b'*', count);
    bulk(out, b"XADD");
    bulk(out, key);
    if let Some((kind, limit)) = cap {
        bulk(out, kind);
        bulk(out, b"~");
        bulk(out, limit);
    }
    bulk(out, b"*");
    for (name, value) in fields {
        bulk(out, name);
        bulk(out, value);
    }
}

fn header(out: &mut BytesMut, kind: u8, n: usize) {
    out.reserve(24);
    out.extend_from_slice(&[kind]);
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn bulk(out: &mut BytesMut, arg: &[u8]) {
    header(out, b'$', arg.len());
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

/// How deep arrays may nest in a reply. The replies appends get are flat or one level deep (a
/// script's list of ids); a server (or something posing as one on a plain `redis://`
/// connection) answering deeper nesting would otherwise have the reader recurse until the
/// stack overflows and the process aborts.
const MAX_DEPTH: usize = 8;
/// The largest bulk string and array a reply may hold: far beyond any id, error or script
/// result an append gets back, far below what would exhaust memory.
const MAX_BULK: i64 = 16 << 20;
const MAX_ARRAY: i64 = 1 << 20;

/// Takes one whole reply off the front of `buf`; `Ok(None)` (and `buf` untouched) when it has
/// not all arrived yet.
pub(crate) fn parse(buf: &mut BytesMut) -> Result<Option<Reply>, ProtocolError> {
    match scan(buf, 0, 0)? {
        Some(end) => {
            let mut frame = buf.split_to(end).freeze();
            Ok(Some(read(&mut frame)?))
        }
        None => Ok(None),
    }
}

/// Where the reply starting at `at` (nested `depth` arrays deep) ends, if all of it is in `buf`.
fn scan(buf: &[u8], at: usize, depth: usize) -> Result<Option<usize>, ProtocolError> {
    let Some(Line { kind, text, next }) = line(buf, at)? else { return Ok(None) };
    match kind {
        b'+' | b'-' | b':' => Ok(Some(next)),
        b'$' => {
            let len = bounded(length(text)?, MAX_BULK, "bulk string")?;
            if len < 0 {
                return Ok(Some(next));
            }
            let end = next + len as usize + 2;
            Ok((buf.len() >= end).then_some(end))
        }
        b'*' => {
            let len = bounded(length(text)?, MAX_ARRAY, "array")?;
            if depth >= MAX_DEPTH {
                return Err(ProtocolError(format!("arrays nested deeper than {MAX_DEPTH}")));
            }
            let mut at = next;
            for _ in 0..len.max(0) {
                match scan(buf, at, depth + 1)? {
                    Some(end) => at = end,
                    None => return Ok(None),
                }
            }
            Ok(Some(at))
        }
        other => Err(ProtocolError(format!("unknown reply type {:?}", other as char))),
    }
}

/// A reply's first line: its type byte, the rest of the line, and where the next line starts.
struct Line<'a> {
    kind: u8,
    text: &'a [u8],
    next: usize,
}

fn line(buf: &[u8], at: usize) -> Result<Option<Line<'_>>, ProtocolError> {
    let Some(rest) = buf.get(at..) else { return Ok(None) };
    let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
    let Some((&kind, text)) = rest[..end].split_first() else {
        return Err(ProtocolError("an empty line".into()));
    };
    Ok(Some(Line { kind, text, next: at + end + 2 }))
}

fn bounded(len: i64, max: i64, what: &str) -> Result<i64, ProtocolError> {
    match len {
        -1..=i64::MAX if len <= max => Ok(len),
        _ => Err(ProtocolError(format!("a {what} of length {len} (at most {max})"))),
    }
}

fn length(line: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| ProtocolError(format!("bad length {:?}", String::from_utf8_lossy(line))))
}

/// Reads a reply that [`scan`] found whole.
fn read(frame: &mut Bytes) -> Result<Reply, ProtocolError> {
    let end = frame.windows(2).position(|w| w == b"\r\n").expect("scanned");
    let kind = frame[0];
    let line = frame.slice(1..end);
    frame.advance(end + 2);
    let text = || String::from_utf8_lossy(&line).into_owned();
    Ok(match kind {
        b'+' => Reply::Status(text()),
        b'-' => Reply::Error(text()),
        b':' => Reply::Int(length(&line)?),
        b'$' => match length(&line)? {
            len if len < 0 => Reply::Bulk(None),
            len => {
                let value = frame.split_to(len as usize);
                frame.advance(2);
                Reply::Bulk(Some(value))
            }
        },
        _ => match length(&line)? {
            len if len < 0 => Reply::Array(None),
            len => Reply::Array(Some((0..len).map(|_| read(frame)).collect::<Result<_, _>>()?)),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encoded(args: &[&[u8]]) -> Vec<u8> {
        let mut out = BytesMut::new();
        command(&mut out, args);
        out.to_vec()
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        assert_eq!(encoded(&[b"WAIT", b"1", b"500"]), b"*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$3\r\n500\r\n");
        let mut out = BytesMut::new();
        let fields = [(Bytes::from_static(b"a"), Bytes::from_static(b"x\r\ny"))];
        xadd(&mut out, b"s", Some((b"MAXLEN", b"10")), &fields);
        assert_eq!(
            &out[..],
            &b"*8\r\n$4\r\nXADD\r\n$1\r\ns\r\n$6\r\nMAXLEN\r\n$1\r\n~\r\n$2\r\n10\r\n$1\r\n*\r\n$1\r\na\r\n$4\r\nx\r\ny\r\n"[..]
        );
    }

    #[test]
    fn every_reply_kind_is_read() {
        let mut buf = BytesMut::from(&b"+OK\r\n-ERR no\r\n:3\r\n$-1\r\n$3\r\n1-0\r\n*2\r\n:1\r\n:0\r\n*-1\r\n"[..]);
        let mut got = Vec::new();
        while let Some(reply) = parse(&mut buf).unwrap() {
            got.push(reply);
        }
        assert_eq!(
            got,
            vec![
                Reply::Status("OK".into()),
                Reply::Error("ERR no".into()),
                Reply::Int(3),
                Reply::Bulk(None),
                Reply::Bulk(Some(Bytes::from_static(b"1-0"))),
                Reply::Array(Some(vec![Reply::Int(1), Reply::Int(0)])),
                Reply::Array(None),
            ]
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        assert!(parse(&mut BytesMut::from(&b"?what\r\n"[..])).is_err());
        assert!(parse(&mut BytesMut::from(&b"$x\r\n"[..])).is_err());
        assert!(parse(&mut BytesMut::from(&b"$-2\r\n"[..])).is_err());
    }

    /// A hostile server's reply cannot overflow the stack or claim unbounded memory: it is a
    /// protocol error (the connection is closed), not an abort.
    #[test]
    fn deep_nesting_and_huge_lengths_are_refused() {
        let mut deep = BytesMut::from("*1\r\n".repeat(20_000).as_bytes());
        deep.extend_from_slice(b":1\r\n");
        let error = parse(&mut deep).unwrap_err();
        assert!(error.to_string().contains("nested deeper than 8"), "{error}");
        let mut nested = BytesMut::from("*1\r\n".repeat(8).as_bytes());
        nested.extend_from_slice(b":1\r\n");
        assert!(parse(&mut nested).unwrap().is_some(), "eight levels are read");
        assert!(parse(&mut BytesMut::from(&b"$9223372036854775807\r\n"[..])).is_err());
        assert!(parse(&mut BytesMut::from(&b"*9223372036854775807\r\n"[..])).is_err());
    }

    fn reply() -> impl Strategy<Value = Reply> {
        let leaf = prop_oneof![
            "[a-zA-Z0-9 ]{0,12}".prop_map(Reply::Status),
            "[A-Z]{1,8} [a-z ]{0,12}".prop_map(Reply::Error),
            any::<i64>().prop_map(Reply::Int),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40))
                .prop_map(|b| Reply::Bulk(b.map(Bytes::from))),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            proptest::option::of(proptest::collection::vec(inner, 0..6)).prop_map(Reply::Array)
        })
    }

    fn write(out: &mut Vec<u8>, reply: &Reply) {
        match reply {
            Reply::Status(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
            Reply::Error(s) => out.extend_from_slice(format!("-{s}\r\n").as_bytes()),
            Reply::Int(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
            Reply::Bulk(None) => out.extend_from_slice(b"$-1\r\n"),
            Reply::Bulk(Some(b)) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Array(None) => out.extend_from_slice(b"*-1\r\n"),
            Reply::Array(Some(items)) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                items.iter().for_each(|item| write(out, item));
            }
        }
    }

    proptest! {
        /// Replies arriving in pieces of any size come out whole, in order, and nothing is
        /// taken from the buffer before a reply is complete.
        #[test]
        fn replies_split_anywhere_are_read_whole(replies in proptest::collection::vec(reply(), 1..8), cuts in proptest::collection::vec(1usize..64, 1..40)) {
            let mut wire = Vec::new();
            replies.iter().for_each(|r| write(&mut wire, r));
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            let mut at = 0;
            for cut in cuts.iter().cycle() {
                if at >= wire.len() {
                    break;
                }
                let end = (at + cut).min(wire.len());
                buf.extend_from_slice(&wire[at..end]);
                at = end;
                while let Some(reply) = parse(&mut buf).unwrap() {
                    got.push(reply);
                }
            }
            prop_assert_eq!(got, replies);
            prop_assert!(buf.is_empty());
        }
    }
}
