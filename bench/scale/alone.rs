//! The relays alone: the capacity model's per-cycle term, measured on the scale run's layout.

use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use super::{Deployment, OWNERS, Processes, per_tick};
use crate::env::resources;

/// What the relays cost on their own at a modest rate (`relays_alone`), counted over the
/// measured window.
pub struct RelaysAlone {
    /// The relays' CPU seconds beyond what they cost at rest.
    pub cpu_seconds: f64,
    pub rows: i64,
    /// Settle transactions: one per claim cycle that delivered rows.
    pub cycles: i64,
}

/// The deployment's relays alone (no bridge, no consumer load) while a producer writes `rate`
/// events/s: what their claim cycles cost on this layout when each carries few rows and starts
/// after a poll's wait — the capacity model's per-cycle term. The relays are measured at rest
/// first (started on the empty outboxes, 3 s to start, 5 s measured), then over `window` after
/// 3 s of the load; rows and settles are counted by their `delivered_at` within the window.
pub async fn relays_alone(
    database_url: &str,
    binary: &std::path::Path,
    dir: &std::path::Path,
    rate: f64,
    window: Duration,
) -> anyhow::Result<RelaysAlone> {
    let deployment = Deployment::new(database_url, binary, dir).await?;
    let mut relays = Processes { relays: Vec::new(), bridges: Vec::new() };
    deployment.spawn_relays(&mut relays)?;
    let cpu = || relays.relays.iter().map(|c| resources(c.id()).1).sum::<f64>();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = cpu();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rest = (cpu() - started) / 5.0;
    let warmup = Duration::from_secs(3);
    let measured = async {
        tokio::time::sleep(warmup).await;
        let (from, before, clock) = (deployment.clock().await?, cpu(), Instant::now());
        tokio::time::sleep(window).await;
        let (to, after) = (deployment.clock().await?, cpu());
        anyhow::Ok((after - before - rest * clock.elapsed().as_secs_f64(), from, to))
    };
    let written: Vec<AtomicUsize> = (0..OWNERS).map(|_| Default::default()).collect();
    let until = Instant::now() + warmup + window;
    let (produced, measured) =
        futures_util::future::join(deployment.produce(&written, per_tick(rate), until), measured).await;
    produced?;
    let (cpu_seconds, from, to) = measured?;
    let counted = deployment.counted_between(&from, &to).await?;
    drop(relays);
    deployment.drop_schemas().await?;
    Ok(RelaysAlone { cpu_seconds, rows: counted.rows, cycles: counted.settles })
}
