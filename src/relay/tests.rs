//! The batch state machine against in-memory stand-ins for the outbox and the stream: every
//! claimed row is settled exactly one way, with the outcome the stream gave it. The real
//! servers' behaviour is proven by the integration tests; these pin the decisions above them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Relay, RelayDeps};
use crate::broker::{AppendOptions, AppendOutcome, Entry, EventStream, ServerId, StreamState, Unavailable};
use crate::config::load_str;
use crate::fault::Faults;
use crate::relay::outbox::{ClaimedRow, Delivered, DeliveredRow, Failure, OutboxStats, OutboxStore, RowRef, Verdict};
use crate::store::StoreResult;
use crate::telemetry::health::Health;
use crate::telemetry::metrics::RelayMetrics;

const COLUMNS: &[&str] =
    &["id", "token", "event_id", "attempts", "expired_claims", "age_ms", "aggregate_type", "order_key", "payload"];

#[derive(Debug, Clone, PartialEq)]
enum Status {
    Pending,
    InFlight,
    Delivered(String),
    Dead,
}

#[derive(Debug, Clone)]
struct Row {
    id: i64,
    event_id: String,
    aggregate_type: Option<String>,
    order_key: String,
    token: i64,
    attempts: u32,
    status: Status,
}

/// An outbox in memory: claims take pending rows in id order; every settle is fenced by token.
#[derive(Clone, Default)]
struct FakeOutbox {
    rows: Arc<Mutex<Vec<Row>>>,
}

impl FakeOutbox {
    fn insert(&self, event_id: &str, aggregate_type: Option<&str>, order_key: &str) {
        let mut rows = self.rows.lock().unwrap();
        let id = rows.len() as i64 + 1;
        rows.push(Row {
            id,
            event_id: event_id.into(),
            aggregate_type: aggregate_type.map(str::to_owned),
            order_key: order_key.into(),
            token: 0,
            attempts: 0,
            status: Status::Pending,
        });
    }

    fn status(&self, event_id: &str) -> (Status, u32) {
        let rows = self.rows.lock().unwrap();
        let row = rows.iter().find(|r| r.event_id == event_id).unwrap();
        (row.status.clone(), row.attempts)
    }

    fn change(&self, row: &RowRef, apply: impl FnOnce(&mut Row)) -> u64 {
        let mut rows = self.rows.lock().unwrap();
        match rows
            .iter_mut()
            .find(|r| r.id.to_string() == row.id && r.token == row.token && r.status == Status::InFlight)
        {
            Some(r) => {
                apply(r);
                1
            }
            None => 0,
        }
    }
}

impl OutboxStore for FakeOutbox {
    async fn claim(&self, _: &str, batch_size: u32, _: Duration) -> StoreResult<Vec<ClaimedRow>> {
        let mut rows = self.rows.lock().unwrap();
        let mut claimed = Vec::new();
        for r in rows.iter_mut().filter(|r| r.status == Status::Pending).take(batch_size as usize) {
            r.status = Status::InFlight;
            r.token += 1;
            let values = vec![
                Some(r.id.to_string()),
                Some(r.token.to_string()),
                Some(r.event_id.clone()),
                Some(r.attempts.to_string()),
                Some("0".into()),
                Some("0".into()),
                r.aggregate_type.clone(),
                Some(r.order_key.clone()),
                Some("{}".into()),
            ];
            claimed.push(ClaimedRow {
                attempts: r.attempts,
                order_key: Some(r.order_key.clone()),
                ..ClaimedRow::first_claim(r.id.to_string(), r.token, r.event_id.clone(), values)
            });
        }
        Ok(claimed)
    }

    fn columns(&self) -> Arc<[String]> {
        COLUMNS.iter().map(|c| c.to_string()).collect()
    }

    async fn settle_delivered(&self, _: &str, rows: &[Delivered]) -> StoreResult<u64> {
        Ok(rows.iter().map(|d| self.change(&d.row, |r| r.status = Status::Delivered(d.entry_id.clone()))).sum())
    }

    async fn settle_failed(&self, _: &str, failures: &[Failure]) -> StoreResult<u64> {
        Ok(failures
            .iter()
            .map(|f| {
                self.change(&f.row, |r| {
                    r.attempts += 1;
                    r.status = if f.verdict == Verdict::Dead { Status::Dead } else { Status::Pending };
                })
            })
            .sum())
    }

    async fn release(&self, _: &str, rows: &[RowRef], _: Duration) -> StoreResult<u64> {
        Ok(rows.iter().map(|row| self.change(row, |r| r.status = Status::Pending)).sum())
    }

    async fn renew(&self, _: &str, rows: &[RowRef], _: Duration) -> StoreResult<u64> {
        Ok(rows.len() as u64)
    }

    async fn stats(&self) -> StoreResult<Option<OutboxStats>> {
        Ok(None)
    }

