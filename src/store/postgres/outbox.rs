//! The relay's statements on a Postgres outbox: prepared and checked once, executed per batch.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::values::{Cell, Param, column_type_supported, param_type_supported};
use super::{defaults, pool_error, query_error};
use crate::config::statements::{self, StatementKind};
use crate::config::{RelayConfig, SettleMode};
use crate::sql::params::{self, Placeholder};
use crate::store::PrepareError;
use crate::store::bindings;
use crate::store::claim::ClaimShape;
use crate::store::{
    ClaimedRow, Delivered, DeliveredRow, Failure, OutboxStats, OutboxStore, RowRef, StoreError, StoreResult,
};

/// A statement rewritten to `$n` placeholders, with the parameter name behind each.
#[derive(Debug, Clone)]
struct Prepared {
    kind: StatementKind,
    sql: String,
    names: Vec<String>,
}

pub struct PgOutbox {
    pool: Pool,
    statements: HashMap<StatementKind, Prepared>,
    settle: SettleMode,
    shape: ClaimShape,
}

impl PgOutbox {
    /// Prepares every statement the relay will run and checks parameter and column types, so a
    /// broken override fails at startup (and in `handoff check`) instead of on the first batch.
    /// Returns every problem found, each naming its statement.
    pub async fn prepare(pool: Pool, relay: &RelayConfig) -> Result<Self, PrepareError> {
        let prefix = format!("relay `{}`", relay.name);
        let client = pool
            .get()
            .await
            .map_err(|e| PrepareError::Unreachable(format!("{prefix}: cannot connect to the database: {e}")))?;
        let mut statements = HashMap::new();
        let mut errors = Vec::new();
        let mut columns = Vec::new();
        for kind in StatementKind::ALL {
            let sql = match (relay.sql.get(kind), kind, &relay.ordering) {
                (Some(sql), _, _) => sql.to_owned(),
                (None, StatementKind::Claim, Some(ordering)) => {
                    defaults::ordered_claim(&relay.table, ordering.on_failure)
                }
                (None, _, _) => defaults::default_sql(kind, &relay.table),
            };
            let context = format!("{prefix} sql.{}", kind.name());
            let named = match params::rewrite(&sql, Placeholder::Numbered) {
                Ok(named) => named,
                Err(e) => {
                    errors.push(format!("{context}: {e}"));
                    continue;
                }
            };
            let needed = crate::config::statements::needed(kind, relay);
            if !needed {
                continue;
            }
            match client.prepare(&named.sql).await {
                Err(e) => errors.push(super::prepare_refusal(&context, e)?),
                Ok(stmt) => {
                    for (name, ty) in named.names.iter().zip(stmt.params()) {
                        if !param_type_supported(ty) {
                            errors.push(format!(
                                "{context}: parameter :{name} has type {ty}, which cannot be bound; cast it, e.g. :{name}::text"
                            ));
                        }
                    }
                    if kind == StatementKind::Claim {
                        for column in stmt.columns() {
                            if !column_type_supported(column.type_()) {
                                errors.push(format!(
                                    "{context}: result column `{}` has type {}; cast it to text",
                                    column.name(),
                                    column.type_()
                                ));
                            }
                        }
                        columns = stmt.columns().iter().map(|c| c.name().to_owned()).collect();
                    }
                    let names: Vec<&str> = stmt.columns().iter().map(|c| c.name()).collect();
                    if let Some(missing) = statements::missing_result_columns(kind, &names) {
                        errors.push(format!("{context}: {missing}"));
                    }
                    statements.insert(kind, Prepared { kind, sql: named.sql, names: named.names });
                }
            }
        }
        let shape = ClaimShape::new(columns).map_err(|e| {
            errors.push(format!("{prefix} sql.claim: {e}"));
        });
        match shape {
            Ok(shape) if errors.is_empty() => Ok(Self { pool, statements, settle: relay.settle, shape }),
            _ => Err(PrepareError::Invalid(errors)),
        }
    }

    async fn execute(&self, kind: StatementKind, bind: impl Fn(&str) -> Param) -> StoreResult<u64> {
        let prepared = &self.statements[&kind];
        let client = self.pool.get().await.map_err(|e| pool_error(kind.name(), e))?;
        let stmt = client.prepare_cached(&prepared.sql).await.map_err(|e| query_error(kind.name(), e))?;
        let values: Vec<Param> = prepared.names.iter().map(|n| bind(n)).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        client.execute(&stmt, &refs).await.map_err(|e| query_error(prepared.kind.name(), e))
    }

    fn parse_row(&self, row: &Row) -> StoreResult<ClaimedRow> {
        let values: Vec<Option<String>> = (0..row.len())
            .map(|i| row.try_get::<_, Option<Cell>>(i).map(|c| c.map(|c| c.0)))
            .collect::<Result<_, _>>()
            .map_err(|e| StoreError::Contract(e.to_string()))?;
        self.shape.row(values)
    }
}

impl OutboxStore for PgOutbox {
    fn columns(&self) -> Arc<[String]> {
        self.shape.columns.clone()
    }

    async fn claim(&self, claimant: &str, batch_size: u32, lease: Duration) -> StoreResult<Vec<ClaimedRow>> {
        let prepared = &self.statements[&StatementKind::Claim];
        let client = self.pool.get().await.map_err(|e| pool_error("claim", e))?;
        let stmt = client.prepare_cached(&prepared.sql).await.map_err(|e| query_error("claim", e))?;
        let bind = bindings::claim(claimant, batch_size, lease, &[]);
        let values: Vec<Param> = prepared.names.iter().map(|name| bind(name)).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        let rows = client.query(&stmt, &refs).await.map_err(|e| query_error("claim", e))?;
        rows.iter().map(|row| self.parse_row(row)).collect()
    }

