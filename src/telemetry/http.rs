//! The one small HTTP listener: `/metrics`, `/healthz` (liveness), `/readyz` (readiness).
//!
//! The probes must be answered within the kubelet's timeout whatever else is connected: the
//! listener's limits are in [`super::listener`]. `/metrics` may ask for a bearer token or basic
//! authentication, and the whole listener may speak TLS, as Prometheus exporters offer; the
//! probes never ask for credentials.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::health::Health;
use super::listener::{self, Settings};
use crate::telemetry::config::{MetricsAuth, TelemetryConfig};

#[derive(Clone)]
pub(crate) struct Endpoints {
    pub registry: Registry,
    pub health: Health,
}

/// How the listener serves: limits against slow or flooding clients, TLS, credentials.
#[derive(Clone)]
pub(crate) struct Limits {
    /// A request's headers must arrive within this time (and a TLS handshake, too).
    pub header_read_timeout: Duration,
    /// Connections open at once (see [`super::connections::Connections`]).
    pub max_connections: usize,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub auth: Option<MetricsAuth>,
}

impl Limits {
    /// The listener's settings from `[telemetry]`; a TLS file that cannot be used is an error
    /// naming its key.
    pub(crate) fn from_config(telemetry: &TelemetryConfig) -> Result<Self, crate::tls::TlsError> {
        let tls = telemetry.tls.as_ref().map(crate::tls::server_config).transpose()?.map(Arc::new);
        Ok(Self {
            header_read_timeout: telemetry.header_read_timeout,
            max_connections: telemetry.max_connections,
            tls,
            auth: telemetry.auth.clone(),
        })
    }
}

/// Binds `addr` now (so a taken port fails startup) and returns the serving future.
pub(crate) async fn bind(
    addr: SocketAddr,
    endpoints: Endpoints,
    limits: Limits,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let scheme = if limits.tls.is_some() { "https" } else { "http" };
    info!(address = %local, scheme, metrics_auth = limits.auth.is_some(), "telemetry listener bound");
    let settings = Settings {
        name: "telemetry",
        header_read_timeout: limits.header_read_timeout,
        max_connections: limits.max_connections,
        tls: limits.tls.clone(),
    };
    let auth = Arc::new(limits.auth);
    let handle = move |request| {
        let (endpoints, auth) = (endpoints.clone(), auth.clone());
        async move { respond(request, &endpoints, auth.as_ref().as_ref()) }
    };
    Ok((local, listener::serve(listener, settings, handle, shutdown)))
}

fn respond(req: Request<Incoming>, endpoints: &Endpoints, auth: Option<&MetricsAuth>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into());
    }
    match req.uri().path() {
        "/metrics" => match auth {
            Some(auth) if !authorized(auth, req.headers().get(hyper::header::AUTHORIZATION)) => unauthorized(auth),
            _ => metrics(&endpoints.registry),
        },
        "/healthz" => match endpoints.health.stalled() {
            stalled if stalled.is_empty() => text(StatusCode::OK, "ok\n".into()),
            stalled => text(StatusCode::SERVICE_UNAVAILABLE, format!("stalled: {}\n", stalled.join(", "))),
        },
        "/readyz" => match endpoints.health.not_ready() {
            // Paused on purpose is still ready: a rollout or a load balancer must not treat an
            // operator's pause as a failure.
            reasons if reasons.is_empty() => match endpoints.health.paused() {
                paused if paused.is_empty() => text(StatusCode::OK, "ready\n".into()),
                paused => text(StatusCode::OK, format!("ready, paused: {}\n", paused.join("; "))),
            },
            reasons => text(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {}\n", reasons.join("; "))),
        },
        _ => text(StatusCode::NOT_FOUND, "not found: try /metrics, /healthz, /readyz\n".into()),
    }
}

/// Whether the request's `Authorization` header carries the configured credentials (compared
/// in time that does not depend on where they differ).
fn authorized(auth: &MetricsAuth, header: Option<&hyper::header::HeaderValue>) -> bool {
    let Some(given) = header.and_then(|h| h.to_str().ok()) else { return false };
    if let Some(token) = &auth.bearer_token {
        return given.strip_prefix("Bearer ").is_some_and(|t| token.matches(t));
    }
    match (&auth.basic_user, &auth.basic_password) {
        (Some(user), Some(password)) => {
            let expected =
                crate::secret::Secret::new(crate::base64::encode(format!("{user}:{}", password.expose()).as_bytes()));
            given.strip_prefix("Basic ").is_some_and(|b| expected.matches(b))
        }
        _ => false,
    }
}

fn unauthorized(auth: &MetricsAuth) -> Response<Full<Bytes>> {
    let mut response = text(StatusCode::UNAUTHORIZED, "credentials required\n".into());
    let challenge = if auth.bearer_token.is_some() { "Bearer" } else { "Basic realm=\"handoff\"" };
    response.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, hyper::header::HeaderValue::from_static(challenge));
    response
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_base64_of_user_colon_password() {
        assert_eq!(crate::base64::encode(b"prometheus:s3cret"), "cHJvbWV0aGV1czpzM2NyZXQ=");
    }

    #[test]
    fn only_the_configured_credentials_are_accepted() {
        let header = |v: &str| hyper::header::HeaderValue::from_str(v).unwrap();
        let bearer = MetricsAuth {
            bearer_token_file: None,
            basic_user: None,
            basic_password_file: None,
            bearer_token: Some(crate::secret::Secret::new("t0ken")),
            basic_password: None,
        };
        assert!(authorized(&bearer, Some(&header("Bearer t0ken"))));
        assert!(!authorized(&bearer, Some(&header("Bearer t0ke"))));
        assert!(!authorized(&bearer, None));
        let basic = MetricsAuth {
            basic_user: Some("prometheus".into()),
            bearer_token: None,
            basic_password: Some(crate::secret::Secret::new("s3cret")),
            ..bearer
        };
        assert!(authorized(&basic, Some(&header("Basic cHJvbWV0aGV1czpzM2NyZXQ="))));
        assert!(!authorized(&basic, Some(&header("Bearer t0ken"))));
    }
}
