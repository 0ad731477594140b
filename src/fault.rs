//! Test hooks that park a relay at a chosen point so a test can kill, stop or signal the process
//! exactly there (e.g. between XADD and settle). They exist only in a build with the
//! `fault-injection` feature (the tests' build); the shipped binary has no hooks and ignores
//! `HANDOFF_FAULT_*`. Read once at startup by `main` and passed down, never consulted from the
//! environment elsewhere.

/// Where a relay can be parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    /// Rows claimed, nothing appended yet.
    BeforeAppend,
    /// Entries appended (ids returned), nothing settled yet.
    AfterAppend,
    /// Bridge: entries read and validated, the inbox transaction not yet run.
    BridgeBeforeCommit,
    /// Bridge: the inbox transaction committed, nothing acknowledged yet.
    BridgeBeforeAck,
    /// Worker: handler statements executed inside the transaction, PROCESSED not yet written.
    WorkerInHandler,
}

#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
impl Point {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "before_append" => Some(Point::BeforeAppend),
            "after_append" => Some(Point::AfterAppend),
            "bridge_before_commit" => Some(Point::BridgeBeforeCommit),
            "bridge_before_ack" => Some(Point::BridgeBeforeAck),
            "worker_in_handler" => Some(Point::WorkerInHandler),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Point::BeforeAppend => "before_append",
            Point::AfterAppend => "after_append",
            Point::BridgeBeforeCommit => "bridge_before_commit",
            Point::BridgeBeforeAck => "bridge_before_ack",
            Point::WorkerInHandler => "worker_in_handler",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Faults {
    #[cfg(feature = "fault-injection")]
    hooks: hooks::Hooks,
}

impl Faults {
    /// `HANDOFF_FAULT_PAUSE=<point>` parks every batch at that point; `HANDOFF_FAULT_MARKER=<file>`
    /// gets a line `paused <point>` when it happens; `HANDOFF_FAULT_RESUME=<file>` lets parked
    /// batches go on once that file exists (without it they stay parked forever).
    /// `HANDOFF_FAULT_PANIC=<point>` panics there instead (a bug in a loop). Without the
    /// `fault-injection` feature this reads nothing.
    pub(crate) fn from_env() -> Self {
        Self {
            #[cfg(feature = "fault-injection")]
            hooks: hooks::Hooks::from_env(),
        }
    }

    /// Parks if configured for `point`; the caller's cancellation (shutdown drain) still applies
    /// because this is an ordinary pending future.
    pub(crate) async fn reach(&self, _point: Point) {
        #[cfg(feature = "fault-injection")]
        self.hooks.reach(_point).await;
    }
}

#[cfg(feature = "fault-injection")]
mod hooks {
    use std::io::Write;
    use std::path::PathBuf;

    use crate::fault::Point;

    #[derive(Debug, Clone, Default)]
    pub(super) struct Hooks {
        panic_at: Option<Point>,
        pause_at: Option<Point>,
        marker: Option<PathBuf>,
        resume: Option<PathBuf>,
    }

    impl Hooks {
        pub(super) fn from_env() -> Self {
            Self {
                panic_at: std::env::var("HANDOFF_FAULT_PANIC").ok().and_then(|p| Point::parse(&p)),
                pause_at: std::env::var("HANDOFF_FAULT_PAUSE").ok().and_then(|p| Point::parse(&p)),
                marker: std::env::var_os("HANDOFF_FAULT_MARKER").map(PathBuf::from),
                resume: std::env::var_os("HANDOFF_FAULT_RESUME").map(PathBuf::from),
            }
        }

        pub(super) async fn reach(&self, point: Point) {
            if self.panic_at == Some(point) {
                panic!("fault injection: a panic at {}", point.name());
            }
            if self.pause_at != Some(point) {
                return;
            }
            if let Some(path) = &self.marker
                && let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path)
            {
                let _ = writeln!(file, "paused {}", point.name());
            }
            match &self.resume {
                None => std::future::pending::<()>().await,
                Some(resume) => {
                    while !resume.exists() {
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                }
            }
        }
    }
}
