//! The relay's statements on a Postgres outbox: prepared and checked once, executed per batch.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_postgres::Row;

use super::bindings;
use super::contract::{self, StatementKind};
use super::postgres_locked::Locked;
use super::postgres_locked::{self, LockedSql};
use super::postgres_sql as defaults;
use super::prepared::{Prepared, needed};
use super::rows::ClaimedRow;
use super::shape::ClaimShape;
use crate::relay::config::RelayConfig;
use crate::runtime::loop_config::ClaimMode;
use crate::sql::params::{self, Placeholder};
use crate::store::error::{PrepareError, StoreError, StoreResult};
use crate::store::postgres::errors::{pool_error, prepare_refusal, query_error};
use crate::store::postgres::scan_start::SCAN_DUE;
use crate::store::postgres::values::{Cell, Param, refs, type_problems};
use crate::store::rows::{TextPages, TextRow, read_pages};

/// A statement rewritten to `$n` placeholders, with the parameter name behind each.
#[derive(Debug, Clone)]
struct Statement {
    kind: StatementKind,
    sql: String,
    names: Vec<String>,
}

pub struct PgOutbox {
    pool: Pool,
    statements: HashMap<StatementKind, Statement>,
    pub(super) prepared: Prepared,
    /// The locked claim's statements (`claim = "locked"`).
    locked: Option<Arc<LockedSql>>,
}

impl PgOutbox {
    /// Prepares every statement the relay will run and checks parameter and column types, so a
    /// broken override fails at startup (and in `handoff check`) instead of on the first batch.
    /// Returns every problem found, each naming its statement.
    pub(crate) async fn prepare(pool: Pool, relay: &RelayConfig) -> Result<Self, PrepareError> {
        let prefix = format!("relay `{}`", relay.name);
        let client = pool.get().await.map_err(|e| PrepareError::cannot_connect(&prefix, e))?;
        let mut statements = HashMap::new();
        let mut errors = Vec::new();
        let mut columns = Vec::new();
        for kind in StatementKind::ALL {
            let sql = match (relay.sql.get(kind), kind, &relay.ordering) {
                (Some(sql), _, _) => sql.to_owned(),
                (None, StatementKind::Claim, Some(ordering)) => {
                    defaults::ordered_claim(&relay.table, ordering.on_failure, relay.claims_created_at())
                }
                (None, _, _) => defaults::relay_sql(kind, &relay.table, relay.claims_created_at()),
            };
            let context = format!("{prefix} sql.{}", kind.name());
            let named = match params::rewrite(&sql, Placeholder::Numbered) {
                Ok(named) => named,
                Err(e) => {
                    errors.push(format!("{context}: {e}"));
                    continue;
                }
            };
            let needed = needed(kind, relay);
            if !needed {
                continue;
            }
            match client.prepare(&named.sql).await {
                Err(e) => errors.push(prepare_refusal(&context, e)?),
                Ok(stmt) => {
                    errors.extend(type_problems(&context, &named.names, &stmt, kind == StatementKind::Claim));
                    if kind == StatementKind::Claim {
                        columns = stmt.columns().iter().map(|c| c.name().to_owned()).collect();
                    }
                    let names: Vec<&str> = stmt.columns().iter().map(|c| c.name()).collect();
                    if let Some(missing) = contract::missing_result_columns(kind, &names) {
                        errors.push(format!("{context}: {missing}"));
                    }
                    statements.insert(kind, Statement { kind, sql: named.sql, names: named.names });
                }
            }
        }
        let locked = match relay.claim_loop.claim {
            ClaimMode::Leased | ClaimMode::Auto => None,
            ClaimMode::Locked => {
                let sql = LockedSql::returning(
                    &relay.table,
                    relay.settle,
                    relay.partitions.is_some(),
                    relay.claims_created_at(),
                );
                for (name, text) in sql.statements() {
                    match client.prepare(text).await {
                        Err(e) => errors.push(prepare_refusal(&format!("{prefix} {name}"), e)?),
                        Ok(stmt) if name == "lock" => {
                            let mut names: Vec<&str> = stmt.columns().iter().map(|c| c.name()).collect();
                            // A partitioned outbox's lock returns each row's partition last.
                            if relay.partitions.is_some() && names.last() == Some(&postgres_locked::PARTITION) {
                                names.pop();
                            }
                            let matches = names.split_last().is_some_and(|(last, rest)| {
                                *last == SCAN_DUE && rest.iter().copied().eq(columns.iter().map(String::as_str))
                            });
                            if !matches {
                                errors.push(format!(
                                    "{prefix} lock: returns columns {names:?}, the claim {columns:?} and `{SCAN_DUE}`; claim = \"locked\" needs the reference claim"
                                ));
                            }
                        }
                        Ok(_) => {}
                    }
                }
                Some(Arc::new(sql))
            }
        };
        let shape = ClaimShape::new(columns).map_err(|e| {
            errors.push(format!("{prefix} sql.claim: {e}"));
        });
        match shape {
            Ok(shape) if errors.is_empty() => {
                let present = statements.keys().copied().collect();
                Ok(Self { pool, statements, prepared: Prepared { shape, settle: relay.settle, present }, locked })
            }
            _ => Err(PrepareError::Invalid(errors)),
        }
    }

    fn parse_row(&self, row: &Row) -> StoreResult<ClaimedRow> {
        // Sized once: collecting through `Result` would grow the vector a few times per row.
        // The claim's columns only: the locked claim's lock returns one more after them.
        let columns = self.prepared.shape.columns.len().min(row.len());
        let mut values: Vec<Option<String>> = Vec::with_capacity(columns);
        let mut unreadable = Vec::new();
        for i in 0..columns {
            // A value that does not decode (bytes that are not UTF-8 in a SQL_ASCII database) is
            // the row's fault, not the claim's: the shape decides what that means.
            match row.try_get::<_, Option<Cell>>(i) {
                Ok(cell) => values.push(cell.map(|c| c.0)),
                Err(_) => {
                    unreadable.push(i);
                    values.push(None);
                }
            }
        }
        self.prepared.shape.row(values, &unreadable)
    }