    async fn purge(&self, _: Duration, _: u32) -> StoreResult<u64> {
        Ok(0)
    }

    async fn delivered_since(
        &self,
        _: Duration,
        _: usize,
    ) -> StoreResult<Option<crate::relay::outbox::rows::DeliveredPages>> {
        Ok(None)
    }

    async fn redrive(&self, _: &[DeliveredRow]) -> StoreResult<u64> {
        Ok(0)
    }
}

/// A stream in memory: appends succeed with increasing ids unless an outcome is scripted for
/// the event id; ordered runs stop at their first failure, as the append script does.
#[derive(Clone, Default)]
struct FakeStream {
    scripted: Arc<Mutex<HashMap<String, AppendOutcome>>>,
    appended: Arc<Mutex<Vec<String>>>,
}

impl FakeStream {
    fn script(&self, event_id: &str, outcome: AppendOutcome) {
        self.scripted.lock().unwrap().insert(event_id.into(), outcome);
    }

    fn appended(&self) -> Vec<String> {
        self.appended.lock().unwrap().clone()
    }
}

impl EventStream for FakeStream {
    async fn append(&self, entries: &[Entry], _: &AppendOptions) -> Vec<AppendOutcome> {
        let mut failed_runs = Vec::new();
        entries
            .iter()
            .map(|entry| {
                if entry.run.is_some_and(|run| failed_runs.contains(&(entry.stream.clone(), run))) {
                    return AppendOutcome::Skipped;
                }
                let outcome = self.scripted.lock().unwrap().get(&entry.event_id).cloned();
                let outcome = outcome.unwrap_or_else(|| {
                    let mut appended = self.appended.lock().unwrap();
                    appended.push(entry.event_id.clone());
                    AppendOutcome::Appended(format!("{}-0", appended.len()))
                });
                if !matches!(outcome, AppendOutcome::Appended(_) | AppendOutcome::Duplicate(_))
                    && let Some(run) = entry.run
                {
                    failed_runs.push((entry.stream.clone(), run));
                }
                outcome
            })
            .collect()
    }

    async fn ping(&self) -> Result<(), Unavailable> {
        Ok(())
    }

    async fn servers(&self) -> Result<Vec<ServerId>, Unavailable> {
        Ok(Vec::new())
    }

    async fn stream_state(&self, _: &str) -> Result<StreamState, Unavailable> {
        Err(Unavailable("not kept by the fake".into()))
    }

    async fn entries_exist(&self, _: &str, ids: &[String]) -> Result<Vec<bool>, Unavailable> {
        Ok(vec![true; ids.len()])
    }

    async fn reconnected(&self) {
        std::future::pending::<()>().await
    }
}

fn relay(extra: &str, store: FakeOutbox, stream: FakeStream) -> Relay<FakeOutbox, FakeStream> {
    let toml = format!(
        "[database]\nurl = \"postgres://x@localhost/db\"\n[[relay]]\nname = \"t\"\nstream = \"s:{{aggregate_type}}\"\n\
         max_attempts = 3\n{extra}"
    );
    let config = load_str(&toml).unwrap().relays.remove(0);
    let registry = prometheus::Registry::new();
    let deps = RelayDeps {
        store,
        stream,
        metrics: RelayMetrics::register(&registry).unwrap().for_relay("t", "redis"),
        health: Health::default().register("relay t", Duration::from_secs(60), None),
        faults: Faults::default(),
        claimant: "test".into(),
        abandon: CancellationToken::new(),
        release_timeout: Duration::from_secs(1),
        wake: None,
    };
    Relay::new(config, deps).unwrap()
}

async fn one_turn(relay: &Relay<FakeOutbox, FakeStream>) -> super::batch::Turn {
    let rows = relay.deps.store.claim("test#0", 100, Duration::from_secs(30)).await.unwrap();
    relay.process("test#0", rows).await
}

#[tokio::test]
async fn each_outcome_settles_its_row_one_way() {
    let (store, stream) = (FakeOutbox::default(), FakeStream::default());
    for id in ["ok", "dup", "refused", "refused-last", "down", "unconfirmed", "no-stream"] {
        store.insert(id, if id == "no-stream" { None } else { Some("user") }, id);
    }
    store.rows.lock().unwrap().iter_mut().find(|r| r.event_id == "refused-last").unwrap().attempts = 2;
    stream.script("dup", AppendOutcome::Duplicate("7-0".into()));
    stream.script("refused", AppendOutcome::Rejected("WRONGTYPE".into()));
    stream.script("refused-last", AppendOutcome::Rejected("WRONGTYPE".into()));
    stream.script("down", AppendOutcome::Unavailable("connection refused".into()));
    stream.script("unconfirmed", AppendOutcome::Unconfirmed("WAIT 0 of 1".into()));
    let relay = relay("", store.clone(), stream.clone());

    let turn = one_turn(&relay).await;

    assert_eq!(store.status("ok"), (Status::Delivered("1-0".into()), 0), "settled with the id the stream gave");
    assert_eq!(store.status("dup"), (Status::Delivered("7-0".into()), 0), "a duplicate keeps its first entry");
    assert_eq!(store.status("refused"), (Status::Pending, 1), "a refusal of the entry counts an attempt");
    assert_eq!(store.status("refused-last"), (Status::Dead, 3), "the last attempt sends it DEAD");
    assert_eq!(store.status("down"), (Status::Pending, 0), "an outage counts nothing against the row");
    assert_eq!(store.status("unconfirmed"), (Status::Pending, 0), "a missed gate releases untouched");
    assert_eq!(store.status("no-stream"), (Status::Dead, 1), "a row no stream can be named for is DEAD");
    assert!(turn.partial_outage && !turn.stream_outage, "part of the stream was down, part was not");
    assert!(turn.gate_missed);
}

