//! `handoff replay`: DELIVERED outbox rows appended again — to their own streams, or to one
//! backfill stream for a new consumer — with their event ids, marked as a replay. A job walks
//! the chosen rows in id order up to the highest id that matched when it started, a page at a
//! time, and records after each page how far it got (`handoff_replays`), so a replay killed or
//! interrupted resumes where it stopped: at most the page in flight is appended twice, and the
//! inbox's dedupe absorbs that. It reads without locking and appends at its own `rate`, so the
//! live relay is not held up.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::database as replay;
use super::rows::{COLUMNS, Checkpoint, ReplayRow, Source};
use crate::broker::{AppendOptions, AppendOutcome, EventStream};
use crate::config::Config;
use crate::error::error_chain;
use crate::relay::config::{RelayConfig, SettleMode};
use crate::relay::entries::EntryBuilder;
use crate::relay::outbox::ClaimedRow;
use crate::store::selection::{Moment, Selection};
use crate::store::{Database, StoreError};

/// The field every replayed entry carries: the job's name.
pub(super) const REPLAY_FIELD: &str = "replay";

/// Which time `--since` / `--until` look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OutboxTime {
    Created,
    Delivered,
}

impl OutboxTime {
    fn column(self) -> &'static str {
        match self {
            OutboxTime::Created => "created_at",
            OutboxTime::Delivered => "delivered_at",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub relay: String,
    pub selection: Selection,
    pub time: OutboxTime,
    /// Every entry to this stream (a subject on NATS) instead of the row's own.
    pub to_stream: Option<String>,
    /// Rows per second at most; 0: as fast as the broker takes them.
    pub rate: u32,
    pub batch: u32,
    /// The job's name; default: from the relay, the selection and the target, so the same
    /// command resumes the same job.
    pub job: Option<String>,
    /// Start the job over even if it finished or got part-way.
    pub restart: bool,
    /// Replay what is left of a range retention has partly deleted.
    pub allow_partial: bool,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplayError {
    #[error("no relay named `{0}` in the config (configured: {1})")]
    Unknown(String, String),
    #[error("relay `{0}` uses its own statements; replay serves the reference schema")]
    CustomStatements(String),
    #[error("relay `{0}` deletes rows as it delivers them (settle = \"delete\"): there is nothing to replay")]
    Deleted(String),
    #[error("{0}; --allow-partial replays what is left")]
    Gone(String),
    #[error("job `{0}` was started with other filters or another target; name another --job or --restart it")]
    OtherJob(String),
    #[error("relay `{relay}`: {error}")]
    Template { relay: String, error: String },
    #[error("row {id} (event {event_id}) cannot become an entry: {reason}")]
    Row { id: i64, event_id: String, reason: String },
    #[error("the broker refused the entry of row {id} (event {event_id}): {reason}")]
    Rejected { id: i64, event_id: String, reason: String },
    #[error("{}", error_chain(.0))]
    Store(#[from] StoreError),
}

/// Where a job stands, reported after every page.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Progress {
    pub job: String,
    pub appended: i64,
    pub total: i64,
    pub after_id: i64,
    pub done: bool,
    /// The run was interrupted (Ctrl-C, SIGTERM); the same command resumes it.
    pub interrupted: bool,
}

/// A job ready to run: its checkpoint (resumed, or new), and whether it had finished already.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub checkpoint: Checkpoint,
    pub resumed: bool,
    pub finished: bool,
}

fn relay<'a>(config: &'a Config, name: &str) -> Result<&'a RelayConfig, ReplayError> {
    let relay = config.relays.iter().find(|r| r.name == name).ok_or_else(|| {
        let names: Vec<&str> = config.relays.iter().map(|r| r.name.as_str()).collect();
        ReplayError::Unknown(name.to_owned(), if names.is_empty() { "none".into() } else { names.join(", ") })
    })?;
    if relay.sql.claim.is_some() {
        return Err(ReplayError::CustomStatements(name.to_owned()));
    }
    if relay.settle == SettleMode::Delete {
        return Err(ReplayError::Deleted(name.to_owned()));
    }
    Ok(relay)
}

