//! What both dialects' connections share against silent network failures (a partition, a lost
//! NAT entry, a proxy that lost its upstream: no RST, no FIN): a stream that fails once a
//! request goes unanswered for `database.reply_timeout` ([`Watched`]), and the kernel's own
//! checks on the socket ([`tune`]). Postgres opens its pooled connections on a watched socket
//! (`postgres::watched`); MySQL's driver takes no socket, so its pool connects through a watched
//! tunnel (`mysql::tunnel`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

/// A stream whose reads fail with `TimedOut` when a write has gone unanswered for `limit`.
pub(crate) struct Watched<S> {
    inner: S,
    limit: Duration,
    /// Armed by the first write since the last byte read; disarmed by the next byte read.
    due: Option<Pin<Box<Sleep>>>,
}

impl<S> Watched<S> {
    pub(crate) fn new(inner: S, limit: Duration) -> Self {
        Self { inner, limit, due: None }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.due = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let limit = self.limit;
                overdue(&mut self.due, cx, || format!("the database sent no reply within {limit:?}"))
            }
        }
    }
}

/// What a watched stream's read answers while its inner stream has nothing: `TimedOut` once
/// `due` has passed (`what` says what was missed), else `Pending` with the timer registered.
pub(crate) fn overdue(
    due: &mut Option<Pin<Box<Sleep>>>,
    cx: &mut Context<'_>,
    what: impl FnOnce() -> String,
) -> Poll<io::Result<()>> {
    match due.as_mut().map(|due| due.as_mut().poll(cx)) {
        Some(Poll::Ready(())) => Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{} (database.reply_timeout and a margin); connection closed", what()),
        ))),
        _ => Poll::Pending,
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) && self.due.is_none() {
            self.due = Some(Box::pin(tokio::time::sleep(self.limit)));
            // The reader may be parked already without a timer; have it polled again so that
            // the deadline is registered with this task.
            cx.waker().wake_by_ref();
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

/// No Nagle delay; keepalive probes that give up within about the reply timeout on an idle
/// connection; unacknowledged data that fails the connection after the reply timeout.
pub(crate) fn tune(tcp: &TcpStream, reply_timeout: Duration) -> io::Result<()> {
    tcp.set_nodelay(true)?;
    let socket = socket2::SockRef::from(tcp);
    let probe = (reply_timeout / 4).max(Duration::from_secs(1));
    let keepalive = socket2::TcpKeepalive::new().with_time(probe).with_interval(probe).with_retries(3);
    socket.set_tcp_keepalive(&keepalive)?;
    #[cfg(target_os = "linux")]
    socket.set_tcp_user_timeout(Some(reply_timeout))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_write_fails_the_read_after_the_limit_and_an_answer_disarms_it() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut watched = Watched::new(near, Duration::from_secs(5));
        let mut buf = [0u8; 8];
        // Nothing asked: waiting for data is not overdue.
        assert!(tokio::time::timeout(Duration::from_secs(60), watched.read(&mut buf)).await.is_err());
        watched.write_all(b"ask").await.unwrap();
        far.write_all(b"ok").await.unwrap();
        assert_eq!(watched.read(&mut buf).await.unwrap(), 2);
        // Answered: idle again for as long as it likes.
        assert!(tokio::time::timeout(Duration::from_secs(60), watched.read(&mut buf)).await.is_err());
        watched.write_all(b"ask again").await.unwrap();
        let error = watched.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(error.to_string().contains("no reply within 5s"), "{error}");
    }
}
