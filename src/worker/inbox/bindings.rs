//! What each named parameter of the worker's statements is bound to — the parameter half of its
//! SQL contract, in one place for every dialect.

use std::time::Duration;

use super::rows::InboxRow;
use crate::store::param::{Param, millis};

pub(crate) fn claim<'a>(
    consumer: &'a str,
    claimant: &'a str,
    batch_size: u32,
    lease: Duration,
) -> impl Fn(&str) -> Param + 'a {
    move |name| match name {
        "consumer" => Param::Text(consumer.to_owned()),
        "claimant" => Param::Text(claimant.to_owned()),
        "batch_size" => Param::Int(batch_size.into()),
        "ids" => Param::Texts(Vec::new()),
        _ => Param::Int(millis(lease)),
    }
}

/// `processed`, `renew`, `release`: the rows with their fencing tokens (and the new lease).
pub(crate) fn held<'a>(claimant: &'a str, rows: &[(String, i64)], lease: Duration) -> impl Fn(&str) -> Param + 'a {
    let (ids, tokens): (Vec<String>, Vec<i64>) = rows.iter().cloned().unzip();
    move |name| match name {
        "claimant" => Param::Text(claimant.to_owned()),
        "ids" => Param::Texts(ids.clone()),
        "tokens" => Param::Ints(tokens.clone()),
        _ => Param::Int(millis(lease)),
    }
}

/// `retry` / `dead` for one row.
pub(crate) fn failure<'a>(
    claimant: &'a str,
    row: &'a InboxRow,
    error: &'a str,
    delay: Duration,
) -> impl Fn(&str) -> Param + 'a {
    move |name| match name {
        "claimant" => Param::Text(claimant.to_owned()),
        "id" => Param::Text(row.id.clone()),
        "token" => Param::Int(row.token),
        "error" => Param::Text(error.to_owned()),
        _ => Param::Int(millis(delay)),
    }
}

/// `stats` and `purge`.
pub(crate) fn consumer<'a>(consumer: &'a str, age: Duration, batch_size: u32) -> impl Fn(&str) -> Param + 'a {
    move |name| match name {
        "consumer" => Param::Text(consumer.to_owned()),
        "batch_size" => Param::Int(batch_size.into()),
        _ => Param::Int(millis(age)),
    }
}
