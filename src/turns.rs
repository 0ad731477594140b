//! When a loop with `claim = "locked"` (relay or worker) takes a leased turn instead. A row that
//! kills its process inside a locked transaction leaves no trace (the rollback undoes
//! everything), and lease-expired rows are only ever reclaimed, one at a time, by the leased
//! claim. So a loop takes a leased turn first after it starts and again once per lease: the
//! restarted process claims such a row under a lease, the next crash leaves the lease to expire,
//! and the expired-lease counter turns the row DEAD as it does with the leased claim. A leased
//! turn that reclaimed a row is followed by another at once, so the rows a dead process held
//! come back one after the other, not one per lease; and a locked turn that asks for it (a
//! worker batch with a row at fault) is followed by a leased one.

use std::time::{Duration, Instant};

#[derive(Default)]
pub struct LockedTurns {
    /// When the loop last took a leased turn (none yet: the first turn is leased).
    leased_at: Option<Instant>,
    /// Whether the last leased turn reclaimed a lease-expired row, or a locked turn asked for a
    /// leased one: the next turn is leased.
    leased_next: bool,
    /// Whether the loop has said that it switched to locked turns.
    announced: bool,
}

/// What the next turn is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    Leased,
    Locked,
    /// The first locked turn: say that the loop switched to locked turns.
    FirstLocked,
}

impl LockedTurns {
    /// The next turn of a loop whose lease is `lease`.
    pub fn next(&mut self, lease: Duration) -> Turn {
        match self.leased_at {
            Some(at) if at.elapsed() < lease && !self.leased_next => {
                if std::mem::replace(&mut self.announced, true) {
                    Turn::Locked
                } else {
                    Turn::FirstLocked
                }
            }
            _ => {
                self.leased_at = Some(Instant::now());
                self.leased_next = false;
                Turn::Leased
            }
        }
    }

    /// After a leased turn: whether it reclaimed a lease-expired row.
    pub fn reclaimed(&mut self, reclaimed: bool) {
        self.leased_next = reclaimed;
    }

    /// After a locked turn that could not finish its batch alone: the next turn is leased.
    pub fn lease_next(&mut self) {
        self.leased_next = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_turn_is_leased_then_locked_until_the_lease_is_up() {
        let mut turns = LockedTurns::default();
        assert_eq!(turns.next(Duration::from_secs(60)), Turn::Leased);
        assert_eq!(turns.next(Duration::from_secs(60)), Turn::FirstLocked);
        assert_eq!(turns.next(Duration::from_secs(60)), Turn::Locked);
        assert_eq!(turns.next(Duration::ZERO), Turn::Leased, "once per lease");
    }

    #[test]
    fn a_reclaim_or_a_request_makes_the_next_turn_leased() {
        let mut turns = LockedTurns::default();
        assert_eq!(turns.next(Duration::from_secs(60)), Turn::Leased);
        turns.reclaimed(true);
        assert_eq!(turns.next(Duration::from_secs(60)), Turn::Leased);
        turns.reclaimed(false);
        assert_eq!(turns.next(Duration::from_secs(60)), Turn::FirstLocked);
        turns.lease_next();
        assert_eq!(turns.next(Duration::from_secs(60)), Turn::Leased);
        assert_eq!(turns.next(Duration::from_secs(60)), Turn::Locked);
    }
}