/// Checks the request, refuses a range retention has partly deleted, and finds or creates the
/// job's checkpoint (written only when `write`: a dry run leaves no trace).
pub(crate) async fn plan(config: &Config, db: &Database, request: &Request, write: bool) -> Result<Plan, ReplayError> {
    let relay = relay(config, &request.relay)?;
    let source = Source { table: &relay.table, time_column: request.time.column(), selection: &request.selection };
    gone(db, relay, source, request.allow_partial).await?;
    let key = serde_json::json!({ "selection": request.selection, "time": request.time }).to_string();
    let target = request.to_stream.clone().unwrap_or_default();
    let job = request.job.clone().unwrap_or_else(|| default_job(&relay.name, &key, &target));
    if let Some(checkpoint) = replay::load(db, &job).await?
        && !request.restart
    {
        if checkpoint.relay != relay.name || checkpoint.selection != key || checkpoint.target != target {
            return Err(ReplayError::OtherJob(job));
        }
        return Ok(Plan { finished: checkpoint.finished, resumed: true, checkpoint });
    }
    let extent = replay::extent(db, source, 0).await?;
    let checkpoint = Checkpoint {
        job,
        relay: relay.name.clone(),
        target,
        selection: key,
        through_id: extent.through_id,
        after_id: 0,
        appended: 0,
        total: extent.matching,
        finished: false,
    };
    if write {
        replay::restart(db, &checkpoint).await?;
    }
    Ok(Plan { checkpoint, resumed: false, finished: false })
}

/// `replay-<relay>-<hash of what and where>`.
fn default_job(relay: &str, key: &str, target: &str) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(format!("{key}\n{target}").as_bytes());
    let hex: String = hash.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("replay-{relay}-{hex}")
}

/// Refuses when the range asks for rows retention has deleted.
async fn gone(db: &Database, relay: &RelayConfig, source: Source<'_>, allow: bool) -> Result<(), ReplayError> {
    if allow {
        return Ok(());
    }
    let oldest = replay::oldest(db, source.table, source.time_column).await?;
    if let Some(from) = source.selection.from_id
        && let Some(lowest) = oldest.lowest_id.filter(|lowest| *lowest > from)
    {
        return Err(ReplayError::Gone(format!(
            "rows {from} to {} of relay `{}` are gone (deleted): the lowest id left is {lowest}",
            lowest - 1,
            relay.name
        )));
    }
    let (Some(retention), Some(since)) = (&relay.retention, source.selection.since) else { return Ok(()) };
    let asked = match since {
        Moment::Ago(ago) => ago,
        Moment::UnixMillis(ms) => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            now.saturating_sub(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
        }
    };
    if asked > retention.delivered_after {
        let left = oldest.age_seconds.map_or("no row is left".to_owned(), |age| {
            format!(
                "the oldest row left is {} old",
                humantime::format_duration(Duration::from_secs(age.max(0.0) as u64))
            )
        });
        return Err(ReplayError::Gone(format!(
            "relay `{}` deletes delivered rows after {} (relay.retention.delivered_after) and --since asks for {} back: \
             about {} of the range are gone ({left})",
            relay.name,
            humantime::format_duration(retention.delivered_after),
            humantime::format_duration(Duration::from_secs(asked.as_secs())),
            humantime::format_duration(Duration::from_secs((asked - retention.delivered_after).as_secs())),
        )));
    }
    Ok(())
}

