//! What `/healthz` and `/readyz` answer from: each long-running loop registers a component,
//! beats on every turn, and reports whether its database and broker answered last time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone)]
pub(crate) struct Health {
    started: Instant,
    components: Arc<Mutex<Vec<Arc<Component>>>>,
}

pub(crate) struct Component {
    name: String,
    started: Instant,
    stall_after: Duration,
    last_beat_ms: AtomicU64,
    source_ok: AtomicBool,
    /// Whether the last piece of real work on the database (a takeover, a handler batch) went
    /// through. Kept apart from `source_ok`, which a periodic ping also sets: a database that
    /// answers pings but refuses the work (a missing column, a lost privilege) is not ready.
    work_ok: AtomicBool,
    stream_ok: AtomicBool,
    /// The broker `stream_ok` is about ("redis", "nats"), for the not-ready reason; none for a
    /// loop that uses no broker (a worker), whose readiness is its database's alone.
    broker: Option<&'static str>,
    running: AtomicBool,
    /// While paused (`handoff pause`): the reason given, empty if none. Still live and ready.
    paused: Mutex<Option<String>>,
}

impl Default for Health {
    fn default() -> Self {
        Self { started: Instant::now(), components: Arc::default() }
    }
}

impl Health {
    /// A loop that must beat at least every `stall_after` to count as alive, and is ready only
    /// while its `broker` ("redis", "nats", "kafka") answers; `None`: it uses none (a worker).
    pub(crate) fn register(
        &self,
        name: impl Into<String>,
        stall_after: Duration,
        broker: Option<&'static str>,
    ) -> Arc<Component> {
        let component = Arc::new(Component {
            broker,
            name: name.into(),
            started: self.started,
            stall_after,
            last_beat_ms: AtomicU64::new(self.started.elapsed().as_millis() as u64),
            source_ok: AtomicBool::new(false),
            work_ok: AtomicBool::new(true),
            stream_ok: AtomicBool::new(false),
            running: AtomicBool::new(true),
            paused: Mutex::new(None),
        });
        self.components.lock().expect("health lock").push(component.clone());
        component
    }

    /// Liveness: names of running loops that have not beaten within their allowance.
    pub(crate) fn stalled(&self) -> Vec<String> {
        let now_ms = self.started.elapsed().as_millis() as u64;
        self.components
            .lock()
            .expect("health lock")
            .iter()
            .filter(|c| c.running.load(Ordering::Relaxed))
            .filter(|c| {
                now_ms.saturating_sub(c.last_beat_ms.load(Ordering::Relaxed)) > c.stall_after.as_millis() as u64
            })
            .map(|c| c.name.clone())
            .collect()
    }

    /// Readiness: why the process should not receive traffic / count as up, empty when ready.
    pub(crate) fn not_ready(&self) -> Vec<String> {
        let components: Vec<Arc<Component>> = self.components.lock().expect("health lock").clone();
        let mut reasons = Vec::new();
        for c in &components {
            if !c.running.load(Ordering::Relaxed) {
                reasons.push(format!("{}: not running", c.name));
                continue;
            }
            if !c.source_ok.load(Ordering::Relaxed) {
                reasons.push(format!("{}: database unreachable", c.name));
            } else if !c.work_ok.load(Ordering::Relaxed) {
                reasons.push(format!("{}: database refuses the work", c.name));
            }
            // A paused component does not use its broker: it is not waiting for it.
            let paused = c.paused.lock().expect("health lock").is_some();
            if let Some(broker) = c.broker.filter(|_| !c.stream_ok.load(Ordering::Relaxed) && !paused) {
                reasons.push(format!("{}: {broker} unreachable", c.name));
            }
        }
        reasons.extend(self.stalled().into_iter().map(|n| format!("{n}: stalled")));
        reasons
    }

