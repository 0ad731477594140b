//! The takeover on the configured database, one type for the bridge and `check`: the takeover's
//! one decision (what is new, a duplicate, a conflict, poison; effects applied or left to the
//! worker) written once here, over a transaction on either database; Postgres and MySQL
//! (`postgres.rs`, `mysql.rs`) only run their statements, reached by one `match` each.

use std::collections::HashMap;
use std::time::Duration;

use super::mysql::{MyTakeover, MyTakeoverTx};
use super::outcome::{Effects, InboxEvent, PoisonRecord, Taken, TakenOver};
use super::postgres::{PgTakeover, PgTakeoverTx};
use crate::bridge::config::BridgeConfig;
use crate::store::database::Database;
use crate::store::error::{PrepareError, StatementError, StoreError, StoreResult};
use crate::worker::config::HandlerErrors;
use crate::worker::inbox::rows::{Merged, merged};

pub enum Takeover {
    Postgres(PgTakeover),
    Mysql(MyTakeover),
}

impl Takeover {
    /// The bridge's statements: its `[bridge.sql]` overrides, the reference schema's otherwise.
    pub fn new(db: &Database, bridge: &BridgeConfig) -> Result<Self, StatementError> {
        Ok(match db {
            Database::Postgres(pool) => Takeover::Postgres(PgTakeover::new(pool.clone(), bridge)?),
            Database::Mysql(pool) => Takeover::Mysql(MyTakeover::new(pool.clone(), bridge)?),
        })
    }

    /// Checks the tables' columns and prepares the takeover statements.
    pub(crate) async fn check(&self) -> Result<(), PrepareError> {
        match self {
            Takeover::Postgres(s) => s.check().await,
            Takeover::Mysql(s) => s.check().await,
        }
    }

    /// A transaction to take a batch over in.
    async fn begin(&self) -> StoreResult<Tx> {
        Ok(match self {
            Takeover::Postgres(s) => Tx::Postgres(s.begin().await?),
            Takeover::Mysql(s) => Tx::Mysql(s.begin().await?),
        })
    }
}

/// A takeover's open transaction, on either database: the statements, run as that database
/// runs them (a batch per statement, or one event at a time).
// One per batch, on the takeover's stack: boxing the larger variant would add an allocation
// per batch on the Postgres path and save nothing.
#[allow(clippy::large_enum_variant)]
enum Tx {
    Postgres(PgTakeoverTx),
    Mysql(MyTakeoverTx),
}

impl Tx {
    /// Inserts each event unless the inbox holds its id already — as PROCESSED where `processed`
    /// says so (apply at take-over; only the reference insert on Postgres has that form) — :
    /// whether it was inserted, in order.
    async fn insert(&mut self, consumer: &str, events: &[InboxEvent], processed: &[bool]) -> StoreResult<Vec<bool>> {
        match self {
            Tx::Postgres(tx) => tx.insert(consumer, events, processed).await,
            Tx::Mysql(tx) => tx.insert(consumer, events, processed).await,
        }
    }

    /// Runs handler statements in the transaction (apply at take-over); `Err` if one failed,
    /// its data refused or not (the transaction is then aborted).
    async fn apply(&mut self, statements: &Merged<'_>, errors: &HandlerErrors) -> StoreResult<()> {
        match self {
            Tx::Postgres(tx) => tx.apply(statements, errors).await,
            Tx::Mysql(tx) => tx.apply(statements, errors).await,
        }
    }

    /// The content hash of each of `events` the inbox already holds, by event id; `None` when
    /// there is no `existing` statement to ask (a custom insert without one).
    async fn existing(
        &mut self,
        consumer: &str,
        events: &[&InboxEvent],
    ) -> StoreResult<Option<HashMap<String, String>>> {
        match self {
            Tx::Postgres(tx) => tx.existing(consumer, events).await,
            Tx::Mysql(tx) => tx.existing(consumer, events).await,
        }
    }

    async fn poison(&mut self, consumer: &str, records: &[PoisonRecord]) -> StoreResult<()> {
        match self {
            Tx::Postgres(tx) => tx.poison(consumer, records).await,
            Tx::Mysql(tx) => tx.poison(consumer, records).await,
        }
    }

