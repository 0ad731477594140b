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
pub(crate) struct LockedTurns {
    /// When the loop last took a leased turn (none yet: the first turn is leased).
    leased_at: Option<Instant>,
    /// Whether the last leased turn reclaimed a lease-expired row, or a locked turn asked for a
    /// leased one: the next turn is leased.
    leased_next: bool,
    /// Whether the loop has said that it switched to locked turns.
    announced: bool,
}

impl LockedTurns {
    /// Whether the next turn of a loop whose lease is `lease` is a locked one; `switched` runs
    /// once, at the loop's first locked turn (to say so).
    pub(crate) fn locked(&mut self, lease: Duration, switched: impl FnOnce()) -> bool {
        match self.leased_at {
            Some(at) if at.elapsed() < lease && !self.leased_next => {
                if !std::mem::replace(&mut self.announced, true) {
                    switched();
                }
                true
            }
            _ => {
                self.leased_at = Some(Instant::now());
                self.leased_next = false;
                false
            }
        }
    }

    /// After a leased turn: whether it reclaimed a lease-expired row.
    pub(crate) fn reclaimed(&mut self, reclaimed: bool) {
        self.leased_next = reclaimed;
    }

    /// After a locked turn that could not finish its batch alone: the next turn is leased.
    pub(crate) fn lease_next(&mut self) {
        self.leased_next = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next `n` turns: `L` locked, `l` leased, `!` the locked turn that said it switched.
    fn turns(turns: &mut LockedTurns, lease: Duration, n: usize) -> String {
        (0..n)
            .map(|_| {
                let mut said = false;
                match turns.locked(lease, || said = true) {
                    true if said => '!',
                    true => 'L',
                    false => 'l',
                }
            })
            .collect()
    }

    #[test]
    fn the_first_turn_is_leased_then_locked_until_the_lease_is_up() {
        let mut t = LockedTurns::default();
        assert_eq!(turns(&mut t, Duration::from_secs(60), 3), "l!L");
        assert_eq!(turns(&mut t, Duration::ZERO, 1), "l", "once per lease");
    }

    #[test]
    fn a_reclaim_or_a_request_makes_the_next_turn_leased() {
        let mut t = LockedTurns::default();
        let lease = Duration::from_secs(60);
        assert_eq!(turns(&mut t, lease, 1), "l");
        t.reclaimed(true);
        assert_eq!(turns(&mut t, lease, 1), "l");
        t.reclaimed(false);
        assert_eq!(turns(&mut t, lease, 1), "!");
        t.lease_next();
        assert_eq!(turns(&mut t, lease, 2), "lL");
    }
}