    /// The running components that are paused, each as `name (reason)`: ready, but doing nothing
    /// on purpose (`/readyz` says so beside its 200).
    pub(crate) fn paused(&self) -> Vec<String> {
        let components: Vec<Arc<Component>> = self.components.lock().expect("health lock").clone();
        components
            .iter()
            .filter(|c| c.running.load(Ordering::Relaxed))
            .filter_map(|c| match c.paused.lock().expect("health lock").as_deref() {
                None => None,
                Some("") => Some(c.name.clone()),
                Some(reason) => Some(format!("{} ({reason})", c.name)),
            })
            .collect()
    }
}

impl Component {
    pub(crate) fn beat(&self) {
        self.last_beat_ms.store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Sleeps `duration`, beating every second meanwhile: a loop waiting out an outage's
    /// backoff (which grows to half a minute) is alive, whatever its `stall_after`.
    pub(crate) async fn sleep(&self, duration: std::time::Duration) {
        let until = tokio::time::Instant::now() + duration;
        loop {
            self.beat();
            let now = tokio::time::Instant::now();
            if now >= until {
                return;
            }
            tokio::time::sleep((until - now).min(std::time::Duration::from_secs(1))).await;
        }
    }

    pub(crate) fn set_source_ok(&self, ok: bool) {
        self.source_ok.store(ok, Ordering::Relaxed);
    }

    pub(crate) fn set_work_ok(&self, ok: bool) {
        self.work_ok.store(ok, Ordering::Relaxed);
    }

    pub(crate) fn set_stream_ok(&self, ok: bool) {
        self.stream_ok.store(ok, Ordering::Relaxed);
    }

    /// Paused with `reason` (empty if none given), or running again (`None`).
    pub(crate) fn set_paused(&self, reason: Option<String>) {
        *self.paused.lock().expect("health lock") = reason;
    }

    pub(crate) fn stopped(&self) {
        self.running.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_is_ready_only_when_both_ends_answer() {
        let health = Health::default();
        let c = health.register("relay audit", Duration::from_secs(60), Some("redis"));
        assert_eq!(health.not_ready().len(), 2);
        c.set_source_ok(true);
        c.set_stream_ok(true);
        assert!(health.not_ready().is_empty());
        c.set_stream_ok(false);
        assert_eq!(health.not_ready(), ["relay audit: redis unreachable"]);
    }

    #[test]
    fn the_not_ready_reason_names_the_component_s_broker() {
        let health = Health::default();
        let c = health.register("bridge audit.user", Duration::from_secs(60), Some("nats"));
        c.set_source_ok(true);
        assert_eq!(health.not_ready(), ["bridge audit.user: nats unreachable"]);
    }

    #[test]
    fn a_database_that_answers_pings_but_refuses_the_work_is_not_ready() {
        let health = Health::default();
        let c = health.register("bridge user", Duration::from_secs(60), Some("redis"));
        c.set_stream_ok(true);
        c.set_work_ok(false);
        c.set_source_ok(true);
        assert_eq!(health.not_ready(), ["bridge user: database refuses the work"]);
        c.set_work_ok(true);
        assert!(health.not_ready().is_empty());
    }

    #[test]
    fn a_worker_uses_no_broker_and_is_ready_when_its_database_answers() {
        let health = Health::default();
        let c = health.register("worker audit", Duration::from_secs(60), None);
        assert_eq!(health.not_ready(), ["worker audit: database unreachable"]);
        c.set_source_ok(true);
        assert!(health.not_ready().is_empty());
    }

    #[test]
    fn a_loop_that_stops_beating_is_stalled() {
        let health = Health { started: Instant::now() - Duration::from_secs(10), components: Arc::default() };
        let c = health.register("relay audit", Duration::from_secs(5), None);
        assert!(health.stalled().is_empty());
        c.last_beat_ms.store(0, Ordering::Relaxed);
        assert_eq!(health.stalled(), ["relay audit"]);
        c.stopped();
        assert!(health.stalled().is_empty());
    }
}
