//! The admin listener (`[admin]`, off by default): a JSON API over the operator operations the
//! CLI runs (`ops`), and a read-only status page. Every call needs a token; mutations need a
//! write token and are logged with who made them. Apart from `telemetry.listen`, so the probes
//! and `/metrics` never share its credentials or its load.

mod api;
mod auth;
mod bodies;
#[cfg(fuzzing)]
pub(crate) use bodies::read_every_kind;
mod guard;
mod idempotency;
mod page;
mod replay;
mod reply;
mod state;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::telemetry::listener::Settings;

pub(crate) use state::AdminState;

/// Binds `[admin] listen` now (a taken port fails startup) and returns the serving future.
pub(crate) async fn bind(
    state: Arc<AdminState>,
    shutdown: CancellationToken,
) -> anyhow::Result<(SocketAddr, impl Future<Output = ()>)> {
    let admin = state.config.admin.clone().ok_or_else(|| anyhow::anyhow!("no [admin]"))?;
    let tls = admin.tls.as_ref().map(crate::tls::server_config).transpose().map_err(|e| anyhow::anyhow!(e))?;
    let listener = TcpListener::bind(admin.listen).await?;
    let local = listener.local_addr()?;
    info!(address = %local, scheme = if tls.is_some() { "https" } else { "http" }, tokens = admin.tokens.len(), "admin listener bound");
    let settings = Settings {
        name: "admin",
        header_read_timeout: admin.header_read_timeout,
        max_connections: admin.max_connections,
        tls: tls.map(Arc::new),
    };
    let handle = move |request| {
        let state = state.clone();
        async move { api::handle(&state, request).await }
    };
    Ok((local, crate::telemetry::listener::serve(listener, settings, handle, shutdown)))
}
