//! A pooled connection inside a transaction, for the seams whose transactions span several
//! calls (a takeover, a locked batch). Committed or rolled back, the connection goes back to the
//! pool; dropped in between — a cancelled future, an early return — it is closed instead, and
//! the server rolls the transaction back: nothing half-done is ever committed, and a connection
//! still inside a transaction is never handed to someone else.

use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use super::errors::{pool_error, query_error};
use crate::store::error::{StoreError, StoreResult};

pub(crate) struct OpenTx {
    /// `None` once the transaction is over.
    client: Option<Object>,
    /// Whether `BEGIN` has been sent (or handed to the caller to send): until then there is no
    /// transaction to commit or roll back.
    begun: bool,
}

impl OpenTx {
    /// Takes a connection and runs `begin` on it (`BEGIN`, and any `SET LOCAL` that goes with it).
    pub(crate) async fn begin(pool: &Pool, label: &'static str, begin: &str) -> StoreResult<Self> {
        let client = pool.get().await.map_err(|e| pool_error(label, e))?;
        // From here on an early return drops the transaction, which closes the connection.
        let tx = Self { client: Some(client), begun: true };
        tx.client()?.batch_execute(begin).await.map_err(|e| query_error(label, e))?;
        Ok(tx)
    }

    /// A connection taken for a transaction whose `BEGIN` the caller sends itself (pipelined
    /// with its first statement).
    pub(crate) async fn take(pool: &Pool, label: &'static str) -> StoreResult<Self> {
        Ok(Self { client: Some(pool.get().await.map_err(|e| pool_error(label, e))?), begun: true })
    }

    /// Takes a connection for a locked batch (`claim = "locked"`) and prepares its `lock`
    /// statement on it; [`OpenTx::begin_and_lock`] then opens the transaction.
    pub(crate) async fn for_lock(pool: &Pool, lock: &str) -> StoreResult<(Self, Statement)> {
        // From here on an early return drops the transaction, which closes the connection in it.
        let tx = Self::take(pool, "lock").await?;
        let stmt = tx.client()?.prepare_cached(lock).await.map_err(|e| query_error("lock", e))?;
        Ok((tx, stmt))
    }

    /// Opens the locked batch's transaction with `lock` as its first statement: `BEGIN`, the
    /// session's idle limit (`idle_timeout`: a process that stalls in the transaction loses its
    /// locks) and the lock are sent together, one round trip. Should `BEGIN` fail, the lock's
    /// rows are not used.
    pub(crate) async fn begin_and_lock(
        &self,
        idle_timeout: Duration,
        lock: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Vec<Row>> {
        let client = self.client()?;
        let begin =
            format!("BEGIN; SET LOCAL idle_in_transaction_session_timeout = {}", idle_timeout.as_millis().max(1));
        let (begun, rows) = futures_util::future::join(client.batch_execute(&begin), client.query(lock, params)).await;
        begun.map_err(|e| query_error("lock", e))?;
        rows.map_err(|e| query_error("lock", e))
    }

    /// A connection taken for a transaction of several statement paths, whichever runs first
    /// sending `BEGIN` ahead of it ([`OpenTx::client_to_begin`], [`with_begin`]): one round trip
    /// fewer than [`OpenTx::begin`].
    pub(crate) async fn lazy(pool: &Pool, label: &'static str) -> StoreResult<Self> {
        Ok(Self { client: Some(pool.get().await.map_err(|e| pool_error(label, e))?), begun: false })
    }

    /// The connection, and whether the caller is to send `BEGIN` ahead of its statement (the
    /// first statement of a [`OpenTx::lazy`] transaction). From here on the transaction counts
    /// as begun: a failed first statement leaves it to be rolled back like any other.
    pub(crate) fn client_to_begin(&mut self) -> StoreResult<(&Object, bool)> {
        let begin = !std::mem::replace(&mut self.begun, true);
        Ok((self.client()?, begin))
    }

    /// The connection, while the transaction lasts.
    pub(crate) fn client(&self) -> StoreResult<&Object> {
        self.client.as_ref().ok_or_else(|| StoreError::Contract("the transaction is already over".into()))
    }

    /// Commits; the connection goes back to the pool (or is closed with `close`: a connection
    /// that carried a large batch keeps buffers of that size for its whole life).
    pub(crate) async fn commit(mut self, label: &'static str, close: bool) -> StoreResult<()> {
        if !self.begun {
            // Nothing was sent: there is nothing to commit.
            self.client.take();
            return Ok(());
        }
        self.client()?.batch_execute("COMMIT").await.map_err(|e| query_error(label, e))?;
        let client = self.client.take();
        if close {
            drop(client.map(Object::take));
        }
        Ok(())
    }

    /// Rolls back; the connection goes back to the pool if that worked, and is closed if not.
    pub(crate) async fn roll_back(mut self) {
        if !self.begun {
            self.client.take();
            return;
        }
        if let Ok(client) = self.client()
            && client.batch_execute("ROLLBACK").await.is_ok()
        {
            self.client.take();
        }
    }

    /// The transaction is over (committed or rolled back by a statement the caller sent): the
    /// connection is clean and goes back to the pool.
    pub(crate) fn finished(mut self) {
        self.client.take();
    }
}

/// `statement`'s output, with `BEGIN` sent ahead of it in the same round trip when `begin` (from
/// [`OpenTx::client_to_begin`]): `join` polls `BEGIN` first, which queues it on the connection
/// before anything `statement` sends, so the statement runs inside the transaction. Should
/// `BEGIN` fail, the statement's output is not used.
pub(crate) async fn with_begin<R>(
    client: &Object,
    begin: bool,
    label: &'static str,
    statement: impl Future<Output = R>,
) -> StoreResult<R> {
    if !begin {
        return Ok(statement.await);
    }
    let (begun, output) = futures_util::future::join(client.batch_execute("BEGIN"), statement).await;
    begun.map_err(|e| query_error(label, e))?;
    Ok(output)
}

impl Drop for OpenTx {
    fn drop(&mut self) {
        if let Some(client) = self.client.take()
            && self.begun
        {
            // Still inside the transaction: close the connection instead of pooling it; the
            // server rolls the transaction back. (One never begun goes back to the pool.)
            drop(Object::take(client));
        }
    }
}
