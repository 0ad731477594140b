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
    let relays = Processes { relays: deployment.spawn_relays()?, bridges: Vec::new() };
    let cpu = || relays.relays.iter().map(|c| resources(c.id()).1).sum::<f64>();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = cpu();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rest = (cpu() - started) / 5.0;
    let now = || async { deployment.owners[0].db.query_one("SELECT clock_timestamp()::text", &[]).await };
    let warmup = Duration::from_secs(3);
    let measured = async {
        tokio::time::sleep(warmup).await;
        let (from, before, clock) = (now().await?.get::<_, String>(0), cpu(), Instant::now());
        tokio::time::sleep(window).await;
        let (to, after) = (now().await?.get::<_, String>(0), cpu());
        anyhow::Ok((after - before - rest * clock.elapsed().as_secs_f64(), from, to))
    };
    let written: Vec<AtomicUsize> = (0..OWNERS).map(|_| Default::default()).collect();
    let until = Instant::now() + warmup + window;
    let (produced, measured) =
        futures_util::future::join(deployment.produce(&written, per_tick(rate), until), measured).await;
    produced?;
    let (cpu_seconds, from, to) = measured?;
    let (mut rows, mut cycles) = (0, 0);
    for owner in &deployment.owners {
        let counted = owner
            .db
            .query_one(
                "SELECT count(*), count(DISTINCT delivered_at) FROM audit_outbox
                 WHERE delivered_at >= $1::text::timestamptz AND delivered_at < $2::text::timestamptz",
                &[&from, &to],
            )
            .await?;
        rows += counted.get::<_, i64>(0);
        cycles += counted.get::<_, i64>(1);
    }
    drop(relays);
    deployment.drop_schemas().await?;
    Ok(RelaysAlone { cpu_seconds, rows, cycles })
}