    /// Forgets the delivery counts of these (stream, entry id) pairs: they have a verdict now.
    async fn forget(&mut self, consumer: &str, entries: &[(&str, &str)]) -> StoreResult<()> {
        match self {
            Tx::Postgres(tx) => tx.forget(consumer, entries).await,
            Tx::Mysql(tx) => tx.forget(consumer, entries).await,
        }
    }

    /// Commits; `carried`: the payload bytes the transaction carried.
    async fn commit(self, carried: usize) -> StoreResult<()> {
        match self {
            Tx::Postgres(tx) => tx.commit(carried).await,
            Tx::Mysql(tx) => tx.commit(carried).await,
        }
    }

    /// Ends the transaction without committing anything.
    async fn roll_back(self) {
        match self {
            Tx::Postgres(tx) => tx.roll_back().await,
            Tx::Mysql(tx) => tx.roll_back().await,
        }
    }
}

impl Takeover {
    /// Counts one more delivery that reached the database for each of `entry_ids` of `stream`,
    /// in a transaction of its own that commits before the entries are handled (so a bridge
    /// that dies handling them has still counted it): each entry's count so far.
    pub async fn count_deliveries(
        &self,
        consumer: &str,
        stream: &str,
        ids: &[String],
    ) -> StoreResult<HashMap<String, u32>> {
        match self {
            Takeover::Postgres(s) => s.count_deliveries(consumer, stream, ids).await,
            Takeover::Mysql(s) => s.count_deliveries(consumer, stream, ids).await,
        }
    }

    /// The delivery counts of those of `entry_ids` counted before (the others are absent).
    pub async fn deliveries(&self, consumer: &str, stream: &str, ids: &[String]) -> StoreResult<HashMap<String, u32>> {
        match self {
            Takeover::Postgres(s) => s.deliveries(consumer, stream, ids).await,
            Takeover::Mysql(s) => s.deliveries(consumer, stream, ids).await,
        }
    }

    /// Forgets counts not raised for `age` (their entries were acknowledged some other way).
    pub async fn forget_deliveries(&self, consumer: &str, age: Duration) -> StoreResult<u64> {
        match self {
            Takeover::Postgres(s) => s.forget_deliveries(consumer, age).await,
            Takeover::Mysql(s) => s.forget_deliveries(consumer, age).await,
        }
    }

    /// Whether the database answers.
    pub async fn ping(&self) -> StoreResult<()> {
        match self {
            Takeover::Postgres(s) => s.ping().await,
            Takeover::Mysql(s) => s.ping().await,
        }
    }

    /// In one transaction: inserts the events that are new for `consumer`, records `poison` and
    /// any payload conflicts, and — when the entries' deliveries were `counted` — forgets their
    /// counts (they have a verdict now). Returns one outcome per event, in order. Nothing is
    /// recorded if it fails, so the caller must not acknowledge anything then.
    pub async fn take_over(
        &self,
        consumer: &str,
        events: &[InboxEvent],
        poison: &[PoisonRecord],
        counted: bool,
    ) -> StoreResult<Vec<TakenOver>> {
        let mut tx = self.begin().await?;
        match decide(&mut tx, consumer, events, None, poison, counted).await {
            Ok(Decided::Done(outcomes, carried)) => {
                tx.commit(carried).await?;
                Ok(outcomes)
            }
            // Without effects there is no handler to fail.
            Ok(Decided::HandlerFailed(e)) => {
                tx.roll_back().await;
                Err(e)
            }
            Err(e) => {
                tx.roll_back().await;
                Err(e)
            }
        }
    }

