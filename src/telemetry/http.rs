//! The one small HTTP listener: `/metrics`, `/healthz` (liveness), `/readyz` (readiness).

use std::convert::Infallible;
use std::net::SocketAddr;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::health::Health;

#[derive(Clone)]
pub struct Endpoints {
    pub registry: Registry,
    pub health: Health,
}

/// Binds `addr` now (so a taken port fails startup) and returns the serving future.
pub async fn bind(
    addr: SocketAddr,
    endpoints: Endpoints,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    info!(address = %local, "telemetry listener bound");
    Ok((local, serve(listener, endpoints, shutdown)))
}

async fn serve(listener: TcpListener, endpoints: Endpoints, shutdown: CancellationToken) {
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => { debug!(%error, "accept failed"); continue; }
            },
            _ = shutdown.cancelled() => return,
        };
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| respond(req, endpoints.clone()));
            if let Err(error) = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await {
                debug!(%error, "telemetry connection ended with an error");
            }
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
