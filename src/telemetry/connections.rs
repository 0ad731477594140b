//! The telemetry listener's connections: at most `max` open at once, and room is made for a new
//! one by closing the connection open longest without a request in progress. Idle keep-alive
//! scrapers and clients that never finish their headers cannot hold every slot, so a probe
//! always gets in (Kubernetes restarts a pod whose liveness probe times out).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// The open connections, oldest first.
pub(super) struct Connections {
    max: usize,
    next: AtomicU64,
    open: Mutex<Vec<Slot>>,
}

struct Slot {
    id: u64,
    busy: Arc<AtomicBool>,
    close: CancellationToken,
}

/// One admitted connection: mark it busy while a request is served; it is closed when `closed`
/// fires (evicted) and leaves its slot when dropped.
pub(super) struct Admitted {
    id: u64,
    pub busy: Arc<AtomicBool>,
    pub closed: CancellationToken,
    connections: Arc<Connections>,
}

impl Connections {
    pub(super) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self { max: max.max(1), next: AtomicU64::new(0), open: Mutex::new(Vec::new()) })
    }

    /// Admits a new connection, closing the oldest idle one when all slots are taken; `None`
    /// when every open connection is serving a request.
    pub(super) fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= self.max {
            let idle = open.iter().position(|slot| !slot.busy.load(Ordering::Relaxed))?;
            open.remove(idle).close.cancel();
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (busy, close) = (Arc::new(AtomicBool::new(false)), CancellationToken::new());
        open.push(Slot { id, busy: busy.clone(), close: close.clone() });
        Some(Admitted { id, busy, closed: close, connections: self.clone() })
    }

    /// Connections open now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.connections.open.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|slot| slot.id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_listener_closes_its_oldest_idle_connection_and_never_a_busy_one() {
        let connections = Connections::new(3);
        let (a, b, c) = (connections.admit().unwrap(), connections.admit().unwrap(), connections.admit().unwrap());
        a.busy.store(true, Ordering::Relaxed);
        let d = connections.admit().expect("room is made");
        assert!(!a.closed.is_cancelled(), "a busy connection is never closed");
        assert!(b.closed.is_cancelled(), "the oldest idle one is");
        assert!(!c.closed.is_cancelled() && !d.closed.is_cancelled());
        drop(b);
        assert_eq!(connections.len(), 3);
        c.busy.store(true, Ordering::Relaxed);
        d.busy.store(true, Ordering::Relaxed);
        assert!(connections.admit().is_none(), "every connection busy: the new one waits its turn");
        drop(d);
        assert!(connections.admit().is_some(), "a slot left is free again");
    }
}
