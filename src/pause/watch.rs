//! Pause and resume as running components see them. One task per process reads the pauses in
//! force every `pause.poll_interval` and publishes them; every relay loop,
//! bridge stream and worker loop holds a [`PauseSwitch`] for its own name and, between two
//! batches, waits while it is paused: it claims and reads nothing, and what it held is settled
//! or acknowledged first (the loop finishes the batch in hand before it looks).

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::commands::active;
use super::metrics::PauseMetrics;
use super::target::{Pause, Target};
use crate::store::{Database, OutageKind};
use crate::telemetry::health::Component;
use crate::telemetry::throttle::Throttle;

/// What the process knows of the pauses: nothing yet (before the first read), or those in force
/// at the last read; and whether the last read went through (the database answers).
#[derive(Debug, Clone, PartialEq, Default)]
struct Known {
    pauses: Option<Vec<Pause>>,
    answered: bool,
}

/// The pauses in force, as this process last read them.
#[derive(Clone)]
pub(crate) struct Pauses {
    tx: watch::Sender<Known>,
}

impl Default for Pauses {
    fn default() -> Self {
        Self { tx: watch::Sender::new(Known::default()) }
    }
}

impl Pauses {
    /// The switch of one component.
    pub(crate) fn switch(&self, target: Target) -> PauseSwitch {
        PauseSwitch { target, rx: self.tx.subscribe() }
    }

    /// Publishes the pauses just read (the switches wake only when something changed).
    fn publish(&self, pauses: Vec<Pause>) {
        self.tx.send_if_modified(|known| {
            let same = |a: &[Pause], b: &[Pause]| {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.target == y.target && x.reason == y.reason)
            };
            let changed = !known.answered || !known.pauses.as_deref().is_some_and(|old| same(old, &pauses));
            *known = Known { pauses: Some(pauses), answered: true };
            changed
        });
    }

    /// The pauses could not be read: what was read last stands, the database does not answer.
    fn unanswered(&self) {
        self.tx.send_if_modified(|known| std::mem::replace(&mut known.answered, false));
    }
}

/// One component's view of whether it is paused.
#[derive(Clone)]
pub(crate) struct PauseSwitch {
    target: Target,
    rx: watch::Receiver<Known>,
}

/// Whether a component may work.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum State {
    /// The pauses have not been read yet (the database has not answered since the start).
    Unknown,
    Running,
    Paused(Pause),
}

impl PauseSwitch {
    pub(crate) fn state(&self) -> State {
        match &self.rx.borrow().pauses {
            None => State::Unknown,
            Some(pauses) => match pauses.iter().find(|p| p.target == self.target) {
                Some(pause) => State::Paused(pause.clone()),
                None => State::Running,
            },
        }
    }

    /// Whether the component must wait now (paused, or the pauses not read yet).
    pub(crate) fn holds(&self) -> bool {
        self.state() != State::Running
    }

    /// Whether a pause is known to be in force (the pauses not read yet do not count).
    pub(crate) fn paused(&self) -> bool {
        matches!(self.state(), State::Paused(_))
    }

    /// Returns at once when the component may work; otherwise waits, alive and saying that it
    /// is paused, until it is resumed or `shutdown` (then it returns too: the caller's loop
    /// ends); before the first read of the pauses it waits too. Returns whether it waited.
    /// (The watcher logs pauses and resumes, once a process.)
    pub(crate) async fn wait_while_paused(&mut self, health: &Component, shutdown: &CancellationToken) -> bool {
        let mut waited = false;
        loop {
            match self.state() {
                State::Running => {
                    health.set_paused(None);
                    return waited;
                }
                State::Paused(pause) => {
                    // Paused, the component touches only the database it reads the pauses
                    // from: that is what its readiness rests on meanwhile.
                    health.set_paused(Some(pause.reason.unwrap_or_default()));
                    health.set_source_ok(self.rx.borrow().answered);
                }
                State::Unknown => {}
            }
            waited = true;
            health.beat();
            // Beats at least every second: a long pause is not a stall.
            tokio::select! {
                _ = self.rx.changed() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = shutdown.cancelled() => {}
            }
            if shutdown.is_cancelled() {
                return waited;
            }
        }
    }
}

