//! Connections that notice a silent network failure. A partition, a lost NAT entry or a proxy
//! that lost its upstream sends no RST and no FIN: a request written into such a connection is
//! never answered, and without a deadline of the client's own the statement (and the loop that
//! sent it) waits for ever while the process looks healthy.
//!
//! Every pooled connection is opened here, on a socket of our own, so that it can be watched:
//! once a request is written, some reply must come back within `database.reply_timeout`, or
//! the connection fails with `TimedOut`; and until each request's last reply has come
//! (`replies`), the stream must keep making progress within that time. Its client is then
//! closed, the statement fails as an outage (invariant 6), the pool discards the connection, and
//! the next claim opens a new one.
//! A connection that waits for nothing (idle in the pool, a locked batch held open while its
//! rows are appended) is never timed out: only an unanswered request arms the deadline.
//!
//! The kernel's own checks back this up where the network really is gone (no ACK comes back):
//! TCP keepalive probes for an idle connection and `TCP_USER_TIMEOUT` for unacknowledged data,
//! both derived from the same timeout.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::store::net::{Watched, tune};
use crate::store::postgres::replies::{Replies, Tracked, WatchedTls};

use deadpool_postgres::Connect;
use futures_util::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_postgres::config::{Host, TargetSessionAttrs};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Config};
use tokio_postgres_rustls::MakeRustlsConnect;

/// A socket of ours, or the reason it could not be opened (which tokio-postgres then reports
/// through its own error type on the first write: it has no public constructor for one).
pub(crate) enum Socket {
    Open(Replies<Watched<TcpStream>>),
    Failed(Option<io::Error>),
}

impl AsyncRead for Socket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Open(s) => Pin::new(s).poll_read(cx, buf),
            Socket::Failed(e) => Poll::Ready(Err(failure(e))),
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Socket::Open(s) => Pin::new(s).poll_write(cx, data),
            Socket::Failed(e) => Poll::Ready(Err(failure(e))),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Open(s) => Pin::new(s).poll_flush(cx),
            Socket::Failed(_) => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Open(s) => Pin::new(s).poll_shutdown(cx),
            Socket::Failed(_) => Poll::Ready(Ok(())),
        }
    }
}

impl Tracked for Socket {
    fn stop_tracking(&mut self) {
        if let Socket::Open(s) = self {
            s.stop_tracking();
        }
    }
}

fn failure(e: &mut Option<io::Error>) -> io::Error {
    e.take().unwrap_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "not connected"))
}

/// The pool's way of opening a connection: each TCP host of the URL in turn (as libpq does),
/// on a watched socket. A URL naming a Unix socket or `hostaddr` is connected by tokio-postgres
/// itself, with only the kernel's checks.
pub(crate) struct WatchedConnect {
    pub tls: MakeRustlsConnect,
    pub reply_timeout: Duration,
    /// The session's `statement_timeout` and `idle_in_transaction_session_timeout`, set once
    /// connected.
    pub statement_timeout: Duration,
    pub idle_in_transaction: Duration,
}

impl Connect for WatchedConnect {
    fn connect(&self, config: &Config) -> BoxFuture<'_, Result<(Client, JoinHandle<()>), tokio_postgres::Error>> {
        let config = config.clone();
        Box::pin(async move {
            let tcp_only = config.get_hostaddrs().is_empty()
                && !config.get_hosts().is_empty()
                && config.get_hosts().iter().all(|h| matches!(h, Host::Tcp(_)));
            let (client, task) = if tcp_only {
                connect_watched(&config, self.tls.clone(), self.reply_timeout).await?
            } else {
                let (client, connection) = config.connect(self.tls.clone()).await?;
                (client, tokio::spawn(drive(connection)))
            };
            // The server holds each statement to the limit, and ends a session cut off
            // mid-transaction (its locks released). A server that knows neither setting (a
            // Postgres-like one) still serves: only the client's own deadline then applies.
            let settings = format!(
                "SET statement_timeout = {}; SET idle_in_transaction_session_timeout = {}",
                self.statement_timeout.as_millis().max(1),
                self.idle_in_transaction.as_millis().max(1)
            );
            if let Err(error) = client.batch_execute(&settings).await {
                tracing::warn!(%error, "the database refused handoff's session limits; only its own deadline applies");
            }
            Ok((client, task))
        })
    }
}

async fn connect_watched(
    config: &Config,
    mut tls: MakeRustlsConnect,
    reply_timeout: Duration,
) -> Result<(Client, JoinHandle<()>), tokio_postgres::Error> {
    let hosts = config.get_hosts();
    let mut last = None;
    for (i, host) in hosts.iter().enumerate() {
        let Host::Tcp(host) = host else { continue };
        let port = config.get_ports().get(i).or(config.get_ports().first()).copied().unwrap_or(5432);
        let socket = open(host, port, config.get_connect_timeout().copied(), reply_timeout).await;
        let connector = <MakeRustlsConnect as MakeTlsConnect<Socket>>::make_tls_connect(&mut tls, host)
            .unwrap_or_else(|never| match never {});
        let connector = WatchedTls { inner: connector, limit: reply_timeout };
        let attempt = async {
            let (client, connection) = config.connect_raw(socket, connector).await?;
            let task = tokio::spawn(drive(connection));
            if config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite {
                let row = client.simple_query("SHOW transaction_read_only").await?;
                let read_only = row.iter().any(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0) == Some("on"),
                    _ => false,
                });
                if read_only {
                    task.abort();
                    return Ok(None);
                }
            }
            Ok::<_, tokio_postgres::Error>(Some((client, task)))
        };
        match attempt.await {
            Ok(Some(connected)) => return Ok(connected),
            Ok(None) => last = Some(tokio_postgres::Error::__private_api_timeout()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(tokio_postgres::Error::__private_api_timeout))
}

async fn open(host: &str, port: u16, connect_timeout: Option<Duration>, reply_timeout: Duration) -> Socket {
    let connecting = TcpStream::connect((host, port));
    let tcp = match connect_timeout {
        Some(limit) => match tokio::time::timeout(limit, connecting).await {
            Ok(tcp) => tcp,
            Err(_) => {
                Err(io::Error::new(io::ErrorKind::TimedOut, format!("no connection to {host}:{port} within {limit:?}")))
            }
        },
        None => connecting.await,
    };
    let tcp = match tcp.and_then(|tcp| tune(&tcp, reply_timeout).map(|()| tcp)) {
        Ok(tcp) => tcp,
        Err(e) => return Socket::Failed(Some(io::Error::new(e.kind(), format!("connecting to {host}:{port}: {e}")))),
    };
    Socket::Open(Replies::new(Watched::new(tcp, reply_timeout), reply_timeout))
}

async fn drive<C: Future<Output = Result<(), tokio_postgres::Error>>>(connection: C) {
    if let Err(error) = connection.await {
        tracing::debug!(%error, "database connection ended");
    }
}
