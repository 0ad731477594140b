//! What a member owns: its partitions, what it read of each and has not acknowledged, and
//! the partitions assigned and not yet checked (`recreated`). The rebalance callback shares it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;

use crate::broker::kafka::client::Logged;

/// Entries read and not yet acknowledged, per partition this member owns.
#[derive(Default)]
pub(super) struct Partition {
    /// Offset → when it was read, and by which read.
    pub(super) in_flight: BTreeMap<i64, (Instant, u64)>,
    /// The offset after the last one read.
    pub(super) next: i64,
    /// The offset after the highest one ever read: below it, a read is a redelivery.
    pub(super) seen: i64,
    /// The last offset committed.
    pub(super) committed: i64,
    /// The read that found this partition first after it was assigned.
    pub(super) first_read: u64,
}

/// The member's partitions, shared with the rebalance callback.
#[derive(Default, Clone)]
pub(crate) struct Owned {
    partitions: Arc<Mutex<HashMap<i32, Partition>>>,
    /// Partitions assigned whose committed offsets have not been checked against the topic's
    /// id yet (`KafkaGroup::check_assigned`).
    assigned: Arc<Mutex<BTreeSet<i32>>>,
    /// Entries a replaced member had in flight (`recreated`): an acknowledgement of one of
    /// them names an offset the new topic reuses, and is not taken for the new entry's.
    pub(super) retired: Arc<Mutex<HashSet<(i32, i64)>>>,
    /// The member now: a callback of a member since replaced (served while it closes) leaves
    /// the state alone.
    current: Arc<AtomicU64>,
    /// The member this context belongs to.
    member: u64,
}

impl Owned {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Partition>> {
        self.partitions.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn assigned(&self) -> std::sync::MutexGuard<'_, BTreeSet<i32>> {
        self.assigned.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn retired(&self) -> std::sync::MutexGuard<'_, HashSet<(i32, i64)>> {
        self.retired.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The context of the next member: the state shared, the callbacks of this one ignored
    /// from now on.
    pub(super) fn next_member(&self) -> Self {
        let member = self.current.fetch_add(1, Ordering::SeqCst) + 1;
        Self { member, ..self.clone() }
    }
}

impl ClientContext for Owned {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, line: &str) {
        Logged.log(level, facility, line)
    }

    fn error(&self, error: KafkaError, reason: &str) {
        Logged.error(error, reason)
    }
}

impl ConsumerContext for Owned {
    /// Partitions revoked are forgotten with what was in flight on them (never committed past);
    /// partitions assigned start afresh from the group's committed offset, once it is known to
    /// be an offset of the topic as it is now.
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let (Rebalance::Assign(list) | Rebalance::Revoke(list)) = rebalance else { return };
        if self.member != self.current.load(Ordering::SeqCst) {
            return;
        }
        let (mut owned, mut unchecked) = (self.lock(), self.assigned());
        for element in list.elements() {
            owned.remove(&element.partition());
            match rebalance {
                Rebalance::Assign(_) => unchecked.insert(element.partition()),
                _ => unchecked.remove(&element.partition()),
            };
        }
        tracing::info!(
            partitions = list.count(),
            assigned = matches!(rebalance, Rebalance::Assign(_)),
            "kafka rebalance"
        );
    }
}
