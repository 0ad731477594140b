//! What a takeover is given beside its events (the effects to apply with them) and what it
//! returns for each (`TakenOver`, `Taken`).

pub(crate) use crate::event::{InboxEvent, PoisonRecord};
use crate::store::error::StoreError;
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
