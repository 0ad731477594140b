//! The takeover seam: what the bridge asks of the consumer's inbox — take a batch of entries
//! over in one transaction, record the ones it cannot accept, count redeliveries — and the
//! events and records it speaks in. The bridge sees only this.

use std::collections::HashMap;
use std::future::Future;

pub(crate) use crate::event::{InboxEvent, PoisonRecord, Text};
use crate::store::error::{StoreError, StoreResult};
use crate::worker::config::HandlerErrors;
use crate::worker::inbox::rows::BoundStatement;

/// What the takeover made of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakenOver {
    Inserted,
    /// Inserted as PROCESSED, its handler statements run in the same transaction (apply at
    /// take-over).
    Applied,
    /// Already in the inbox with the same content (a redelivery or a republish).
    Duplicate,
    /// Already in the inbox with other content; recorded in the poison table as a conflict.
    Conflict,
}

impl TakenOver {
    /// The one decision of a takeover, for every dialect: the insert took the event
    /// (`inserted`), or the inbox already holds it with `existing_hash` — the same content (a
    /// redelivery, a republish) or other content, which is recorded in `poison` as a conflict.
    pub(crate) fn judge(
        event: &InboxEvent,
        inserted: bool,
        existing_hash: Option<&str>,
        poison: &mut Vec<PoisonRecord>,
    ) -> Self {
        if inserted {
            TakenOver::Inserted
        } else if existing_hash == Some(event.content_hash.as_str()) {
            TakenOver::Duplicate
        } else {
            poison.push(PoisonRecord::taken_over_with_other_content(event, existing_hash));
            TakenOver::Conflict
        }
    }
}

/// Apply at take-over: the handler statements of each event of a batch, in the events' order
/// (`None`: the event is inserted PENDING for the worker), and what handler errors mean.
pub struct Effects<'a> {
    pub statements: Vec<Option<Vec<BoundStatement<'a>>>>,
    pub errors: &'a HandlerErrors,
}

/// What a takeover applying effects made of a batch.
#[derive(Debug)]
pub struct Taken {
    /// One per event, in order.
    pub outcomes: Vec<TakenOver>,
    /// Why the batch's effects were not applied (it was taken over PENDING instead).
    pub left_to_worker: Option<StoreError>,
}

/// The bridge's inbox: the takeover, and handoff's own count of the redeliveries that reached
/// the inbox database (invariant 12).
pub trait TakeoverStore: Send + Sync + 'static {
    /// In one transaction: inserts the events that are new for `consumer`, records `poison` and
    /// any payload conflicts, and — when the entries' deliveries were `counted` — forgets their
    /// counts (they have a verdict now). Returns one outcome per event, in order. Nothing is
    /// recorded if it fails, so the caller must not acknowledge anything then.
    fn take_over(
        &self,
        consumer: &str,
        events: &[InboxEvent],
        poison: &[PoisonRecord],
        counted: bool,
    ) -> impl Future<Output = StoreResult<Vec<TakenOver>>> + Send;

    /// [`take_over`](Self::take_over), and in the same transaction each new event's `effects`,
    /// the event inserted as PROCESSED ([`TakenOver::Applied`]). If a handler statement (or the
    /// commit) fails — refuses the batch's data, or names a table or grant that is missing —
    /// nothing of it is applied: the batch is taken over as by `take_over`, its events PENDING
    /// for the worker (which finds the row at fault, or waits out the broken handler), and
    /// [`Taken::left_to_worker`] says why. `Err` only when that takeover fails too.
    fn take_over_applying(
        &self,
        consumer: &str,
        events: &[InboxEvent],
        effects: &Effects<'_>,
        poison: &[PoisonRecord],
        counted: bool,
    ) -> impl Future<Output = StoreResult<Taken>> + Send;

    /// Counts one more delivery that reached the database for each of `entry_ids` of `stream`,
    /// in a transaction of its own that commits before the entries are handled (so a bridge
    /// that dies handling them has still counted it): each entry's count so far.
    fn count_deliveries(
        &self,
        consumer: &str,
        stream: &str,
        entry_ids: &[String],
    ) -> impl Future<Output = StoreResult<HashMap<String, u32>>> + Send;

    /// The delivery counts of those of `entry_ids` counted before (the others are absent).
    fn deliveries(
        &self,
        consumer: &str,
        stream: &str,
        entry_ids: &[String],
    ) -> impl Future<Output = StoreResult<HashMap<String, u32>>> + Send;

    /// Forgets counts not raised for `age` (their entries were acknowledged some other way).
    fn forget_deliveries(
        &self,
        consumer: &str,
        age: std::time::Duration,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Whether the database answers.
    fn ping(&self) -> impl Future<Output = StoreResult<()>> + Send;
}
