//! Retried mutations (`Idempotency-Key`): a retry of the same request by the same caller gets
//! the first answer instead of running again. A key belongs to its caller and to one request
//! (method, path and body, by hash): reused for another request it is refused, not answered
//! with the other request's result; a retry that arrives while the first is still running is
//! told so instead of running twice. Keys, answers and their number are bounded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::StatusCode;
use sha2::{Digest, Sha256};

/// Answers remembered at most, and for how long.
const REMEMBERED: usize = 1000;
const REMEMBER_FOR: Duration = Duration::from_secs(3600);
/// A key longer than this is refused; an answer larger than this is not remembered.
pub(super) const MAX_KEY: usize = 255;
const MAX_ANSWER: usize = 64 * 1024;

type Request = [u8; 32];

enum Entry {
    Running { request: Request },
    Answered { at: Instant, request: Request, status: StatusCode, body: String },
}

#[derive(Default)]
pub(super) struct Idempotency {
    entries: Arc<Mutex<HashMap<(String, String), Entry>>>,
}

/// What to do with a request that carries a key.
pub(super) enum Begun {
    /// Run it; finish the ticket with its answer.
    Run(Ticket),
    /// Answer this, as the first request was answered.
    Replay(StatusCode, String),
    /// The same request with this key is running now.
    Running,
    /// The key was used for another request.
    Reused,
}

/// A request running under its key; dropped unfinished (the call was abandoned), the key is
/// free again.
pub(super) struct Ticket {
    entries: Arc<Mutex<HashMap<(String, String), Entry>>>,
    slot: Option<((String, String), Request)>,
}

impl Idempotency {
    pub(super) fn begin(&self, caller: &str, key: &str, method: &str, path: &str, body: &[u8]) -> Begun {
        let request: Request = Sha256::new()
            .chain_update(method)
            .chain_update([0])
            .chain_update(path)
            .chain_update([0])
            .chain_update(body)
            .finalize()
            .into();
        let slot = (caller.to_owned(), key.to_owned());
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|_, e| !matches!(e, Entry::Answered { at, .. } if at.elapsed() >= REMEMBER_FOR));
        match entries.get(&slot) {
            Some(Entry::Running { request: r }) if *r == request => return Begun::Running,
            Some(Entry::Answered { request: r, status, body, .. }) if *r == request => {
                return Begun::Replay(*status, body.clone());
            }
            Some(_) => return Begun::Reused,
            None => {}
        }
        if entries.len() >= REMEMBERED {
            let oldest = entries
                .iter()
                .filter_map(|(k, e)| match e {
                    Entry::Answered { at, .. } => Some((*at, k.clone())),
                    Entry::Running { .. } => None,
                })
                .min();
            match oldest {
                Some((_, k)) => drop(entries.remove(&k)),
                // Full of running requests: this one runs without being remembered.
                None => return Begun::Run(Ticket { entries: self.entries.clone(), slot: None }),
            }
        }
        entries.insert(slot.clone(), Entry::Running { request });
        Begun::Run(Ticket { entries: self.entries.clone(), slot: Some((slot, request)) })
    }
}

impl Ticket {
    /// Keeps a success for the key's retries; anything else frees the key (a retry after an
    /// outage or a refusal runs again, with the state of that moment).
    pub(super) fn finish(mut self, status: StatusCode, body: &str) {
        let Some((slot, request)) = self.slot.take() else { return };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if status.is_success() && body.len() <= MAX_ANSWER {
            let answered = Entry::Answered { at: Instant::now(), request, status, body: body.to_owned() };
            entries.insert(slot, answered);
        } else {
            entries.remove(&slot);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some((slot, _)) = self.slot.take() {
            self.entries.lock().unwrap_or_else(|e| e.into_inner()).remove(&slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(b: Begun) -> Ticket {
        match b {
            Begun::Run(t) => t,
            _ => panic!("expected to run"),
        }
    }

    #[test]
    fn a_key_answers_only_its_own_caller_and_request_and_never_runs_twice_at_once() {
        let keys = Idempotency::default();
        let first = run(keys.begin("ops", "k1", "POST", "/api/pause", b"{}"));
        assert!(matches!(keys.begin("ops", "k1", "POST", "/api/pause", b"{}"), Begun::Running));
        assert!(matches!(keys.begin("ops", "k1", "POST", "/api/dead/purge", b"{}"), Begun::Reused));
        first.finish(StatusCode::OK, "done");
        assert!(
            matches!(keys.begin("ops", "k1", "POST", "/api/pause", b"{}"), Begun::Replay(StatusCode::OK, b) if b == "done")
        );
        assert!(matches!(keys.begin("ops", "k1", "POST", "/api/pause", b"{\"x\":1}"), Begun::Reused));
        drop(run(keys.begin("other", "k1", "POST", "/api/pause", b"{}")));
        // Abandoned before it finished: the key is free again.
        drop(run(keys.begin("ops", "k2", "POST", "/api/pause", b"{}")));
        drop(run(keys.begin("ops", "k2", "POST", "/api/pause", b"{}")));
    }

    #[test]
    fn the_remembered_answers_are_bounded() {
        let keys = Idempotency::default();
        for i in 0..REMEMBERED + 10 {
            run(keys.begin("ops", &i.to_string(), "POST", "/", b"")).finish(StatusCode::OK, "ok");
        }
        assert_eq!(keys.entries.lock().unwrap().len(), REMEMBERED);
        run(keys.begin("ops", "big", "POST", "/", b"")).finish(StatusCode::OK, &"x".repeat(MAX_ANSWER + 1));
        assert!(matches!(keys.begin("ops", "big", "POST", "/", b""), Begun::Run(_)), "too large to keep");
        run(keys.begin("ops", "down", "POST", "/", b"")).finish(StatusCode::SERVICE_UNAVAILABLE, "outage");
        assert!(matches!(keys.begin("ops", "down", "POST", "/", b""), Begun::Run(_)), "a failure is not kept");
    }
}