    async fn settle_delivered(&self, claimant: &str, rows: &[Delivered]) -> StoreResult<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        self.execute(StatementKind::settle(self.settle), bindings::delivered(claimant, rows)).await
    }

    /// In one transaction: if it fails part-way (a dropped connection) nothing is recorded, and
    /// the retry does not find half of the rows settled and count them as fenced.
    async fn settle_failed(&self, claimant: &str, failures: &[Failure]) -> StoreResult<u64> {
        if failures.is_empty() {
            return Ok(0);
        }
        let mut client = self.pool.get().await.map_err(|e| pool_error("record failure", e))?;
        let tx = client.transaction().await.map_err(|e| query_error("record failure", e))?;
        let mut changed = 0;
        for failure in failures {
            let (kind, bind) = bindings::failure(claimant, failure);
            let prepared = &self.statements[&kind];
            let stmt = tx.prepare_cached(&prepared.sql).await.map_err(|e| query_error(kind.name(), e))?;
            let values: Vec<Param> = prepared.names.iter().map(|n| bind(n)).collect();
            let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
            changed += tx.execute(&stmt, &refs).await.map_err(|e| query_error(kind.name(), e))?;
        }
        tx.commit().await.map_err(|e| query_error("record failure", e))?;
        Ok(changed)
    }

    async fn release(&self, claimant: &str, rows: &[RowRef]) -> StoreResult<u64> {
        self.batch_step(StatementKind::Release, claimant, rows, Duration::ZERO).await
    }

    async fn renew(&self, claimant: &str, rows: &[RowRef], lease: Duration) -> StoreResult<u64> {
        self.batch_step(StatementKind::Renew, claimant, rows, lease).await
    }

    async fn purge(&self, age: Duration, batch: u32) -> StoreResult<u64> {
        self.execute(StatementKind::Purge, bindings::purge(age, batch)).await
    }

    async fn delivered_since(&self, age: Duration) -> StoreResult<Option<Vec<DeliveredRow>>> {
        let Some(prepared) = self.statements.get(&StatementKind::DeliveredSince) else { return Ok(None) };
        let client = self.pool.get().await.map_err(|e| pool_error("delivered_since", e))?;
        let stmt = client.prepare_cached(&prepared.sql).await.map_err(|e| query_error("delivered_since", e))?;
        let bind = bindings::delivered_since(age);
        let values: Vec<Param> = prepared.names.iter().map(|n| bind(n)).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        let rows = client.query(&stmt, &refs).await.map_err(|e| query_error("delivered_since", e))?;
        let text = |row: &Row, name: &str| -> StoreResult<String> {
            let cell: Option<Cell> = row.try_get(name).map_err(|e| StoreError::Contract(e.to_string()))?;
            cell.map(|c| c.0).ok_or_else(|| StoreError::Contract(format!("delivered_since: column `{name}` is NULL")))
        };
        let rows = rows
            .iter()
            .map(|r| {
                Ok(DeliveredRow { id: text(r, "id")?, stream: text(r, "stream")?, entry_id: text(r, "entry_id")? })
            })
            .collect::<StoreResult<_>>()?;
        Ok(Some(rows))
    }

    /// In a transaction marked as a re-drive, which the reference schema's settled-row guard
    /// lets through.
    async fn redrive(&self, rows: &[DeliveredRow]) -> StoreResult<u64> {
        let Some(prepared) = self.statements.get(&StatementKind::Redrive) else { return Ok(0) };
        let mut client = self.pool.get().await.map_err(|e| pool_error("redrive", e))?;
        let tx = client.transaction().await.map_err(|e| query_error("redrive", e))?;
        tx.batch_execute("SET LOCAL handoff.redrive = 'on'").await.map_err(|e| query_error("redrive", e))?;
        let stmt = tx.prepare_cached(&prepared.sql).await.map_err(|e| query_error("redrive", e))?;
        let bind = bindings::redrive(rows);
        let values: Vec<Param> = prepared.names.iter().map(|n| bind(n)).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        let moved = tx.execute(&stmt, &refs).await.map_err(|e| query_error("redrive", e))?;
        tx.commit().await.map_err(|e| query_error("redrive", e))?;
        Ok(moved)
    }

    async fn stats(&self) -> StoreResult<Option<OutboxStats>> {
        let Some(prepared) = self.statements.get(&StatementKind::Stats) else {
            return Ok(None);
        };
        let client = self.pool.get().await.map_err(|e| pool_error("stats", e))?;
        let stmt = client.prepare_cached(&prepared.sql).await.map_err(|e| query_error("stats", e))?;
        let row = client.query_one(&stmt, &[]).await.map_err(|e| query_error("stats", e))?;
        let number = |name: &str| -> StoreResult<f64> {
            let cell: Option<Cell> = row.try_get(name).map_err(|e| StoreError::Contract(e.to_string()))?;
            Ok(cell.and_then(|c| c.0.parse().ok()).unwrap_or(0.0))
        };
        Ok(Some(OutboxStats {
            pending: number("pending")? as i64,
            in_flight: number("in_flight")? as i64,
            dead: number("dead")? as i64,
            oldest_pending_age: number("oldest_pending_age_seconds")?,
        }))
    }
}

impl PgOutbox {
    async fn batch_step(
        &self,
        kind: StatementKind,
        claimant: &str,
        rows: &[RowRef],
        lease: Duration,
    ) -> StoreResult<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        self.execute(kind, bindings::held(claimant, rows, lease)).await
    }
}
