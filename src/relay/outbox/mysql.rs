//! The relay's statements on a MySQL / MariaDB outbox.

use std::collections::HashMap;
use std::time::Duration;

use mysql_async::Row;
use mysql_async::prelude::Queryable;

use super::bindings;
use super::contract::{self, StatementKind};
use super::mysql_sql as defaults;
use super::prepared::{Prepared, needed};
use super::rows::ClaimedRow;
use super::shape::ClaimShape;
use crate::relay::config::RelayConfig;
use crate::sql::params::{self, NamedSql, Placeholder};
use crate::store::error::{PrepareError, StoreResult};
use crate::store::mysql::errors::{error, prepare_refusal};
use crate::store::mysql::pool::{Pool, claim_tx};
use crate::store::mysql::values::{self, Param, bind, row_texts};
use crate::store::rows::{TextPages, TextRow, read_pages};

pub struct MyOutbox {
    pool: Pool,
    /// The claim script's statements, in order.
    claim: Vec<NamedSql>,
    statements: HashMap<StatementKind, NamedSql>,
    pub(super) prepared: Prepared,
}

impl MyOutbox {
    /// Prepares every statement (each statement of the claim script) and checks the claim's
    /// and the stats' result columns; returns every problem found.
    pub(crate) async fn prepare(pool: Pool, relay: &RelayConfig) -> Result<Self, PrepareError> {
        let prefix = format!("relay `{}`", relay.name);
        let mut conn = pool.get_conn().await.map_err(|e| PrepareError::cannot_connect(&prefix, e))?;
        let mut errors = Vec::new();
        let mut statements = HashMap::new();
        let mut claim = Vec::new();
        let mut columns = Vec::new();
        for kind in StatementKind::ALL {
            let needed = needed(kind, relay);
            if !needed {
                continue;
            }
            let context = format!("{prefix} sql.{}", kind.name());
            let sql = relay
                .sql
                .get(kind)
                .map(str::to_owned)
                .unwrap_or_else(|| defaults::relay_sql(kind, &relay.table, relay.claims_created_at()));
            let parts = match params::split_statements(&sql, Placeholder::Positional) {
                Ok(parts) if kind == StatementKind::Claim || parts.len() == 1 => parts,
                Ok(_) => {
                    errors.push(format!("{context}: one statement expected (only the claim is a script)"));
                    continue;
                }
                Err(e) => {
                    errors.push(format!("{context}: {e}"));
                    continue;
                }
            };
            for (i, part) in parts.iter().enumerate() {
                let named = match params::rewrite(part, Placeholder::Positional) {
                    Ok(named) => named,
                    Err(e) => {
                        errors.push(format!("{context}: {e}"));
                        continue;
                    }
                };
                match conn.prep(named.sql.as_str()).await {
                    Err(e) => errors.push(prepare_refusal(&context, e)?),
                    Ok(stmt) => {
                        let names: Vec<String> = stmt.columns().iter().map(|c| c.name_str().into_owned()).collect();
                        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                        if let Some(missing) = contract::missing_result_columns(kind, &refs) {
                            errors.push(format!("{context}: {missing}"));
                        }
                        if kind == StatementKind::Claim && i == parts.len() - 1 {
                            columns = names;
                        }
                    }
                }
                if kind == StatementKind::Claim {
                    claim.push(named);
                } else {
                    statements.insert(kind, named);
                }
            }
        }
        let shape = ClaimShape::new(columns).map_err(|e| errors.push(format!("{prefix} sql.claim: {e}")));
        match shape {
            Ok(shape) if errors.is_empty() => {
                let present = statements.keys().copied().collect();
                Ok(Self { pool, claim, statements, prepared: Prepared { shape, settle: relay.settle, present } })
            }
            _ => Err(PrepareError::Invalid(errors)),
        }
    }