#[tokio::test]
async fn a_batch_whose_every_append_met_an_outage_backs_the_loop_off() {
    let (store, stream) = (FakeOutbox::default(), FakeStream::default());
    for id in ["a", "b"] {
        store.insert(id, Some("user"), id);
        stream.script(id, AppendOutcome::Unavailable("connection refused".into()));
    }
    let turn = one_turn(&relay("", store.clone(), stream)).await;
    assert!(turn.stream_outage && !turn.partial_outage);
    assert_eq!(store.status("a"), (Status::Pending, 0));
}

#[tokio::test]
async fn hold_keeps_a_key_behind_its_dead_event_and_lets_other_keys_go() {
    let (store, stream) = (FakeOutbox::default(), FakeStream::default());
    store.insert("k1-first", None, "k1"); // no stream name: DEAD
    store.insert("k1-second", Some("user"), "k1");
    store.insert("k2-first", Some("user"), "k2");
    let relay = relay("[relay.ordering]\non_failure = \"hold\"\n", store.clone(), stream.clone());
    one_turn(&relay).await;
    assert_eq!(store.status("k1-first").0, Status::Dead);
    assert_eq!(store.status("k1-second"), (Status::Pending, 0), "held behind its key's DEAD event");
    assert_eq!(stream.appended(), ["k2-first"]);
}

#[tokio::test]
async fn an_ordered_run_stops_at_its_first_refusal_and_keeps_the_rest_untouched() {
    let (store, stream) = (FakeOutbox::default(), FakeStream::default());
    for id in ["k-1", "k-2", "k-3"] {
        store.insert(id, Some("user"), "k");
    }
    stream.script("k-2", AppendOutcome::Rejected("WRONGTYPE".into()));
    let relay = relay("[relay.ordering]\non_failure = \"hold\"\n", store.clone(), stream.clone());
    one_turn(&relay).await;
    assert_eq!(store.status("k-1").0, Status::Delivered("1-0".into()));
    assert_eq!(store.status("k-2"), (Status::Pending, 1));
    assert_eq!(store.status("k-3"), (Status::Pending, 0), "skipped, not failed");
    assert_eq!(stream.appended(), ["k-1"]);
}

/// Property: whatever mix of outcomes the stream gives, every claimed row leaves the batch
/// settled exactly once (nothing stays in flight, nothing is settled twice), and only rows the
/// stream stored are DELIVERED.
#[tokio::test]
async fn every_claimed_row_is_settled_exactly_once_whatever_the_stream_answers() {
    let outcomes = [
        None,
        Some(AppendOutcome::Duplicate("9-0".into())),
        Some(AppendOutcome::Rejected("ERR".into())),
        Some(AppendOutcome::Unavailable("down".into())),
        Some(AppendOutcome::Unconfirmed("gate".into())),
    ];
    for seed in 0..200u64 {
        let (store, stream) = (FakeOutbox::default(), FakeStream::default());
        let mut stored = Vec::new();
        for i in 0..20 {
            let id = format!("e{i}");
            let pick = ((seed * 31 + i * 17) ^ (seed >> 2)) as usize % outcomes.len();
            let aggregate = !(pick + i as usize).is_multiple_of(11);
            store.insert(&id, aggregate.then_some("user"), &format!("k{}", i % 4));
            if let Some(outcome) = &outcomes[pick] {
                stream.script(&id, outcome.clone());
            }
            if aggregate && matches!(pick, 0 | 1) {
                stored.push(id);
            }
        }
        let relay = relay("", store.clone(), stream);
        one_turn(&relay).await;
        let rows = store.rows.lock().unwrap().clone();
        assert!(rows.iter().all(|r| r.status != Status::InFlight), "seed {seed}: a row was left in flight");
        for r in &rows {
            let delivered = matches!(r.status, Status::Delivered(_));
            assert_eq!(delivered, stored.contains(&r.event_id), "seed {seed}: {r:?}");
        }
    }
}
