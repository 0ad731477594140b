//! The claim statement's result-column contract, shared by the dialects: where the required
//! columns are, and how a row of text values becomes a [`ClaimedRow`].

use std::sync::Arc;
use std::time::Duration;

use super::{ClaimedRow, StoreError, StoreResult};
use crate::config::statements::{CLAIM_COLUMNS, ORDER_KEY_COLUMN, RECLAIMED_COLUMN};

/// Positions of the contract columns in a claim result.
#[derive(Debug, Clone)]
pub struct ClaimShape {
    pub columns: Arc<[String]>,
    id: usize,
    token: usize,
    event_id: usize,
    attempts: usize,
    expired_claims: usize,
    age_ms: usize,
    reclaimed: Option<usize>,
    order_key: Option<usize>,
}

impl ClaimShape {
    /// Finds the contract columns among `columns`; names the missing ones.
    pub fn new(columns: Vec<String>) -> Result<Self, String> {
        let missing: Vec<&str> = CLAIM_COLUMNS.iter().copied().filter(|c| !columns.iter().any(|n| n == c)).collect();
        if !missing.is_empty() {
            return Err(format!("result lacks required column(s): {}", missing.join(", ")));
        }
        let at = |name: &str| columns.iter().position(|c| c == name);
        Ok(Self {
            id: at("id").unwrap_or_default(),
            token: at("token").unwrap_or_default(),
            event_id: at("event_id").unwrap_or_default(),
            attempts: at("attempts").unwrap_or_default(),
            expired_claims: at("expired_claims").unwrap_or_default(),
            age_ms: at("age_ms").unwrap_or_default(),
            reclaimed: at(RECLAIMED_COLUMN),
            order_key: at(ORDER_KEY_COLUMN),
            columns: columns.into(),
        })
    }

    /// One claimed row from its column values read as text (NULL as `None`).
    pub fn row(&self, values: Vec<Option<String>>) -> StoreResult<ClaimedRow> {
        let text = |i: usize| {
            values
                .get(i)
                .and_then(Option::as_deref)
                .ok_or_else(|| StoreError::Contract(format!("column `{}` is NULL", self.columns[i])))
        };
        let number = |i: usize| -> StoreResult<f64> {
            text(i)?
                .parse::<f64>()
                .map_err(|_| StoreError::Contract(format!("column `{}` is not a number", self.columns[i])))
        };
        let flag = self.reclaimed.and_then(|i| values[i].as_deref());
        Ok(ClaimedRow {
            id: text(self.id)?.to_owned(),
            token: number(self.token)? as i64,
            event_id: text(self.event_id)?.to_owned(),
            attempts: number(self.attempts)?.max(0.0) as u32,
            expired_claims: number(self.expired_claims)?.max(0.0) as u32,
            age: Duration::from_secs_f64(number(self.age_ms)?.max(0.0) / 1000.0),
            reclaimed: flag.is_some_and(|v| matches!(v, "true" | "t" | "1")),
            order_key: self.order_key.and_then(|i| values[i].clone()),
            values,
        })
    }
}
