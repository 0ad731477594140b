//! Which of many entry ids a stream still holds, found by reading the stream in ranges instead
//! of looking each id up: a relay's deliveries sit in its streams in id order, mostly side by
//! side, so one `XRANGE <first wanted> + COUNT n` answers for up to `n` of them. (Looking up
//! each id was one command per delivered row: after a restart, the check of the recent window
//! sent hundreds of thousands of commands.)
//!
//! Each range starts at the lowest id not yet answered, so every read answers at least that
//! one (found, or missing because the stream's next entry is past it). Where other writers'
//! entries sit between the wanted ones, a read answers fewer ids than it returns entries; the
//! next read then asks for fewer, so the sweep never reads much more than the wanted entries.

use crate::broker::seam::EntryId;

/// Most entries one read asks for.
pub(super) const MAX_READ: usize = 1000;
/// Fewest entries a read asks for while ids are left (the floor of the adaptive count).
const MIN_READ: usize = 16;

pub(super) struct Sweep {
    /// Wanted ids, ascending, distinct.
    wanted: Vec<EntryId>,
    found: Vec<bool>,
    /// Wanted ids before this index are answered.
    next: usize,
    count: usize,
}

/// One range read: entries from `start` on, at most `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Read {
    pub start: EntryId,
    pub count: usize,
}

impl Sweep {
    pub(super) fn new(mut wanted: Vec<EntryId>) -> Self {
        wanted.sort_unstable();
        wanted.dedup();
        let found = vec![false; wanted.len()];
        Self { count: wanted.len().min(MAX_READ), wanted, found, next: 0 }
    }

    /// The next read, or `None` when every id is answered.
    pub(super) fn read(&self) -> Option<Read> {
        let start = *self.wanted.get(self.next)?;
        Some(Read { start, count: self.count.min(self.wanted.len() - self.next).max(1) })
    }

    /// Takes the ids the last [`read`](Self::read) returned (ascending, all at or after its start).
    pub(super) fn take(&mut self, read: Read, page: &[EntryId]) {
        let before = self.next;
        for &entry in page {
            while self.next < self.wanted.len() && self.wanted[self.next] < entry {
                self.next += 1;
            }
            if self.next < self.wanted.len() && self.wanted[self.next] == entry {
                self.found[self.next] = true;
                self.next += 1;
            }
        }
        if page.len() < read.count {
            // The stream ends inside this read: nothing wanted after it exists.
            self.next = self.wanted.len();
            return;
        }
        let answered = self.next - before;
        // Mostly wanted entries: ask for as many as are left; sparse ones: about twice as many
        // as the last read answered.
        self.count = if answered * 2 >= page.len() { MAX_READ } else { (answered * 2).clamp(MIN_READ, MAX_READ) };
    }

    /// Whether `id` is in the stream (`id` must be one of the wanted ids).
    pub(super) fn holds(&self, id: EntryId) -> bool {
        self.wanted.binary_search(&id).is_ok_and(|i| self.found[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs a sweep against a stream held in memory; returns the answers and the entries read.
    fn sweep(stream: &[EntryId], wanted: &[EntryId]) -> (Vec<bool>, usize, usize) {
        let mut sweep = Sweep::new(wanted.to_vec());
        let (mut reads, mut entries) = (0, 0);
        while let Some(read) = sweep.read() {
            let page: Vec<EntryId> = stream.iter().copied().filter(|&e| e >= read.start).take(read.count).collect();
            reads += 1;
            entries += page.len();
            sweep.take(read, &page);
            assert!(reads <= wanted.len(), "every read answers at least one id");
        }
        (wanted.iter().map(|&id| sweep.holds(id)).collect(), reads, entries)
    }

    fn ids(ms: impl IntoIterator<Item = u64>) -> Vec<EntryId> {
        ms.into_iter().map(|ms| EntryId(ms, 0)).collect()
    }

    #[test]
    fn a_run_of_deliveries_is_read_in_a_few_ranges() {
        let stream = ids(1..=5000);
        let (answers, reads, entries) = sweep(&stream, &ids(1..=5000));
        assert!(answers.iter().all(|&a| a));
        assert_eq!((reads, entries), (5, 5000));
    }

    #[test]
    fn lost_entries_are_missing_and_the_rest_found() {
        let stream = ids((1..=3000).filter(|ms| !(1000..2000).contains(ms)));
        let wanted = ids(1..=3000);
        let (answers, ..) = sweep(&stream, &wanted);
        for (id, found) in wanted.iter().zip(answers) {
            assert_eq!(found, !(1000..2000).contains(&id.0), "{id}");
        }
    }

    #[test]
    fn a_stream_mostly_of_other_writers_is_not_read_whole() {
        // One wanted entry in every thousand: reads shrink to the floor.
        let stream = ids(1..=100_000);
        let wanted = ids((1..=100_000).step_by(1000));
        let (answers, _, entries) = sweep(&stream, &wanted);
        assert!(answers.iter().all(|&a| a));
        assert!(entries < 100 * 2 * MIN_READ + MAX_READ, "read {entries} entries for 100 wanted");
    }

    #[test]
    fn an_empty_or_trimmed_stream_answers_missing_in_one_read() {
        let (answers, reads, _) = sweep(&[], &ids(1..=10));
        assert_eq!((answers, reads), (vec![false; 10], 1));
        let (answers, reads, _) = sweep(&ids(20..=30), &ids(1..=10));
        assert_eq!((answers, reads), (vec![false; 10], 1));
    }

    proptest! {
        /// Whatever the stream and the wanted ids (duplicates, any order), each answer is
        /// whether the stream holds that id.
        #[test]
        fn answers_are_membership(
            stream in proptest::collection::btree_set((0u64..400, 0u64..3), 0..300),
            wanted in proptest::collection::vec((0u64..400, 0u64..3), 0..200),
        ) {
            let stream: Vec<EntryId> = stream.into_iter().map(|(ms, seq)| EntryId(ms, seq)).collect();
            let wanted: Vec<EntryId> = wanted.into_iter().map(|(ms, seq)| EntryId(ms, seq)).collect();
            let (answers, ..) = sweep(&stream, &wanted);
            for (id, found) in wanted.iter().zip(answers) {
                prop_assert_eq!(found, stream.binary_search(id).is_ok());
            }
        }
    }
}