    /// [`take_over`](Self::take_over), and in the same transaction each new event's `effects`,
    /// the event inserted as PROCESSED (`TakenOver::Applied`). If a handler statement (or the
    /// commit) fails — refuses the batch's data, or names a table or grant that is missing —
    /// nothing of it is applied: the batch is taken over as by `take_over`, its events PENDING
    /// for the worker (which finds the row at fault, or waits out the broken handler), and
    /// `Taken::left_to_worker` says why. `Err` only when that takeover fails too.
    pub async fn take_over_applying(
        &self,
        consumer: &str,
        events: &[InboxEvent],
        effects: &Effects<'_>,
        poison: &[PoisonRecord],
        counted: bool,
    ) -> StoreResult<Taken> {
        if effects.statements.iter().all(Option::is_none) {
            let outcomes = self.take_over(consumer, events, poison, counted).await?;
            return Ok(Taken { outcomes, left_to_worker: None });
        }
        let mut tx = self.begin().await?;
        let failed = match decide(&mut tx, consumer, events, Some(effects), poison, counted).await {
            Ok(Decided::Done(outcomes, carried)) => match tx.commit(carried).await {
                Ok(()) => return Ok(Taken { outcomes, left_to_worker: None }),
                // A deferred constraint refused a handler's data at commit.
                Err(e) if e.is_about_the_data() => e,
                Err(e) => return Err(e),
            },
            Ok(Decided::HandlerFailed(e)) => {
                tx.roll_back().await;
                e
            }
            Err(e) => {
                tx.roll_back().await;
                return Err(e);
            }
        };
        // The handler failed the batch (its data, or a table or grant it needs): take it over
        // for the worker, whose savepoint per row finds the row at fault and whose backoff waits
        // out a broken handler. If the database itself is down, this fails too.
        let outcomes = self.take_over(consumer, events, poison, counted).await?;
        Ok(Taken { outcomes, left_to_worker: Some(failed) })
    }
}

/// What deciding a batch came to.
enum Decided {
    /// The outcome per event, and the bytes carried.
    Done(Vec<TakenOver>, usize),
    /// A handler statement failed (the transaction is aborted).
    HandlerFailed(StoreError),
}

/// The takeover's one decision, in its transaction: the new events inserted, those already there
/// judged against what the inbox holds (the same content: a duplicate; other content: a conflict,
/// recorded as poison), the new events' `effects` applied, the poison recorded, the counted
/// deliveries forgotten. The outcome per event, and the bytes carried; or the error of a handler
/// statement that failed (the transaction is aborted).
async fn decide(
    tx: &mut Tx,
    consumer: &str,
    events: &[InboxEvent],
    effects: Option<&Effects<'_>>,
    poison: &[PoisonRecord],
    counted: bool,
) -> StoreResult<Decided> {
    let processed: Vec<bool> = match effects {
        Some(effects) => effects.statements.iter().map(Option::is_some).collect(),
        None => vec![false; events.len()],
    };
    let inserted = if events.is_empty() { Vec::new() } else { tx.insert(consumer, events, &processed).await? };
    let others: Vec<&InboxEvent> = events.iter().zip(&inserted).filter(|(_, new)| !**new).map(|(e, _)| e).collect();
    let existing = if others.is_empty() { Some(HashMap::new()) } else { tx.existing(consumer, &others).await? };
    let mut records: Vec<PoisonRecord> = poison.to_vec();
    let mut outcomes = Vec::with_capacity(events.len());
    for (event, inserted) in events.iter().zip(inserted) {
        let existing_hash = match &existing {
            Some(found) => found.get(&event.event_id).map(String::as_str),
            // No way to compare content: an event already there counts as the same event.
            None => Some(event.content_hash.as_str()),
        };
        outcomes.push(TakenOver::judge(event, inserted, existing_hash, &mut records));
    }
    if let Some(effects) = effects {
        let new = outcomes.iter().zip(&effects.statements).filter(|(o, _)| **o == TakenOver::Inserted);
        let statements = merged(new.filter_map(|(_, s)| s.as_ref()).flatten());
        if !statements.is_empty()
            && let Err(e) = tx.apply(&statements, effects.errors).await
        {
            return Ok(Decided::HandlerFailed(e));
        }
        for (outcome, applied) in outcomes.iter_mut().zip(&processed) {
            if *applied && *outcome == TakenOver::Inserted {
                *outcome = TakenOver::Applied;
            }
        }
    }
    if !records.is_empty() {
        tx.poison(consumer, &records).await?;
    }
    if counted {
        let entries: Vec<(&str, &str)> = events
            .iter()
            .map(|e| (e.stream.as_str(), e.entry_id.as_str()))
            .chain(records.iter().map(|p| (p.stream.as_str(), p.entry_id.as_str())))
            .collect();
        tx.forget(consumer, &entries).await?;
    }
    let carried = events.iter().map(|e| e.payload.as_bytes().len()).sum::<usize>()
        + records.iter().map(|p| p.fields.to_string().len()).sum::<usize>();
    Ok(Decided::Done(outcomes, carried))
}
