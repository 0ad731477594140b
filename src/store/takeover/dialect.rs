//! The takeover on the configured database: one type for the bridge, `check` and the operator
//! commands, whichever dialect the URL names.

use std::collections::HashMap;
use std::time::Duration;

use super::mysql::MyTakeover;
use super::postgres::PgTakeover;
use super::seam::{DeliveryCounts, Effects, InboxEvent, PoisonRecord, Taken, TakenOver, TakeoverStore};
use crate::config::BridgeConfig;
use crate::store::database::Database;
use crate::store::error::{PrepareError, StatementError, StoreResult};

pub enum Takeover {
    Postgres(PgTakeover),
    Mysql(MyTakeover),
}

/// `$body` with `$store` bound to the dialect's takeover.
macro_rules! each {
    ($self:expr, $store:ident => $body:expr) => {
        match $self {
            Takeover::Postgres($store) => $body,
            Takeover::Mysql($store) => $body,
        }
    };
}

impl Takeover {
    /// The bridge's statements: its `[bridge.sql]` overrides, the reference schema's otherwise.
    pub fn new(db: &Database, bridge: &BridgeConfig) -> Result<Self, StatementError> {
        Ok(match db {
            Database::Postgres(pool) => Takeover::Postgres(PgTakeover::new(pool.clone(), bridge)?),
            Database::Mysql(pool) => Takeover::Mysql(MyTakeover::new(pool.clone(), bridge)?),
        })
    }

    /// Checks the tables' columns and prepares the takeover statements.
    pub async fn check(&self) -> Result<(), PrepareError> {
        each!(self, s => s.check().await)
    }
}

impl TakeoverStore for Takeover {
    async fn take_over(
        &self,
        consumer: &str,
        events: &[InboxEvent],
        poison: &[PoisonRecord],
        counted: bool,
    ) -> StoreResult<Vec<TakenOver>> {
        each!(self, s => s.take_over(consumer, events, poison, counted).await)
    }

    async fn take_over_applying(
        &self,
        consumer: &str,
        events: &[InboxEvent],
        effects: &Effects<'_>,
        poison: &[PoisonRecord],
        counted: bool,
    ) -> StoreResult<Taken> {
        each!(self, s => s.take_over_applying(consumer, events, effects, poison, counted).await)
    }
}

impl DeliveryCounts for Takeover {
    async fn count_deliveries(
        &self,
        consumer: &str,
        stream: &str,
        ids: &[String],
    ) -> StoreResult<HashMap<String, u32>> {
        each!(self, s => s.count_deliveries(consumer, stream, ids).await)
    }

    async fn deliveries(&self, consumer: &str, stream: &str, ids: &[String]) -> StoreResult<HashMap<String, u32>> {
        each!(self, s => s.deliveries(consumer, stream, ids).await)
    }

    async fn forget_deliveries(&self, consumer: &str, age: Duration) -> StoreResult<u64> {
        each!(self, s => s.forget_deliveries(consumer, age).await)
    }

    async fn ping(&self) -> StoreResult<()> {
        each!(self, s => s.ping().await)
    }
}
