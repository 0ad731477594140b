//! The claim statement's result-column contract, shared by the dialects: where the required
//! columns are, and how a row of text values becomes a [`ClaimedRow`].

use std::sync::Arc;
use std::time::Duration;

use super::contract::{CLAIM_COLUMNS, ORDER_KEY_COLUMN, RECLAIMED_COLUMN};
use super::rows::ClaimedRow;
use crate::store::columns::MissingColumns;
use crate::store::error::{StoreError, StoreResult};

/// Positions of the contract columns in a claim result.
#[derive(Debug, Clone)]
pub(crate) struct ClaimShape {
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
    pub(crate) fn new(columns: Vec<String>) -> Result<Self, MissingColumns> {
        if let Some(missing) = MissingColumns::of(CLAIM_COLUMNS, columns.iter().map(String::as_str)) {
            return Err(missing);
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

    /// One claimed row from its column values read as text (NULL as `None`); `unreadable`
    /// names the columns whose value could not be read at all (bytes that are not text).
    ///
    /// Only the row's key — `id` and `token`, what every settle must name — has to be readable
    /// for the claim to succeed; without it the statement breaks the contract and no row of the
    /// batch can be settled. Any other value the relay cannot use (an `age_ms` that is NULL or
    /// not finite because `created_at` is `infinity` or a zero date, a `created_at` outside
    /// years 1–9999, an `attempts` that is not a number) is that row's own data's: the row comes
    /// back with [`ClaimedRow::unreadable`] naming the column, and the relay makes it DEAD while its
    /// batch goes on (invariant 13).
    pub(crate) fn row(&self, values: Vec<Option<String>>, unreadable: &[usize]) -> StoreResult<ClaimedRow> {
        let name = |i: usize| self.columns[i].as_str();
        let key = |i: usize| -> StoreResult<&str> {
            if unreadable.contains(&i) {
                return Err(StoreError::Contract(format!("column `{}` is not text", name(i))));
            }
            values
                .get(i)
                .and_then(Option::as_deref)
                .ok_or_else(|| StoreError::Contract(format!("column `{}` is NULL", name(i))))
        };
        let id = key(self.id)?.to_owned();
        let token = key(self.token)?;
        let token = parse_number(token).filter(|t| t.fract() == 0.0 && t.abs() < 2f64.powi(63)).ok_or_else(|| {
            StoreError::Contract(format!("column `{}` is `{token}`, not an integer", name(self.token)))
        })? as i64;
        let mut problems: Vec<String> =
            unreadable.iter().map(|i| format!("column `{}` is not text", name(*i))).collect();
        let mut text = |i: usize| -> Option<&str> {
            if unreadable.contains(&i) {
                return None;
            }
            let value = values.get(i).and_then(Option::as_deref);
            if value.is_none() {
                problems.push(format!("column `{}` is NULL", name(i)));
            }
            value
        };
        let event_id = text(self.event_id).unwrap_or_default().to_owned();
        let attempts = text(self.attempts).map(|v| (v, parse_count(v)));
        let expired_claims = text(self.expired_claims).map(|v| (v, parse_count(v)));
        let age_ms = text(self.age_ms).map(|v| (v, parse_number(v)));
        let mut count = |column: usize, value: Option<(&str, Option<u32>)>| match value {
            Some((_, Some(n))) => n,
            Some((v, None)) => {
                problems.push(format!("column `{}` is `{}`, not a count", name(column), excerpt(v)));
                0
            }
            None => 0,
        };
        let attempts = count(self.attempts, attempts);
        let expired_claims = count(self.expired_claims, expired_claims);
        let age = match age_ms {
            Some((v, Some(ms))) => match age_of(ms) {
                Ok(age) => age,
                Err(why) => {
                    problems.push(format!("column `{}` is `{}`: {why}", name(self.age_ms), excerpt(v)));
                    Duration::ZERO
                }
            },
            Some((v, None)) => {
                problems.push(format!("column `{}` is `{}`, not a number", name(self.age_ms), excerpt(v)));
                Duration::ZERO
            }
            None => Duration::ZERO,
        };
        let flag = self.reclaimed.and_then(|i| values[i].as_deref());
        let unreadable = (!problems.is_empty()).then(|| problems.join("; "));
        Ok(ClaimedRow {
            id,
            token,
            event_id,
            attempts,
            expired_claims,
            age,
            reclaimed: flag.is_some_and(|v| matches!(v, "true" | "t" | "1")),
            order_key: self.order_key.and_then(|i| values[i].clone()),
            unreadable,
            values,
        })
    }
}

/// A number as a database writes it as text (`42`, `1.5`, `Infinity`, `NaN`).
fn parse_number(text: &str) -> Option<f64> {
    match text.trim() {
        "Infinity" | "inf" => Some(f64::INFINITY),
        "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
        other => other.parse::<f64>().ok(),
    }
}

/// A non-negative count; a negative one reads as 0 (an edited row), a fraction or a word not.
fn parse_count(text: &str) -> Option<u32> {
    let n = parse_number(text).filter(|n| n.is_finite() && n.fract() == 0.0)?;
    Some(n.clamp(0.0, f64::from(u32::MAX)) as u32)
}

/// Milliseconds since the epoch of 0001-01-01 and of the end of 9999-12-31: the years every SQL
/// dialect and ISO 8601 share. A `created_at` outside them is not a time the relay can reason
/// about (and MariaDB could not even store it).
const EARLIEST_MS: f64 = -62_135_596_800_000.0;
const LATEST_MS: f64 = 253_402_300_799_999.0;

/// A row's age from its `age_ms`: it must be finite and put `created_at` within years 1–9999
/// (by this process's clock: a plausibility check, not a decision about leases). A negative
/// age (a clock ahead of the database's) counts as zero.
fn age_of(ms: f64) -> Result<Duration, &'static str> {
    if !ms.is_finite() {
        return Err("not a finite age (is created_at infinity?)");
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let created = now.as_millis() as f64 - ms;
    if !(EARLIEST_MS..=LATEST_MS).contains(&created) {
        return Err("created_at lies outside years 1 to 9999");
    }
    Ok(Duration::try_from_secs_f64(ms.max(0.0) / 1000.0).unwrap_or(Duration::ZERO))
}

/// The start of a value, for an error message (a long value is the row's data, not the message).
fn excerpt(value: &str) -> String {
    match value.char_indices().nth(40) {
        Some((cut, _)) => format!("{}…", &value[..cut]),
        None => value.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> ClaimShape {
        let columns = ["id", "token", "event_id", "attempts", "expired_claims", "age_ms", "payload"];
        ClaimShape::new(columns.iter().map(|c| c.to_string()).collect()).unwrap()
    }

    fn row(age_ms: Option<&str>, attempts: &str) -> Vec<Option<String>> {
        [Some("7"), Some("3"), Some("e-1"), Some(attempts), Some("0"), age_ms, Some("{}")]
            .iter()
            .map(|v| v.map(str::to_owned))
            .collect()
    }

    #[test]
    fn an_ordinary_row_has_no_fault() {
        let claimed = shape().row(row(Some("1500"), "2"), &[]).unwrap();
        assert_eq!((claimed.id.as_str(), claimed.token, claimed.attempts), ("7", 3, 2));
        assert_eq!(claimed.age, Duration::from_millis(1500));
        assert_eq!(claimed.unreadable, None);
        assert_eq!(shape().row(row(Some("-20"), "0"), &[]).unwrap().age, Duration::ZERO, "clock skew reads as 0");
    }

    #[test]
    fn odd_values_fault_the_row_and_name_the_column_without_failing_the_claim() {
        for (age, why) in [
            (Some("Infinity"), "not a finite age"),
            (Some("-Infinity"), "not a finite age"),
            (Some("NaN"), "not a finite age"),
            // created_at in year 10000 (Postgres stores it; no SQL date type shares it).
            (Some("-251606066518073.56"), "outside years 1 to 9999"),
            // A zero date on MariaDB: TIMESTAMPDIFF gives NULL.
            (None, "is NULL"),
            (Some("soon"), "not a number"),
        ] {
            let claimed = shape().row(row(age, "0"), &[]).unwrap();
            let unreadable = claimed.unreadable.unwrap_or_default();
            assert!(unreadable.contains("`age_ms`") && unreadable.contains(why), "{age:?}: {unreadable}");
            assert_eq!(claimed.age, Duration::ZERO);
        }
        let unreadable = shape().row(row(Some("1"), "many"), &[]).unwrap().unreadable.unwrap();
        assert!(unreadable.contains("`attempts`"), "{unreadable}");
        let unreadable = shape().row(row(Some("1"), "0"), &[6]).unwrap().unreadable.unwrap();
        assert_eq!(unreadable, "column `payload` is not text");
    }

    #[test]
    fn only_an_unreadable_key_fails_the_claim() {
        let mut values = row(Some("1"), "0");
        values[1] = None;
        assert!(matches!(shape().row(values, &[]), Err(StoreError::Contract(_))));
        assert!(matches!(shape().row(row(Some("1"), "0"), &[0]), Err(StoreError::Contract(_))));
        let mut values = row(Some("1"), "0");
        values[1] = Some("1.5".into());
        assert!(matches!(shape().row(values, &[]), Err(StoreError::Contract(_))));
    }
}
