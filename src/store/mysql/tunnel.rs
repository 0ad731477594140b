//! A watched path to MySQL. mysql_async has no client-side deadline of its own and takes no
//! socket from its caller, so after a silent network failure (a partition, a lost NAT entry: no
//! RST, no FIN) a statement would wait on its connection for ever, and a connection given up
//! mid-statement would hang its pool's recycler draining a reply that never comes.
//!
//! The pool therefore connects through this in-process tunnel on loopback, which forwards each
//! connection to the server unchanged (TLS, when on, runs end to end through it) and closes
//! both ends when a request goes unanswered for `database.reply_timeout` — the same rule as
//! Postgres's watched sockets. The driver then sees its connection fail at once, the statement
//! fails as an outage and the connection is discarded. The server-side socket also carries TCP
//! keepalive and a user timeout derived from the same timeout.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use crate::store::net::{Watched, tune};

/// A tunnel's local end; it stops when the last pool holding it is dropped.
pub(crate) struct Tunnel {
    pub local: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Opens a tunnel to `host:port`; `None` outside a Tokio runtime (the pool then connects
/// directly, with only the kernel's checks).
pub(crate) fn open(
    host: &str,
    port: u16,
    connect_timeout: Duration,
    reply_timeout: Duration,
) -> io::Result<Option<Tunnel>> {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return Ok(None) };
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    let _entered = runtime.enter();
    let listener = TcpListener::from_std(listener)?;
    // A URL's IPv6 literal comes bracketed (`[::1]`); a socket address takes it bare.
    let upstream = (host.trim_start_matches('[').trim_end_matches(']').to_owned(), port);
    let task = runtime.spawn(async move {
        loop {
            let client = match listener.accept().await {
                Ok((client, _)) => client,
                Err(error) => {
                    // Out of file descriptors, say: wait instead of spinning.
                    debug!(%error, "database tunnel accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Err(error) = forward(client, &upstream, connect_timeout, reply_timeout).await {
                    match error.kind() {
                        io::ErrorKind::TimedOut => warn!(%error, "database connection closed"),
                        _ => debug!(%error, "database connection ended"),
                    }
                }
            });
        }
    });
    Ok(Some(Tunnel { local, task }))
}

/// Carries one connection both ways until either end closes it, or the server leaves a request
/// unanswered for `reply_timeout` ([`Watched`]): then both ends close.
async fn forward(
    mut client: TcpStream,
    (host, port): &(String, u16),
    connect_timeout: Duration,
    reply_timeout: Duration,
) -> io::Result<()> {
    let connecting = tokio::time::timeout(connect_timeout, TcpStream::connect((host.as_str(), *port)));
    let server = connecting.await.map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect"))??;
    tune(&server, reply_timeout)?;
    client.set_nodelay(true)?;
    let mut server = Watched::new(server, reply_timeout);
    tokio::io::copy_bidirectional(&mut client, &mut server).await.map(drop)
}