    pub(super) async fn claim(&self, claimant: &str, batch_size: u32, lease: Duration) -> StoreResult<Vec<ClaimedRow>> {
        let prepared = &self.statements[&StatementKind::Claim];
        let client = self.pool.get().await.map_err(|e| pool_error("claim", e))?;
        let stmt = client.prepare_cached(&prepared.sql).await.map_err(|e| query_error("claim", e))?;
        let bind = bindings::claim(claimant, batch_size, lease, &[]);
        let values: Vec<Param> = prepared.names.iter().map(|name| bind(name)).collect();
        let rows = client.query(&stmt, &refs(&values)).await.map_err(|e| query_error("claim", e))?;
        rows.iter().map(|row| self.parse_row(row)).collect()
    }

    pub(super) async fn lock(&self, batch_size: u32, idle_timeout: Duration) -> StoreResult<Locked> {
        let Some(sql) = &self.locked else {
            return Err(StoreError::Contract("the relay is not configured with claim = \"locked\"".into()));
        };
        postgres_locked::lock(&self.pool, sql, batch_size, idle_timeout, |row| self.parse_row(row)).await
    }

    pub(super) async fn execute(
        &self,
        kind: StatementKind,
        bind: impl Fn(&str) -> Param + Send + Sync,
    ) -> StoreResult<u64> {
        let prepared = &self.statements[&kind];
        let client = self.pool.get().await.map_err(|e| pool_error(kind.name(), e))?;
        let stmt = client.prepare_cached(&prepared.sql).await.map_err(|e| query_error(kind.name(), e))?;
        let values: Vec<Param> = prepared.names.iter().map(|n| bind(n)).collect();
        client.execute(&stmt, &refs(&values)).await.map_err(|e| query_error(prepared.kind.name(), e))
    }

    pub(super) async fn execute_all<F: Fn(&str) -> Param + Send + Sync>(
        &self,
        label: &'static str,
        redrive: bool,
        steps: Vec<(StatementKind, F)>,
    ) -> StoreResult<u64> {
        let mut client = self.pool.get().await.map_err(|e| pool_error(label, e))?;
        let tx = client.transaction().await.map_err(|e| query_error(label, e))?;
        if redrive {
            tx.batch_execute("SET LOCAL handoff.redrive = 'on'").await.map_err(|e| query_error(label, e))?;
        }
        let mut changed = 0;
        for (kind, bind) in steps {
            let prepared = &self.statements[&kind];
            let stmt = tx.prepare_cached(&prepared.sql).await.map_err(|e| query_error(kind.name(), e))?;
            let values: Vec<Param> = prepared.names.iter().map(|n| bind(n)).collect();
            changed += tx.execute(&stmt, &refs(&values)).await.map_err(|e| query_error(kind.name(), e))?;
        }
        tx.commit().await.map_err(|e| query_error(label, e))?;
        Ok(changed)
    }

    pub(super) async fn query(
        &self,
        kind: StatementKind,
        bind: impl Fn(&str) -> Param + Send + Sync,
    ) -> StoreResult<Vec<TextRow>> {
        let prepared = &self.statements[&kind];
        let client = self.pool.get().await.map_err(|e| pool_error(kind.name(), e))?;
        let stmt = client.prepare_cached(&prepared.sql).await.map_err(|e| query_error(kind.name(), e))?;
        let values: Vec<Param> = prepared.names.iter().map(|n| bind(n)).collect();
        let rows = client.query(&stmt, &refs(&values)).await.map_err(|e| query_error(kind.name(), e))?;
        text_rows(&rows)
    }

    /// Reads through a portal, `page` rows per fetch, in a read-only transaction on a
    /// connection of its own that a task holds until the last page is taken (or the reader
    /// drops the pages).
    pub(super) async fn query_pages(
        &self,
        kind: StatementKind,
        bind: impl Fn(&str) -> Param + Send + Sync,
        page: usize,
    ) -> StoreResult<TextPages> {
        let prepared = &self.statements[&kind];
        let mut client = self.pool.get().await.map_err(|e| pool_error(kind.name(), e))?;
        let values: Vec<Param> = prepared.names.iter().map(|n| bind(n)).collect();
        let sql = prepared.sql.clone();
        let page = page.clamp(1, i32::MAX as usize);
        Ok(read_pages(move |tx| async move {
            let name = kind.name();
            let transaction =
                client.build_transaction().read_only(true).start().await.map_err(|e| query_error(name, e))?;
            let stmt = transaction.prepare_cached(&sql).await.map_err(|e| query_error(name, e))?;
            let portal = transaction.bind(&stmt, &refs(&values)).await.map_err(|e| query_error(name, e))?;
            loop {
                let rows = transaction.query_portal(&portal, page as i32).await.map_err(|e| query_error(name, e))?;
                let last = rows.len() < page;
                if tx.send(text_rows(&rows)).await.is_err() || last {
                    return Ok(());
                }
            }
        }))
    }
}

/// Result rows as text, each value with its column's name.
fn text_rows(rows: &[Row]) -> StoreResult<Vec<TextRow>> {
    rows.iter()
        .map(|row| {
            row.columns()
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let cell: Option<Cell> = row.try_get(i).map_err(|e| StoreError::Contract(e.to_string()))?;
                    Ok((c.name().to_owned(), cell.map(|c| c.0)))
                })
                .collect()
        })
        .collect()
}
