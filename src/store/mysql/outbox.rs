//! The relay's statements on a MySQL / MariaDB outbox.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use mysql_async::Row;
use mysql_async::prelude::Queryable;

use super::Pool;

use super::values::{Param, bind, row_texts};
use super::{defaults, error};
use crate::config::statements::{self, StatementKind};
use crate::config::{RelayConfig, SettleMode};
use crate::sql::params::{self, NamedSql, Placeholder};
use crate::store::bindings;
use crate::store::claim::ClaimShape;
use crate::store::{
    ClaimedRow, Delivered, DeliveredRow, Failure, OutboxStats, OutboxStore, PrepareError, RowRef, StoreError,
    StoreResult,
};

pub struct MyOutbox {
    pool: Pool,
    /// The claim script's statements, in order.
    claim: Vec<NamedSql>,
    statements: HashMap<StatementKind, NamedSql>,
    settle: SettleMode,
    shape: ClaimShape,
}

impl MyOutbox {
    /// Prepares every statement (each statement of the claim script) and checks the claim's
    /// and the stats' result columns; returns every problem found.
    pub async fn prepare(pool: Pool, relay: &RelayConfig) -> Result<Self, PrepareError> {
        let prefix = format!("relay `{}`", relay.name);
        let mut conn = pool
            .get_conn()
            .await
            .map_err(|e| PrepareError::Unreachable(format!("{prefix}: cannot connect to the database: {e}")))?;
        let mut errors = Vec::new();
        let mut statements = HashMap::new();
        let mut claim = Vec::new();
        let mut columns = Vec::new();
        for kind in StatementKind::ALL {
            let needed = crate::config::statements::needed(kind, relay);
            if !needed {
                continue;
            }
            let context = format!("{prefix} sql.{}", kind.name());
            let sql =
                relay.sql.get(kind).map(str::to_owned).unwrap_or_else(|| defaults::default_sql(kind, &relay.table));
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
                    Err(e) => errors.push(super::prepare_refusal(&context, e)?),
                    Ok(stmt) => {
                        let names: Vec<String> = stmt.columns().iter().map(|c| c.name_str().into_owned()).collect();
                        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                        if let Some(missing) = statements::missing_result_columns(kind, &refs) {
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
            Ok(shape) if errors.is_empty() => Ok(Self { pool, claim, statements, settle: relay.settle, shape }),
            _ => Err(PrepareError::Invalid(errors)),
        }
    }

    async fn execute(&self, kind: StatementKind, value: impl Fn(&str) -> Param) -> StoreResult<u64> {
        let named = &self.statements[&kind];
        let mut conn = self.pool.get_conn().await.map_err(|e| error(kind.name(), e))?;
        conn.exec_drop(named.sql.as_str(), bind(named, value)).await.map_err(|e| error(kind.name(), e))?;
        Ok(conn.affected_rows())
    }

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

impl OutboxStore for MyOutbox {
    fn columns(&self) -> Arc<[String]> {
        self.shape.columns.clone()
    }

    async fn claim(&self, claimant: &str, batch_size: u32, lease: Duration) -> StoreResult<Vec<ClaimedRow>> {
        let mut tx = self.pool.start_transaction(super::claim_tx()).await.map_err(|e| error("claim", e))?;
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
        result.iter().map(|row| self.shape.row(row_texts(row))).collect()
    }

    async fn settle_delivered(&self, claimant: &str, rows: &[Delivered]) -> StoreResult<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        self.execute(StatementKind::settle(self.settle), bindings::delivered(claimant, rows)).await
    }

    /// In one transaction: if it fails part-way (a deadlock, a dropped connection) nothing is
    /// recorded, and the retry does not find half of the rows settled and count them as fenced.
    async fn settle_failed(&self, claimant: &str, failures: &[Failure]) -> StoreResult<u64> {
        if failures.is_empty() {
            return Ok(0);
        }
        let fail = |e| error("record failure", e);
        let mut tx = self.pool.start_transaction(mysql_async::TxOpts::default()).await.map_err(fail)?;
        let mut changed = 0;
        for failure in failures {
            let (kind, value) = bindings::failure(claimant, failure);
            let named = &self.statements[&kind];
            tx.exec_drop(named.sql.as_str(), bind(named, value)).await.map_err(|e| error(kind.name(), e))?;
            changed += tx.affected_rows();
        }
        tx.commit().await.map_err(fail)?;
        Ok(changed)
    }

    async fn release(&self, claimant: &str, rows: &[RowRef]) -> StoreResult<u64> {
        self.batch_step(StatementKind::Release, claimant, rows, Duration::ZERO).await
    }

    async fn renew(&self, claimant: &str, rows: &[RowRef], lease: Duration) -> StoreResult<u64> {
        self.batch_step(StatementKind::Renew, claimant, rows, lease).await
    }

    async fn stats(&self) -> StoreResult<Option<OutboxStats>> {
        let Some(named) = self.statements.get(&StatementKind::Stats) else { return Ok(None) };
        let mut conn = self.pool.get_conn().await.map_err(|e| error("stats", e))?;
        let row: Option<Row> = conn.exec_first(named.sql.as_str(), ()).await.map_err(|e| error("stats", e))?;
        let row = row.ok_or_else(|| StoreError::Contract("stats returned no row".into()))?;
        let columns = super::values::row_columns(&row);
        let texts = row_texts(&row);
        let number = |name: &str| -> f64 {
            columns
                .iter()
                .position(|c| c == name)
                .and_then(|i| texts[i].as_deref())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0)
        };
        Ok(Some(OutboxStats {
            pending: number("pending") as i64,
            in_flight: number("in_flight") as i64,
            dead: number("dead") as i64,
            oldest_pending_age: number("oldest_pending_age_seconds"),
        }))
    }

    async fn delivered_since(&self, age: Duration) -> StoreResult<Option<Vec<DeliveredRow>>> {
        let Some(named) = self.statements.get(&StatementKind::DeliveredSince) else { return Ok(None) };
        let mut conn = self.pool.get_conn().await.map_err(|e| error("delivered_since", e))?;
        let rows: Vec<Row> = conn
            .exec(named.sql.as_str(), bind(named, bindings::delivered_since(age)))
            .await
            .map_err(|e| error("delivered_since", e))?;
        let rows = rows
            .iter()
            .map(|row| {
                let columns = super::values::row_columns(row);
                let texts = row_texts(row);
                let text = |name: &str| -> StoreResult<String> {
                    columns.iter().position(|c| c == name).and_then(|i| texts[i].clone()).ok_or_else(|| {
                        StoreError::Contract(format!("delivered_since: column `{name}` is missing or NULL"))
                    })
                };
                Ok(DeliveredRow { id: text("id")?, stream: text("stream")?, entry_id: text("entry_id")? })
            })
            .collect::<StoreResult<_>>()?;
        Ok(Some(rows))
    }

    async fn redrive(&self, rows: &[DeliveredRow]) -> StoreResult<u64> {
        if !self.statements.contains_key(&StatementKind::Redrive) || rows.is_empty() {
            return Ok(0);
        }
        self.execute(StatementKind::Redrive, bindings::redrive(rows)).await
    }

    async fn purge(&self, age: Duration, batch: u32) -> StoreResult<u64> {
        self.execute(StatementKind::Purge, bindings::purge(age, batch)).await
    }
}
