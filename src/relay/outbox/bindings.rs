//! What each named parameter of the relay's statements is bound to — the parameter half of the
//! SQL contract (docs/reference/sql-contract.md), in one place for every dialect. A dialect only turns [`Param`] into its
//! own wire values (Postgres: the placeholder's inferred type; MySQL: text and JSON arrays).

use std::time::Duration;

use super::contract::StatementKind;
use super::rows::{Delivered, DeliveredRow, Failure, RowRef, Verdict};
pub(crate) use crate::store::param::{Param, millis};

/// `claim`: `:ids` holds the ids earlier statements of a multi-statement claim returned (MySQL),
/// empty otherwise.
pub(crate) fn claim<'a>(
    claimant: &'a str,
    batch_size: u32,
    lease: Duration,
    ids: &'a [String],
) -> impl Fn(&str) -> Param + 'a {
    move |name| match name {
        "claimant" => Param::Text(claimant.to_owned()),
        "batch_size" => Param::Int(batch_size.into()),
        "ids" => Param::Texts(ids.to_vec()),
        _ => Param::Int(millis(lease)),
    }
}

/// `mark_delivered` / `delete`: the rows with their fencing tokens, the entry ids they became
/// and the streams those entries are in.
pub(crate) fn delivered<'a>(claimant: &'a str, rows: &[Delivered]) -> impl Fn(&str) -> Param + 'a {
    let (ids, tokens): (Vec<String>, Vec<i64>) = rows.iter().map(|d| (d.row.id.clone(), d.row.token)).unzip();
    let entry_ids: Vec<String> = rows.iter().map(|d| d.entry_id.clone()).collect();
    let streams: Vec<String> = rows.iter().map(|d| d.stream.clone()).collect();
    move |name| match name {
        "claimant" => Param::Text(claimant.to_owned()),
        "ids" => Param::Texts(ids.clone()),
        "tokens" => Param::Ints(tokens.clone()),
        "streams" => Param::Texts(streams.clone()),
        _ => Param::Texts(entry_ids.clone()),
    }
}

/// `delivered_since`: the window's age.
pub(crate) fn delivered_since(age: Duration) -> impl Fn(&str) -> Param {
    move |_| Param::Int(millis(age))
}

/// `redrive`: the rows to move back to PENDING, with the entry ids they were settled with.
pub(crate) fn redrive(rows: &[DeliveredRow]) -> impl Fn(&str) -> Param + '_ {
    move |name| match name {
        "ids" => Param::Texts(rows.iter().map(|r| r.id.clone()).collect()),
        _ => Param::Texts(rows.iter().map(|r| r.entry_id.clone()).collect()),
    }
}

/// `retry` or `dead` for one failed row, and which of the two it is.
pub(crate) fn failure<'a>(claimant: &'a str, failure: &'a Failure) -> (StatementKind, impl Fn(&str) -> Param + 'a) {
    let (kind, delay) = match failure.verdict {
        Verdict::Retry { delay } => (StatementKind::Retry, delay),
        Verdict::Dead => (StatementKind::Dead, Duration::ZERO),
    };
    let bind = move |name: &str| match name {
        "claimant" => Param::Text(claimant.to_owned()),
        "id" => Param::Text(failure.row.id.clone()),
        "token" => Param::Int(failure.row.token),
        "error" => Param::Text(failure.error.clone()),
        _ => Param::Int(millis(delay)),
    };
    (kind, bind)
}

/// `release` / `renew`: the rows with their fencing tokens, and `duration`: the delay before
/// released rows are due again (`delay_ms`), or the new lease (`lease_ms`).
pub(crate) fn held<'a>(claimant: &'a str, rows: &[RowRef], duration: Duration) -> impl Fn(&str) -> Param + 'a {
    let (ids, tokens): (Vec<String>, Vec<i64>) = rows.iter().map(|r| (r.id.clone(), r.token)).unzip();
    move |name| match name {
        "claimant" => Param::Text(claimant.to_owned()),
        "ids" => Param::Texts(ids.clone()),
        "tokens" => Param::Ints(tokens.clone()),
        _ => Param::Int(millis(duration)),
    }
}

/// `purge`: delivered rows older than `age`, at most `batch` of them.
pub(crate) fn purge(age: Duration, batch: u32) -> impl Fn(&str) -> Param {
    move |name| match name {
        "age_ms" => Param::Int(millis(age)),
        _ => Param::Int(batch.into()),
    }
}
