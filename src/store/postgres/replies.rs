//! A request is answered when its ReadyForQuery arrives, not when its first byte does.
//!
//! The byte-level watch below a connection ([`crate::store::net::Watched`]) is satisfied by any
//! byte read. Requests that are pipelined (the locked claim writes BEGIN and its lock together),
//! or one long reply, can be cut by a silent network failure after their first bytes: the watch
//! is then disarmed and the statement would wait for ever. So the Postgres connection also
//! follows the protocol's framing in the plain bytes: every Sync, simple Query and the startup
//! message is answered by exactly one ReadyForQuery ('Z'). While one is owed, the stream must
//! make progress within `database.reply_timeout` (and its margin), or it fails with `TimedOut`.
//!
//! Under TLS the socket only sees ciphertext: the connector ([`WatchedTls`]) turns the socket's
//! own tracking off and puts a second one above the TLS session. Bytes that make no sense as the
//! protocol (a server of another kind) turn tracking off; the byte-level watch still applies.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tokio_postgres::tls::{ChannelBinding, TlsConnect, TlsStream};

use crate::store::net::overdue;

/// The first four body bytes of the SSL and GSSAPI encryption requests (a startup-phase message
/// whose answer is one byte, not a message).
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
/// A message longer than this is not one Postgres would send: the bytes are not its protocol.
const MAX_MESSAGE: usize = 1 << 30;

/// A stream that fails when a request goes unanswered, following the messages it carries.
pub(crate) struct Replies<S> {
    inner: S,
    limit: Duration,
    track: Track,
    /// Set while a ReadyForQuery is owed: the time by which the stream must make progress.
    due: Option<Pin<Box<Sleep>>>,
}

impl<S> Replies<S> {
    pub(crate) fn new(inner: S, limit: Duration) -> Self {
        Self { inner, limit, track: Track::default(), due: None }
    }

    /// TLS runs above from now on: what passes here is ciphertext.
    pub(crate) fn stop_tracking(&mut self) {
        self.track.off = true;
        self.due = None;
    }

