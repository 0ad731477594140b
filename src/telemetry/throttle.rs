//! Rate limit for errors that repeat inside retry loops: the first one is logged, then at most
//! one per interval, carrying how many were suppressed in between.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub(crate) struct Throttle {
    interval: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    pub(crate) fn new(interval: Duration) -> Self {
        Self { interval, last: None, suppressed: 0 }
    }

    /// `Some(suppressed)` when this occurrence should be logged, `None` when it should not.
    pub(crate) fn allow(&mut self) -> Option<u64> {
        let now = Instant::now();
        match self.last {
            Some(last) if now.duration_since(last) < self.interval => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }

    /// Forget the history once the condition cleared, so the next failure is logged at once.
    pub(crate) fn reset(&mut self) {
        self.last = None;
        self.suppressed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_first_then_counts_suppressed() {
        let mut t = Throttle::new(Duration::from_secs(3600));
        assert_eq!(t.allow(), Some(0));
        assert_eq!(t.allow(), None);
        assert_eq!(t.allow(), None);
        t.last = Some(Instant::now() - Duration::from_secs(7200));
        assert_eq!(t.allow(), Some(2));
        t.reset();
        assert_eq!(t.allow(), Some(0));
    }
}