    pub(super) async fn claim(&self, claimant: &str, batch_size: u32, lease: Duration) -> StoreResult<Vec<ClaimedRow>> {
        let mut tx = self.pool.start_transaction(claim_tx()).await.map_err(|e| error("claim", e))?;
        let mut ids: Vec<String> = Vec::new();
        let mut result: Vec<Row> = Vec::new();
        for (i, named) in self.claim.iter().enumerate() {
            let values = bind(named, bindings::claim(claimant, batch_size, lease, &ids));
            let rows: Vec<Row> = tx.exec(named.sql.as_str(), values).await.map_err(|e| error("claim", e))?;
            if i + 1 == self.claim.len() {
                result = rows;
            } else {
                ids.extend(rows.iter().filter_map(|r| row_texts(r).into_iter().next().flatten()));
            }
        }
        tx.commit().await.map_err(|e| error("claim", e))?;
        result
            .iter()
            .map(|row| {
                let (values, unreadable) = values::row_texts_strict(row);
                self.prepared.shape.row(values, &unreadable)
            })
            .collect()
    }

    pub(super) async fn execute(
        &self,
        kind: StatementKind,
        bind_value: impl Fn(&str) -> Param + Send + Sync,
    ) -> StoreResult<u64> {
        let named = &self.statements[&kind];
        let mut conn = self.pool.get_conn().await.map_err(|e| error(kind.name(), e))?;
        conn.exec_drop(named.sql.as_str(), bind(named, bind_value)).await.map_err(|e| error(kind.name(), e))?;
        Ok(conn.affected_rows())
    }

    /// Runs the steps in one transaction (MySQL has no settled-row guard to tell about a
    /// re-drive).
    pub(super) async fn execute_all<F: Fn(&str) -> Param + Send + Sync>(
        &self,
        label: &'static str,
        steps: Vec<(StatementKind, F)>,
    ) -> StoreResult<u64> {
        let mut tx = self.pool.start_transaction(mysql_async::TxOpts::default()).await.map_err(|e| error(label, e))?;
        let mut changed = 0;
        for (kind, value) in steps {
            let named = &self.statements[&kind];
            tx.exec_drop(named.sql.as_str(), bind(named, value)).await.map_err(|e| error(kind.name(), e))?;
            changed += tx.affected_rows();
        }
        tx.commit().await.map_err(|e| error(label, e))?;
        Ok(changed)
    }

    pub(super) async fn query(
        &self,
        kind: StatementKind,
        value: impl Fn(&str) -> Param + Send + Sync,
    ) -> StoreResult<Vec<TextRow>> {
        let named = &self.statements[&kind];
        let mut conn = self.pool.get_conn().await.map_err(|e| error(kind.name(), e))?;
        let rows: Vec<Row> =
            conn.exec(named.sql.as_str(), bind(named, value)).await.map_err(|e| error(kind.name(), e))?;
        Ok(rows.iter().map(text_row).collect())
    }

    /// Reads the result row by row (the server streams it; the client takes rows off the socket
    /// as it goes) on a connection a task holds until the last page is taken, sending a page
    /// every `page` rows.
    pub(super) async fn query_pages(
        &self,
        kind: StatementKind,
        value: impl Fn(&str) -> Param + Send + Sync,
        page: usize,
    ) -> StoreResult<TextPages> {
        let named = &self.statements[&kind];
        let mut conn = self.pool.get_conn().await.map_err(|e| error(kind.name(), e))?;
        let (sql, values) = (named.sql.clone(), bind(named, value));
        let page = page.max(1);
        Ok(read_pages(move |tx| async move {
            let name = kind.name();
            let mut result = conn.exec_iter(sql.as_str(), values).await.map_err(|e| error(name, e))?;
            let mut rows = Vec::with_capacity(page);
            while let Some(row) = result.next().await.map_err(|e| error(name, e))? {
                rows.push(text_row(&row));
                if rows.len() == page && tx.send(Ok(std::mem::take(&mut rows))).await.is_err() {
                    return Ok(());
                }
            }
            let _ = tx.send(Ok(rows)).await;
            Ok(())
        }))
    }
}

/// A result row as text, each value with its column's name.
fn text_row(row: &Row) -> TextRow {
    values::row_columns(row).into_iter().zip(row_texts(row)).collect()
}
