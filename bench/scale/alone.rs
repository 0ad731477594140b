//! The relays alone: the capacity model's per-cycle terms, measured on the scale run's layout.

use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use super::{Deployment, OWNERS, Processes, per_tick};

/// What the relays cost on their own at a modest rate (`relays_alone`), counted over the
/// measured window: CPU seconds beyond what each kind of process costs at rest.
pub struct RelaysAlone {
    pub relays_seconds: f64,
    /// The backends serving the relays' connections (the owner databases' work).
    pub owner_pg_seconds: f64,
    /// The three Redis primaries: the relays' appends.
    pub redis_seconds: f64,
    pub rows: i64,
    /// Settle transactions: one per claim cycle that delivered rows.
    pub cycles: i64,
}

impl RelaysAlone {
    /// Rows per claim cycle.
    pub fn fill(&self) -> f64 {
        self.rows as f64 / self.cycles.max(1) as f64
    }
}

/// The deployment's relays alone (no bridge, no consumer load) while a producer writes `rate`
/// events/s: what their claim cycles cost them, their databases and Redis on this layout when
/// each carries few rows and starts after a poll's wait — the capacity model's per-cycle terms.
/// The relays are measured at rest first (started on the empty outboxes, 3 s to start, 10 s
/// measured, as the deployment's rest), then over `window` after 3 s of the load; rows and
/// settles are counted by their `delivered_at` within the window.
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
    let rest = deployment.rest_of(&relays).await?;
    let warmup = Duration::from_secs(3);
    let measured = async {
        tokio::time::sleep(warmup).await;
        let (from, before, clock) = (deployment.clock().await?, deployment.cpu(&relays).await?, Instant::now());
        tokio::time::sleep(window).await;
        let (to, after) = (deployment.clock().await?, deployment.cpu(&relays).await?);
        anyhow::Ok((after.since(&before), clock.elapsed().as_secs_f64(), from, to))
    };
    let written: Vec<AtomicUsize> = (0..OWNERS).map(|_| Default::default()).collect();
    let until = Instant::now() + warmup + window;
    let (produced, measured) =
        futures_util::future::join(deployment.produce(&written, per_tick(rate), until), measured).await;
    produced?;
    let (used, seconds, from, to) = measured?;
    let counted = deployment.counted_between(&from, &to).await?;
    drop(relays);
    deployment.drop_schemas().await?;
    let beyond_rest = |used: f64, at_rest: f64| used - at_rest * seconds;
    Ok(RelaysAlone {
        relays_seconds: beyond_rest(used.relays, rest.relays),
        owner_pg_seconds: beyond_rest(used.owner_pg, rest.owner_pg),
        redis_seconds: beyond_rest(used.redis.iter().sum(), rest.redis.iter().sum()),
        rows: counted.rows,
        cycles: counted.settles,
    })
}