/// Runs the job from its checkpoint until every row is appended or `stop` fires (after the
/// page in hand). A broker that does not answer is waited for; a row that cannot become an
/// entry, or an entry the broker refuses, stops the job (its checkpoint stands).
pub(crate) async fn run<P: EventStream>(
    config: &Config,
    db: &Database,
    stream: &P,
    request: &Request,
    mut checkpoint: Checkpoint,
    mut progress: impl FnMut(&Progress),
    stop: CancellationToken,
) -> Result<Progress, ReplayError> {
    let relay = relay(config, &request.relay)?;
    let columns: Vec<String> = COLUMNS.iter().map(|c| (*c).to_owned()).collect();
    let builder = EntryBuilder::new(relay, &columns)
        .map_err(|e| ReplayError::Template { relay: relay.name.clone(), error: e.to_string() })?;
    let options = append_options(relay);
    let source = Source { table: &relay.table, time_column: request.time.column(), selection: &request.selection };
    let (started, start_count) = (Instant::now(), checkpoint.appended);
    let report = |c: &Checkpoint, done: bool, interrupted: bool| Progress {
        job: c.job.clone(),
        appended: c.appended,
        total: c.total,
        after_id: c.after_id,
        done,
        interrupted,
    };
    let mut outage = crate::runtime::backoff::Retrier::new(crate::runtime::backoff::BackoffConfig::outage_default());
    loop {
        if stop.is_cancelled() {
            return Ok(report(&checkpoint, false, true));
        }
        let ids = (checkpoint.after_id, checkpoint.through_id);
        let rows = replay::page(db, source, ids, request.batch.max(1)).await?;
        let Some(last) = rows.last().map(|r| r.id) else {
            replay::finish(db, &checkpoint.job).await?;
            let done = report(&checkpoint, true, false);
            progress(&done);
            return Ok(done);
        };
        let entries = rows
            .iter()
            .map(|row| entry(&builder, row, &checkpoint.job, request.to_stream.as_deref()))
            .collect::<Result<Vec<_>, _>>()?;
        let outcomes = stream.append(&entries, &options).await;
        // Appended up to the first entry that was not: the checkpoint moves that far.
        let through =
            outcomes.iter().take_while(|o| matches!(o, AppendOutcome::Appended(_) | AppendOutcome::Duplicate(_)));
        let appended = through.count();
        if appended > 0 {
            checkpoint.after_id = if appended == rows.len() { last } else { rows[appended - 1].id };
            checkpoint.appended += appended as i64;
            replay::save(db, &checkpoint.job, checkpoint.after_id, checkpoint.appended).await?;
            progress(&report(&checkpoint, false, false));
        }
        match outcomes.get(appended) {
            None => outage.succeeded(),
            Some(AppendOutcome::Rejected(reason)) => {
                let row = &rows[appended];
                return Err(ReplayError::Rejected {
                    id: row.id,
                    event_id: row.event_id.clone(),
                    reason: reason.clone(),
                });
            }
            Some(other) => {
                let wait = outage.failed();
                tracing::warn!(job = %checkpoint.job, outcome = ?other, retry_in_ms = wait.as_millis() as u64, "broker did not take the page; retrying");
                crate::runtime::wait::sleep_or(wait, &stop).await;
                continue;
            }
        }
        // The rate: the rows appended by this run so far may not be ahead of rate × elapsed.
        if request.rate > 0 {
            let due = Duration::from_secs_f64((checkpoint.appended - start_count) as f64 / f64::from(request.rate));
            if let Some(ahead) = due.checked_sub(started.elapsed()) {
                crate::runtime::wait::sleep_or(ahead, &stop).await;
            }
        }
    }
}

/// The relay's trimming and durability gate; no dedupe (a replay must not be skipped as a
/// repeat of the event it repeats).
fn append_options(relay: &RelayConfig) -> AppendOptions {
    AppendOptions { dedupe: None, ..crate::relay::append_options(relay) }
}

/// The row's entry as the relay builds it, plus the replay field; to `to_stream` if given. Its
/// dedupe id is the event's, scoped to the job: JetStream drops a page the same job appends
/// twice within its duplicate window, never the replay of an event delivered a minute ago.
fn entry(
    builder: &EntryBuilder,
    row: &ReplayRow,
    job: &str,
    to_stream: Option<&str>,
) -> Result<crate::broker::Entry, ReplayError> {
    let mut claimed = ClaimedRow::first_claim(row.id.to_string(), 0, row.event_id.clone(), row.values.clone());
    let mut entry = builder.build(&mut claimed).map_err(|refusal| ReplayError::Row {
        id: row.id,
        event_id: row.event_id.clone(),
        reason: refusal.to_string(),
    })?;
    if let Some(stream) = to_stream {
        entry.stream = stream.to_owned();
    }
    entry.fields.push((Bytes::from_static(REPLAY_FIELD.as_bytes()), Bytes::copy_from_slice(job.as_bytes())));
    entry.event_id = format!("{}/replay/{job}", row.event_id);
    Ok(entry)
}
