//! The admin listener (`[admin]`, off by default): a JSON API over the operator operations the
//! CLI runs (`ops`), and a read-only status page. Every call needs a token; mutations need a
//! write token and are logged with who made them. Apart from `telemetry.listen`, so the probes
//! and `/metrics` never share its credentials or its load.

mod api;
mod auth;
mod bodies;
mod guard;
mod idempotency;
mod page;
mod replay;
mod reply;
mod state;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

pub use state::AdminState;

/// Binds `[admin] listen` now (a taken port fails startup) and returns the serving future.
pub async fn bind(
    state: Arc<AdminState>,
    shutdown: CancellationToken,
) -> anyhow::Result<(SocketAddr, impl Future<Output = ()>)> {
    let admin = state.config.admin.clone().ok_or_else(|| anyhow::anyhow!("no [admin]"))?;
    let tls = admin.tls.as_ref().map(crate::tls::server_config).transpose().map_err(|e| anyhow::anyhow!(e))?;
    let listener = TcpListener::bind(admin.listen).await?;
    let local = listener.local_addr()?;
    info!(address = %local, scheme = if tls.is_some() { "https" } else { "http" }, tokens = admin.tokens.len(), "admin listener bound");
    let acceptor = tls.map(|c| tokio_rustls::TlsAcceptor::from(Arc::new(c)));
    let timeout = admin.header_read_timeout;
    Ok((local, async move {
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(pair) => pair,
                    Err(error) => { debug!(%error, "admin accept failed"); continue; }
                },
                _ = shutdown.cancelled() => return,
            };
            let (state, acceptor) = (state.clone(), acceptor.clone());
            tokio::spawn(async move {
                match acceptor {
                    None => serve(TokioIo::new(stream), state, timeout).await,
                    Some(acceptor) => match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => serve(TokioIo::new(stream), state, timeout).await,
                        _ => debug!(%peer, "admin TLS handshake failed or timed out"),
                    },
                }
            });
        }
    }))
}

async fn serve<I>(io: I, state: Arc<AdminState>, timeout: std::time::Duration)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(api::handle(&state, request).await) }
    });
    let served =
        http1::Builder::new().timer(TokioTimer::new()).header_read_timeout(timeout).serve_connection(io, service);
    if let Err(error) = served.await {
        debug!(%error, "admin connection ended with an error");
    }
}
