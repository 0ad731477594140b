//! Dwell latency (commit → stream entry) at a fixed offered load, polling or with NOTIFY.

use std::time::{Duration, Instant};

use fred::prelude::*;

use crate::env::{BenchEnv, stop, time_until};
use crate::relay::relay_config;

#[derive(Debug, Clone, Copy, Default)]
pub struct Dwell {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub events: usize,
}

/// Inserts `rate` events/s for `seconds` (a statement every 10 ms) while one relay runs;
/// dwell = the stream entry id's millisecond (Redis clock) − the row's commit time.
pub async fn dwell(env: &BenchEnv, rate: usize, seconds: u64, notify: bool) -> anyhow::Result<Dwell> {
    env.reset().await?;
    // The reference trigger as `handoff migrate` leaves it: made only for a relay that listens
    // (a notifying commit holds a cluster-wide lock, which the inserts below would pay for).
    env.db.batch_execute("DROP TRIGGER IF EXISTS audit_outbox_notify ON audit_outbox").await?;
    if notify {
        env.db
            .batch_execute(
                "CREATE TRIGGER audit_outbox_notify AFTER INSERT ON audit_outbox
                 FOR EACH STATEMENT EXECUTE FUNCTION handoff_notify('handoff_outbox')",
            )
            .await?;
    }
    let extra = if notify { "[relay.notify]\n" } else { "" };
    // Polling at the default interval is what a relay without NOTIFY does.
    let config = relay_config(env, 500, extra).replace("poll_interval = \"50ms\"", "poll_interval = \"250ms\"");
    let mut child = env.spawn("relay-latency", &config)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let per_tick = (rate / 100).max(1) as i64;
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut sent = 0i64;
    while started.elapsed() < Duration::from_secs(seconds) {
        tick.tick().await;
        // clock_timestamp() while the statement runs ≈ the commit of this autocommit insert
        // (now() would be the transaction's start, the same here but not in general).
        env.db
            .execute(
                "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at)
                 SELECT 'l-' || ($1 + g), 'user', 'user-' || g, 'auth.mfa_policy_changed',
                        jsonb_build_object('auditId', 'l-' || ($1 + g), 'reason', repeat('x', 200)), clock_timestamp()
                 FROM generate_series(1, $2::bigint) g",
                &[&sent, &per_tick],
            )
            .await?;
        sent += per_tick;
    }
    let stream = env.stream("user");
    time_until(Duration::from_secs(120), || async { Ok(env.xlen(&stream).await? >= sent as u64) }).await?;
    stop(&mut child);
    let created: std::collections::HashMap<String, f64> = env
        .db
        .query("SELECT event_id, (extract(epoch FROM created_at) * 1000)::float8 FROM audit_outbox", &[])
        .await?
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, f64>(1)))
        .collect();
    let entries: Vec<(String, std::collections::HashMap<String, String>)> =
        env.redis.xrange(stream.as_str(), "-", "+", None).await?;
    let mut dwell: Vec<f64> = entries
        .iter()
        .filter_map(|(id, fields)| {
            let appended: f64 = id.split('-').next()?.parse().ok()?;
            Some((appended - created.get(&fields["event_id"])?).max(0.0))
        })
        .collect();
    dwell.sort_by(f64::total_cmp);
    let at = |q: f64| dwell.get(((dwell.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
    Ok(Dwell { p50_ms: at(0.5), p99_ms: at(0.99), max_ms: at(1.0), events: dwell.len() })
}
