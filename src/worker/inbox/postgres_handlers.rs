//! What the worker's leased and locked batches share on Postgres: handler statements sent all at
//! once on the batch's connection, and result rows read by column name.

use std::borrow::Cow;
use std::collections::HashMap;

use super::rows::{ApplyError, BindValue, BoundStatement, InboxRow, merged};
use crate::store::error::{StoreError, StoreResult};
use crate::store::postgres::errors::query_error;
use crate::store::postgres::values::{Cell, Param, refs};
use crate::store::rows::TextRow;
use crate::worker::config::HandlerErrors;

/// Runs every handler statement of `items` in the transaction on `client` — each batch
/// statement once for all its rows ([`merged`]), all sent at once: tokio-postgres pipelines
/// queries polled together on one connection — and then `along` (the locked claim's mark),
/// polled after them so it is sent after them. `None`: a statement refused a row's data, and the
/// transaction is aborted; an outage is an error.
pub(crate) async fn run_handlers<C: deadpool_postgres::GenericClient, F: Future>(
    client: &C,
    items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    along: F,
    errors: &HandlerErrors,
) -> StoreResult<Option<F::Output>> {
    let statements = merged(items.iter().flat_map(|(_, statements)| statements));
    match run_statements(client, &statements, along, errors).await {
        Ok(along) => Ok(Some(along)),
        Err(ApplyError::Handler { .. }) => Ok(None),
        Err(ApplyError::Store(e)) => Err(e),
    }
}

/// Runs `statements` (already merged) as [`run_handlers`] does; [`ApplyError::Handler`]: a
/// statement refused a row's data.
pub(crate) async fn run_statements<C: deadpool_postgres::GenericClient, F: Future>(
    client: &C,
    statements: &[Cow<'_, BoundStatement<'_>>],
    along: F,
    errors: &HandlerErrors,
) -> Result<F::Output, ApplyError> {
    let mut prepared = HashMap::new();
    for statement in statements {
        if !prepared.contains_key(statement.sql) {
            let stmt =
                client.prepare_cached(statement.sql).await.map_err(|e| handler_error(statement.index, e, errors))?;
            prepared.insert(statement.sql, stmt);
        }
    }
    let calls: Vec<(&tokio_postgres::Statement, Vec<Param>)> =
        statements.iter().map(|s| (&prepared[s.sql], s.values.iter().map(to_param).collect())).collect();
    let sent = futures_util::future::join_all(
        calls.iter().map(|(stmt, values)| async move { client.execute(*stmt, &refs(values)).await }),
    );
    let (outcomes, along) = futures_util::future::join(sent, along).await;
    // Replies come in order; after the first error the server refuses the rest of the
    // transaction, so the first error is the one that matters.
    for outcome in outcomes {
        outcome.map_err(|e| handler_error(0, e, errors))?;
    }
    Ok(along)
}

/// Result rows as text by column name (the claim's and stats' result contract).
pub(crate) fn text_rows(
    stmt: &tokio_postgres::Statement,
    rows: &[tokio_postgres::Row],
    label: &str,
) -> StoreResult<Vec<TextRow>> {
    let names: Vec<&str> = stmt.columns().iter().map(|c| c.name()).collect();
    rows.iter()
        .map(|row| {
            (0..row.len())
                .map(|i| row.try_get::<_, Option<Cell>>(i).map(|c| (names[i].to_owned(), c.map(|c| c.0))))
                .collect::<Result<TextRow, _>>()
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StoreError::Contract(format!("worker sql.{label}: {e}")))
}

pub(crate) fn to_param(value: &BindValue) -> Param {
    match value {
        BindValue::Null => Param::Null,
        BindValue::Text(s) => Param::Text(s.clone()),
        BindValue::Json(s) => Param::Json(s.clone()),
        BindValue::Texts(v) => Param::Column(v.clone()),
        BindValue::Jsons(v) => Param::JsonColumn(v.clone()),
    }
}

/// A handler statement's error: the row's data at fault (DEAD), or an outage of the store.
pub(crate) fn handler_error(index: usize, error: tokio_postgres::Error, errors: &HandlerErrors) -> ApplyError {
    ApplyError::from_handler(index, query_error("handler", error), errors)
}
