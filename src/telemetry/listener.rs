//! The one way handoff serves HTTP, on the telemetry port and the admin port alike, so that
//! neither can be flooded into starving the probes or exhausting the process's memory (the
//! relay's and bridge's loops share it):
//! - at most `max_connections` open; a new one closes the connection open longest without a
//!   request in progress ([`Connections`]);
//! - a TLS handshake and a request's headers (keep-alive waits included) must arrive within
//!   `header_read_timeout`, and the headers fit in [`MAX_HEADER_BYTES`];
//! - a connection is closed at [`CONNECTION_MAX_AGE`], once its request in progress is answered.
//!
//! A handler that reads a request body bounds its size and time itself ([`read_body`]).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::connections::{Admitted, Connections};

/// A connection is closed after this, once the request in progress (if any) is answered
/// (clients reconnect).
pub(crate) const CONNECTION_MAX_AGE: Duration = Duration::from_secs(60);
/// A request's line and headers together: more is refused (hyper answers 431).
pub(crate) const MAX_HEADER_BYTES: usize = 64 * 1024;

/// A listener's limits against slow or flooding clients.
#[derive(Clone)]
pub(crate) struct Settings {
    /// What the listener is, for its log lines ("telemetry", "admin").
    pub name: &'static str,
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// Serves `handle` on `listener` until `shutdown`.
pub(crate) async fn serve<H, F>(listener: TcpListener, settings: Settings, handle: H, shutdown: CancellationToken)
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let connections = Connections::new(settings.max_connections);
    let tls = settings.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let settings = Arc::new(settings);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => { debug!(listener = settings.name, %error, "accept failed"); continue; }
            },
            _ = shutdown.cancelled() => return,
        };
        let Some(admitted) = connections.admit() else {
            debug!(listener = settings.name, %peer, limit = settings.max_connections, "every connection is serving a request; closing");
            drop(stream);
            continue;
        };
        let (handle, settings, tls) = (handle.clone(), settings.clone(), tls.clone());
        tokio::spawn(async move {
            let Some(tls) = tls else {
                return connection(stream, admitted, handle, &settings).await;
            };
            let handshake = tokio::time::timeout(settings.header_read_timeout, tls.accept(stream));
            tokio::select! {
                accepted = handshake => match accepted {
                    Ok(Ok(stream)) => connection(stream, admitted, handle, &settings).await,
                    Ok(Err(error)) => debug!(listener = settings.name, %peer, %error, "TLS handshake failed"),
                    Err(_) => debug!(listener = settings.name, %peer, "TLS handshake timed out"),
                },
                _ = admitted.closed.cancelled() => {}
            }
        });
    }
}

/// Serves one connection until it ends, reaches its maximum age, or is closed to make room.
async fn connection<S, H, F>(stream: S, admitted: Admitted, handle: H, settings: &Settings)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let busy = admitted.busy.clone();
    let service = service_fn(move |request| {
        let (handle, busy) = (handle.clone(), busy.clone());
        async move {
            busy.store(true, Ordering::Relaxed);
            let response = handle(request).await;
            busy.store(false, Ordering::Relaxed);
            Ok::<_, Infallible>(response)
        }
    });
    let serving = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        .max_buf_size(MAX_HEADER_BYTES)
        .serve_connection(TokioIo::new(stream), service);
    let name = settings.name;
    let mut serving = std::pin::pin!(serving);
    let ended = tokio::select! {
        ended = serving.as_mut() => ended,
        () = tokio::time::sleep(CONNECTION_MAX_AGE) => {
            // A request in progress is finished first (an admin mutation is never cut off
            // half way); the connection then closes instead of waiting for another.
            debug!(listener = name, "connection at its maximum age; closing after the request in progress");
            serving.as_mut().graceful_shutdown();
            tokio::select! {
                ended = serving.as_mut() => ended,
                _ = admitted.closed.cancelled() => Ok(()),
            }
        }
        _ = admitted.closed.cancelled() => {
            debug!(listener = name, "connection closed to make room for a new one");
            Ok(())
        }
    };
    if let Err(error) = ended {
        debug!(listener = name, %error, "connection ended with an error");
    }
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("request body: larger than {0} bytes")]
    TooLarge(usize),
    #[error("request body: not received within {0:?}")]
    TooSlow(Duration),
    #[error("request body: {0}")]
    Broken(String),
}

/// Reads a request's body, at most `max` bytes within `within`.
pub(crate) async fn read_body(body: Incoming, max: usize, within: Duration) -> Result<Bytes, BodyError> {
    match tokio::time::timeout(within, Limited::new(body, max).collect()).await {
        Err(_) => Err(BodyError::TooSlow(within)),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge(max)),
        Ok(Err(e)) => Err(BodyError::Broken(e.to_string())),
    }
}
