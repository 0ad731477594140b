//! The one small HTTP listener: `/metrics`, `/healthz` (liveness), `/readyz` (readiness).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::health::Health;

#[derive(Clone)]
pub struct Endpoints {
    pub registry: Registry,
    pub health: Health,
}

/// Limits that keep a slow or flooding client from holding the listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A request's headers must arrive within this time.
    pub header_read_timeout: Duration,
    /// Connections served at once; more are closed on accept.
    pub max_connections: usize,
}

/// No connection lives longer than this, whatever it does (scrapers reconnect).
const CONNECTION_MAX_AGE: Duration = Duration::from_secs(60);

/// Binds `addr` now (so a taken port fails startup) and returns the serving future.
pub async fn bind(
    addr: SocketAddr,
    endpoints: Endpoints,
    limits: Limits,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    info!(address = %local, "telemetry listener bound");
    Ok((local, serve(listener, endpoints, limits, shutdown)))
}

async fn serve(listener: TcpListener, endpoints: Endpoints, limits: Limits, shutdown: CancellationToken) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => { debug!(%error, "accept failed"); continue; }
            },
            _ = shutdown.cancelled() => return,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!(%peer, limit = limits.max_connections, "telemetry connection limit reached; closing");
            drop(stream);
            continue;
        };
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| respond(req, endpoints.clone()));
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_MAX_AGE, connection).await {
                Ok(Err(error)) => debug!(%error, "telemetry connection ended with an error"),
                Err(_) => debug!(%peer, "telemetry connection closed at its maximum age"),
                Ok(Ok(())) => {}
            }
            drop(slot);
        });
    }
}

async fn respond(req: Request<Incoming>, endpoints: Endpoints) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::GET {
        return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into()));
    }
    Ok(match req.uri().path() {
        "/metrics" => metrics(&endpoints.registry),
        "/healthz" => match endpoints.health.stalled() {
            stalled if stalled.is_empty() => text(StatusCode::OK, "ok\n".into()),
            stalled => text(StatusCode::SERVICE_UNAVAILABLE, format!("stalled: {}\n", stalled.join(", "))),
        },
        "/readyz" => match endpoints.health.not_ready() {
            reasons if reasons.is_empty() => text(StatusCode::OK, "ready\n".into()),
            reasons => text(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {}\n", reasons.join("; "))),
        },
        _ => text(StatusCode::NOT_FOUND, "not found: try /metrics, /healthz, /readyz\n".into()),
    })
}

fn metrics(registry: &Registry) -> Response<Full<Bytes>> {
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    match encoder.encode(&registry.gather(), &mut body) {
        Ok(()) => Response::builder()
            .header("content-type", encoder.format_type())
            .body(Full::new(Bytes::from(body)))
            .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n".into())),
        Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding failed: {error}\n")),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}
