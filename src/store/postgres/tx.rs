//! A pooled connection inside a transaction, for the seams whose transactions span several
//! calls (a takeover, a locked batch). Committed or rolled back, the connection goes back to the
//! pool; dropped in between — a cancelled future, an early return — it is closed instead, and
//! the server rolls the transaction back: nothing half-done is ever committed, and a connection
//! still inside a transaction is never handed to someone else.

use deadpool_postgres::{Object, Pool};

use super::errors::{pool_error, query_error};
use crate::store::error::{StoreError, StoreResult};

pub struct OpenTx {
    /// `None` once the transaction is over.
    client: Option<Object>,
}

impl OpenTx {
    /// Takes a connection and runs `begin` on it (`BEGIN`, and any `SET LOCAL` that goes with it).
    pub async fn begin(pool: &Pool, label: &'static str, begin: &str) -> StoreResult<Self> {
        let client = pool.get().await.map_err(|e| pool_error(label, e))?;
        // From here on an early return drops the transaction, which closes the connection.
        let tx = Self { client: Some(client) };
        tx.client()?.batch_execute(begin).await.map_err(|e| query_error(label, e))?;
        Ok(tx)
    }

    /// A connection taken for a transaction whose `BEGIN` the caller sends itself (pipelined
    /// with its first statement).
    pub async fn take(pool: &Pool, label: &'static str) -> StoreResult<Self> {
        Ok(Self { client: Some(pool.get().await.map_err(|e| pool_error(label, e))?) })
    }

    /// The connection, while the transaction lasts.
    pub fn client(&self) -> StoreResult<&Object> {
        self.client.as_ref().ok_or_else(|| StoreError::Contract("the transaction is already over".into()))
    }

    /// Commits; the connection goes back to the pool (or is closed with `close`: a connection
    /// that carried a large batch keeps buffers of that size for its whole life).
    pub async fn commit(mut self, label: &'static str, close: bool) -> StoreResult<()> {
        self.client()?.batch_execute("COMMIT").await.map_err(|e| query_error(label, e))?;
        let client = self.client.take();
        if close {
            drop(client.map(Object::take));
        }
        Ok(())
    }

    /// Rolls back; the connection goes back to the pool if that worked, and is closed if not.
    pub async fn roll_back(mut self) {
        if let Ok(client) = self.client()
            && client.batch_execute("ROLLBACK").await.is_ok()
        {
            self.client.take();
        }
    }

    /// The transaction is over (committed or rolled back by a statement the caller sent): the
    /// connection is clean and goes back to the pool.
    pub fn finished(mut self) {
        self.client.take();
    }
}

impl Drop for OpenTx {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            // Still inside the transaction: close the connection instead of pooling it; the
            // server rolls the transaction back.
            drop(Object::take(client));
        }
    }
}