    fn arm_or_disarm(&mut self, progress: bool, cx: &mut Context<'_>) {
        if self.track.off || self.track.owed == 0 {
            self.due = None;
            return;
        }
        let deadline = Instant::now() + self.limit;
        match &mut self.due {
            Some(due) if progress => due.as_mut().reset(deadline),
            Some(_) => {}
            None => {
                self.due = Some(Box::pin(tokio::time::sleep_until(deadline)));
                // The reader may be parked already without a timer: have it polled again so
                // that the deadline is registered with this task.
                cx.waker().wake_by_ref();
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Replies<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = &buf.filled()[before..];
                if !read.is_empty() {
                    let this = &mut *self;
                    this.track.received(read);
                    this.arm_or_disarm(true, cx);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let limit = self.limit;
                overdue(&mut self.due, cx, || {
                    format!("the database's reply stopped or never came: nothing within {limit:?}")
                })
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Replies<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = written
            && n > 0
        {
            let this = &mut *self;
            this.track.sent(&data[..n]);
            this.arm_or_disarm(false, cx);
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: TlsStream + Unpin> TlsStream for Replies<S> {
    fn channel_binding(&self) -> ChannelBinding {
        self.inner.channel_binding()
    }
}

/// The TLS connector of a watched connection: it stops the socket's tracking (ciphertext from
/// now on) and tracks the session's plain bytes above TLS instead.
pub(crate) struct WatchedTls<T> {
    pub inner: T,
    pub limit: Duration,
}

/// A socket whose tracking a TLS session above it can stop.
pub(crate) trait Tracked {
    fn stop_tracking(&mut self);
}

impl<S, T> TlsConnect<S> for WatchedTls<T>
where
    S: Tracked,
    T: TlsConnect<S>,
    T::Stream: Unpin,
{
    type Stream = Replies<T::Stream>;
    type Error = T::Error;
    type Future = Handshake<T::Future>;

    fn connect(self, mut stream: S) -> Self::Future {
        stream.stop_tracking();
        Handshake { inner: Box::pin(self.inner.connect(stream)), limit: self.limit }
    }
}

pub(crate) struct Handshake<F> {
    inner: Pin<Box<F>>,
    limit: Duration,
}

impl<F, S, E> Future for Handshake<F>
where
    F: Future<Output = Result<S, E>>,
{
    type Output = Result<Replies<S>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let limit = self.limit;
        self.inner.as_mut().poll(cx).map(|done| done.map(|stream| Replies::new(stream, limit)))
    }
}

/// The conversation so far, as far as the deadline needs it.
struct Track {
    /// Frontend messages; the first ones (the startup and encryption requests) have no type byte.
    sent: Framer,
    received: Framer,
    /// Requests written whose ReadyForQuery has not been read.
    owed: u32,
    /// An SSL or GSSAPI request was written: the server answers it with one byte.
    answer_byte: bool,
    /// Not tracking: TLS runs above, or the bytes were not the protocol.
    off: bool,
}

impl Track {
    fn sent(&mut self, mut data: &[u8]) {
        while !self.off && !data.is_empty() {
            let startup = !self.sent.typed;
            match self.sent.next(&mut data) {
                Err(()) => self.off = true,
                Ok(None) => {}
                Ok(Some(head)) if startup => match head.code {
                    SSL_REQUEST | GSSENC_REQUEST => self.answer_byte = true,
                    // The startup message: answered by ReadyForQuery once authenticated.
                    _ => {
                        self.sent.typed = true;
                        self.owed += 1;
                    }
                },
                // Sync, simple Query and FunctionCall each end in one ReadyForQuery.
                Ok(Some(head)) if matches!(head.kind, b'S' | b'Q' | b'F') => self.owed += 1,
                Ok(Some(_)) => {}
            }
        }
    }

    fn received(&mut self, mut data: &[u8]) {
        if !self.off && self.answer_byte {
            self.answer_byte = false;
            // 'S' / 'G': encryption follows (the connector stops this tracking); 'N': plain.
            if data[0] != b'N' {
                self.off = true;
                return;
            }
            data = &data[1..];
        }
        while !self.off && !data.is_empty() {
            match self.received.next(&mut data) {
                Err(()) => self.off = true,
                Ok(Some(head)) if head.kind == b'Z' => self.owed = self.owed.saturating_sub(1),
                // COPY FROM STDIN: tokio-postgres sends a Sync before the data, which the
                // server ignores while it reads COPY data, so that Sync gets no ReadyForQuery.
                Ok(Some(head)) if head.kind == b'G' => self.owed = self.owed.saturating_sub(1),
                Ok(_) => {}
            }
        }
    }
}

/// Where a byte stream of messages is: within a header, or within a body.
#[derive(Default)]
struct Framer {
    /// Past the startup phase: a message is a type byte, a length and a body; before it, a
    /// length and a four-byte code, then the rest.
    typed: bool,
    head: [u8; 8],
    have: usize,
    /// Body bytes left of the current message.
    rest: usize,
}

struct Head {
    kind: u8,
    code: u32,
}

impl Framer {
    fn received_side() -> Self {
        Self { typed: true, ..Self::default() }
    }

    /// Consumes bytes of `data` up to the end of the next header; the header if one ended, an
    /// error if its length cannot be the protocol's.
    fn next(&mut self, data: &mut &[u8]) -> Result<Option<Head>, ()> {
        if self.rest > 0 {
            let skip = self.rest.min(data.len());
            self.rest -= skip;
            *data = &data[skip..];
            return Ok(None);
        }
        let want = if self.typed { 5 } else { 8 };
        let take = (want - self.have).min(data.len());
        self.head[self.have..self.have + take].copy_from_slice(&data[..take]);
        self.have += take;
        *data = &data[take..];
        if self.have < want {
            return Ok(None);
        }
        self.have = 0;
        let h = &self.head;
        let (kind, length, code) = if self.typed {
            (h[0], u32::from_be_bytes([h[1], h[2], h[3], h[4]]) as usize, 0)
        } else {
            (0, u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize, u32::from_be_bytes([h[4], h[5], h[6], h[7]]))
        };
        // The length counts itself (and, before typed messages, the code).
        let counted = if self.typed { 4 } else { 8 };
        if !(counted..=MAX_MESSAGE).contains(&length) {
            return Err(());
        }
        self.rest = length - counted;
        Ok(Some(Head { kind, code }))
    }
}

impl Default for Track {
    fn default() -> Self {
        Self { sent: Framer::default(), received: Framer::received_side(), owed: 0, answer_byte: false, off: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    const LIMIT: Duration = Duration::from_secs(5);

    fn startup() -> Vec<u8> {
        let mut m = 17u32.to_be_bytes().to_vec();
        m.extend(196_608u32.to_be_bytes());
        m.extend(b"user\0pg\0\0");
        m
    }

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend((body.len() as u32 + 4).to_be_bytes());
        m.extend(body);
        m
    }

    fn ready() -> Vec<u8> {
        message(b'Z', b"I")
    }

    /// A connected, authenticated stream: the startup message answered by ReadyForQuery.
    async fn connected() -> (Replies<DuplexStream>, DuplexStream) {
        let (near, mut far) = tokio::io::duplex(1 << 16);
        let mut stream = Replies::new(near, LIMIT);
        stream.write_all(&startup()).await.unwrap();
        far.write_all(&[message(b'R', &0u32.to_be_bytes()), ready()].concat()).await.unwrap();
        let mut buf = [0u8; 64];
        assert!(stream.read(&mut buf).await.unwrap() > 0);
        assert_eq!(stream.track.owed, 0);
        (stream, far)
    }

    async fn idles(stream: &mut Replies<DuplexStream>) -> bool {
        let mut buf = [0u8; 64];
        tokio::time::timeout(Duration::from_secs(600), stream.read(&mut buf)).await.is_err()
    }

    async fn times_out(stream: &mut Replies<DuplexStream>) {
        let mut buf = [0u8; 64];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => panic!("closed instead of timing out"),
                Ok(_) => continue,
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
                    return;
                }
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_pipelined_request_whose_last_reply_never_comes_times_out() {
        let (mut stream, mut far) = connected().await;
        // BEGIN and a locking SELECT, pipelined: two Syncs, two ReadyForQuery owed.
        let request = [message(b'Q', b"BEGIN\0"), message(b'P', b"\0SELECT 1\0\0\0"), message(b'S', b"")].concat();
        stream.write_all(&request).await.unwrap();
        assert_eq!(stream.track.owed, 2);
        // The first reply arrives whole, then half of the second, then nothing.
        far.write_all(&[message(b'C', b"BEGIN\0"), ready(), vec![b'1', 0, 0]].concat()).await.unwrap();
        times_out(&mut stream).await;
    }

    #[tokio::test(start_paused = true)]
    async fn answered_requests_leave_the_connection_idle_for_as_long_as_it_likes() {
        let (mut stream, mut far) = connected().await;
        assert!(idles(&mut stream).await, "a connection owing nothing is never timed out");
        stream.write_all(&[message(b'Q', b"SELECT 1\0"), message(b'S', b"")].concat()).await.unwrap();
        // Replies that trickle in over longer than the limit, each part within it, keep the
        // request alive.
        let trickle = async {
            for part in [message(b'C', b"SELECT 1\0"), ready(), ready()] {
                tokio::time::sleep(LIMIT * 3 / 4).await;
                far.write_all(&part).await.unwrap();
            }
        };
        let mut buf = [0u8; 64];
        let read = async {
            while stream.track.owed > 0 {
                assert!(stream.read(&mut buf).await.unwrap() > 0);
            }
        };
        tokio::join!(trickle, read);
        // Notifications arrive unasked; they owe nothing.
        far.write_all(&message(b'A', b"\0\0\0\x01ch\0\0")).await.unwrap();
        assert!(stream.read(&mut buf).await.unwrap() > 0);
        assert!(idles(&mut stream).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_split_across_writes_is_followed() {
        let (mut stream, _far) = connected().await;
        let request = message(b'Q', b"SELECT pg_sleep(1)\0");
        for byte in &request {
            stream.write_all(std::slice::from_ref(byte)).await.unwrap();
        }
        assert_eq!(stream.track.owed, 1);
        times_out(&mut stream).await;
    }

    #[tokio::test(start_paused = true)]
    async fn tls_accepted_stops_the_tracking_and_refused_keeps_it() {
        let mut ssl_request = 8u32.to_be_bytes().to_vec();
        ssl_request.extend(SSL_REQUEST.to_be_bytes());
        let mut buf = [0u8; 64];

        let (near, mut far) = tokio::io::duplex(1 << 16);
        let mut stream = Replies::new(near, LIMIT);
        stream.write_all(&ssl_request).await.unwrap();
        far.write_all(b"N").await.unwrap();
        assert!(stream.read(&mut buf).await.unwrap() > 0);
        stream.write_all(&startup()).await.unwrap();
        assert_eq!(stream.track.owed, 1, "plain after N: the startup message is followed");
        times_out(&mut stream).await;

        let (near, mut far) = tokio::io::duplex(1 << 16);
        let mut stream = Replies::new(near, LIMIT);
        stream.write_all(&ssl_request).await.unwrap();
        far.write_all(b"S\x16\x03\x01").await.unwrap();
        assert!(stream.read(&mut buf).await.unwrap() > 0);
        stream.write_all(b"\x16\x03\x01\x02\x00 a client hello").await.unwrap();
        assert!(stream.track.off, "ciphertext is not followed");
        assert!(idles(&mut stream).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_copy_from_stdin_leaves_nothing_owed_once_it_ends() {
        let (mut stream, mut far) = connected().await;
        // As tokio-postgres's copy_in: Bind, Execute, Sync; the data; CopyDone, Sync.
        let request = [message(b'B', b"\0\0\0\0\0\0\0"), message(b'E', b"\0\0\0\0\0"), message(b'S', b"")].concat();
        stream.write_all(&request).await.unwrap();
        far.write_all(&message(b'G', b"\0\0\0")).await.unwrap();
        let mut buf = [0u8; 64];
        assert!(stream.read(&mut buf).await.unwrap() > 0);
        stream.write_all(&[message(b'd', b"1\n"), message(b'c', b""), message(b'S', b"")].concat()).await.unwrap();
        far.write_all(&[message(b'C', b"COPY 1\0"), ready()].concat()).await.unwrap();
        while stream.track.owed > 0 {
            assert!(stream.read(&mut buf).await.unwrap() > 0);
        }
        assert!(idles(&mut stream).await, "the Sync the server ignored is not waited for");
    }

    #[test]
    fn bytes_that_are_not_the_protocol_turn_tracking_off() {
        let mut track = Track::default();
        track.sent(&startup());
        track.received(b"HTTP/1.1 400 Bad Request\r\n");
        assert!(track.off);
    }
}