/// Reads the pauses every `poll`, publishes them, and keeps `handoff_paused` for `targets` (every
/// configured component) current, until `shutdown`. An outage keeps what was read last; a
/// database without `handoff_pauses`, or a user without SELECT on it, has no pauses, said once.
pub(crate) async fn watch(
    db: Database,
    pauses: Pauses,
    targets: Vec<Target>,
    poll: Duration,
    metrics: PauseMetrics,
    shutdown: CancellationToken,
) {
    for target in &targets {
        metrics.set(target.component.label(), &target.name, None);
    }
    let mut errors = Throttle::new(Duration::from_secs(30));
    let mut missing_said = false;
    let mut seen: Vec<Pause> = Vec::new();
    while !shutdown.is_cancelled() {
        match active(&db).await {
            Ok(active) => {
                errors.reset();
                log_changes(&seen, &active);
                seen.clone_from(&active);
                for target in &targets {
                    let paused = active.iter().find(|p| &p.target == target);
                    metrics.set(target.component.label(), &target.name, paused.map(|p| p.paused_for_seconds));
                }
                pauses.publish(active);
            }
            // A table that is not there, or not granted, holds no pause this process could
            // honour: waiting on it would stop every component of a deployment that upgraded
            // without the new table or its grant. Said once, loudly.
            Err(e) if matches!(e.outage_kind(), Some(OutageKind::Schema | OutageKind::Permission)) => {
                if !std::mem::replace(&mut missing_said, true) {
                    warn!(error = %crate::error::error_chain(&e), "handoff_pauses cannot be read (run `handoff migrate`, or grant SELECT on it); pauses will not reach this process");
                }
                pauses.publish(Vec::new());
            }
            Err(e) => {
                pauses.unanswered();
                if let Some(suppressed) = errors.allow() {
                    warn!(error = %crate::error::error_chain(&e), suppressed, "cannot read the pauses; keeping the last read");
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = shutdown.cancelled() => {}
        }
    }
}

/// Says which pauses began and ended since the last read.
fn log_changes(before: &[Pause], now: &[Pause]) {
    for pause in now.iter().filter(|p| !before.iter().any(|b| b.target == p.target)) {
        let reason = pause.reason.as_deref().unwrap_or("");
        let expires_in_s = pause.expires_in_seconds.map(|s| s.round() as i64);
        info!(component = %pause.target, reason, paused_by = %pause.paused_by, ?expires_in_s, "paused");
    }
    for pause in before.iter().filter(|b| !now.iter().any(|p| p.target == b.target)) {
        info!(component = %pause.target, paused_s = pause.paused_for_seconds.round() as i64, "resumed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pause::ComponentKind;
    use crate::telemetry::health::Health;

    fn pause(name: &str) -> Pause {
        Pause {
            target: Target { component: ComponentKind::Relay, name: name.into() },
            reason: Some("migration".into()),
            paused_by: "ops".into(),
            paused_for_seconds: 1.0,
            expires_in_seconds: None,
        }
    }

    #[test]
    fn a_switch_sees_only_its_own_pause_and_nothing_before_the_first_read() {
        let pauses = Pauses::default();
        let switch = pauses.switch(Target { component: ComponentKind::Relay, name: "audit".into() });
        let other = pauses.switch(Target { component: ComponentKind::Worker, name: "audit".into() });
        assert_eq!(switch.state(), State::Unknown);
        pauses.publish(vec![pause("audit")]);
        assert!(matches!(switch.state(), State::Paused(p) if p.reason.as_deref() == Some("migration")));
        assert_eq!(other.state(), State::Running, "same name, other component");
        pauses.publish(Vec::new());
        assert_eq!(switch.state(), State::Running);
    }

    #[tokio::test]
    async fn a_paused_component_waits_until_it_is_resumed_and_says_so_meanwhile() {
        let pauses = Pauses::default();
        pauses.publish(vec![pause("audit")]);
        let health = Health::default();
        let component = health.register("relay audit", Duration::from_secs(60), None);
        let mut switch = pauses.switch(Target { component: ComponentKind::Relay, name: "audit".into() });
        let shutdown = CancellationToken::new();
        let waiting = {
            let (component, shutdown) = (component.clone(), shutdown.clone());
            tokio::spawn(async move { switch.wait_while_paused(&component, &shutdown).await })
        };
        while health.paused().is_empty() {
            tokio::task::yield_now().await;
        }
        assert_eq!(health.paused(), ["relay audit (migration)"]);
        assert!(!waiting.is_finished());
        pauses.publish(Vec::new());
        assert!(waiting.await.unwrap(), "it waited");
        assert!(health.paused().is_empty());
    }
}
