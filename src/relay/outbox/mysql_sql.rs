//! Default statements for the MySQL / MariaDB reference schema (`migrations/mysql`).
//!
//! The claim is a script run in one transaction: each statement before the last may return
//! ids; later statements see all ids returned so far as `:ids` (a JSON array); the last
//! statement's result is the claim result. Fencing, as in Postgres, is claimant + token +
//! `lease_expires_at IS NOT NULL` (which holds exactly for IN_FLIGHT rows).

use super::contract::StatementKind;

/// Reclaims at most one lease-expired row and, only when there is none, locks a batch of due
/// rows; then claims them and reads them back. The locking reads see the newest committed row
/// versions and the rows stay locked to the end of the transaction, so the update cannot meet a
/// row in another state; it still takes only claimable rows, and the read-back only what it took,
/// so that no edit of the script can take a row another claim holds or one already settled.
/// The update reaches the rows through their ids by primary key ([`ROWS`] says why it is
/// written that way). `expired_claims` is assigned first, so it reads the old status.
const CLAIM: &str = "\
SELECT id FROM {table}
WHERE status = 'IN_FLIGHT' AND lease_expires_at <= NOW(3)
ORDER BY lease_expires_at LIMIT 1
FOR UPDATE SKIP LOCKED;
SELECT id FROM {table}
WHERE status = 'PENDING' AND next_attempt_at <= NOW(3) AND JSON_LENGTH(:ids) = 0
ORDER BY next_attempt_at, id LIMIT :batch_size
FOR UPDATE SKIP LOCKED;
UPDATE JSON_TABLE(:ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
STRAIGHT_JOIN {table} o FORCE INDEX (PRIMARY) ON o.id = j.id
SET o.expired_claims = o.expired_claims + IF(o.status = 'IN_FLIGHT', 1, 0),
    o.status = 'IN_FLIGHT', o.claimed_by = :claimant, o.claim_token = o.claim_token + 1,
    o.lease_expires_at = NOW(3) + INTERVAL :lease_ms * 1000 MICROSECOND
WHERE o.status = 'PENDING' OR (o.status = 'IN_FLIGHT' AND o.lease_expires_at <= NOW(3));
SELECT id, claim_token AS token, event_id, event_type, aggregate_type, aggregate_id,
       payload, headers, attempts, expired_claims,
       TIMESTAMPDIFF(MICROSECOND, created_at, NOW(3)) / 1000 AS age_ms{created_at}
FROM {table}
WHERE id IN (SELECT j.id FROM JSON_TABLE(:ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j)
  AND status = 'IN_FLIGHT' AND claimed_by = :claimant";

/// The table's rows named by the `:ids` array, with the `:tokens` array zipped on by position:
/// the ids first, each row then fetched by primary key. Left to itself, MariaDB plans a table
/// its statistics call small (a new or emptied outbox, whose statistics lag behind its inserts)
/// as a scan joined to the ids; in an UPDATE that scan locks every row it passes, so a settle
/// waited on rows other claims held, the claims on it, and under two relays settles and lease
/// renewals deadlocked for as long as the table stayed "small" (leases lapsed, rows were
/// reclaimed). `STRAIGHT_JOIN` fixes the order and `FORCE INDEX` the access, whatever the
/// statistics say. (`WHERE id IN (SELECT … FROM JSON_TABLE …)` is no better: an UPDATE does
/// not turn it into a semi-join.)
const ROWS: &str = "\
JSON_TABLE(:ids, '$[*]' COLUMNS (n FOR ORDINALITY, id BIGINT PATH '$')) AS i
STRAIGHT_JOIN {table} o FORCE INDEX (PRIMARY) ON o.id = i.id
JOIN JSON_TABLE(:tokens, '$[*]' COLUMNS (n FOR ORDINALITY, token BIGINT PATH '$')) AS t ON t.n = i.n";

const FENCE: &str = "o.claim_token = t.token AND o.claimed_by = :claimant AND o.lease_expires_at IS NOT NULL";

/// The row's `created_at` as RFC 3339 text (CloudEvents' `time`), for a relay whose entries
/// carry it. The relay's sessions run in UTC (`time_zone = '+00:00'`), the zone a DATETIME
/// outbox is written in (docs/reference/sql-contract.md).
const CREATED_AT: &str = ",\n       DATE_FORMAT(created_at, '%Y-%m-%dT%H:%i:%s.%fZ') AS created_at";

/// The default text of `kind` for `table`.
pub fn default_sql(kind: StatementKind, table: &str) -> String {
    relay_sql(kind, table, false)
}

/// [`default_sql`], the claim also returning `created_at` when `created_at` is set.
pub(crate) fn relay_sql(kind: StatementKind, table: &str, created_at: bool) -> String {
    let text = match kind {
        StatementKind::Claim => CLAIM.to_owned(),
        StatementKind::MarkDelivered => format!(
            "UPDATE {ROWS}
JOIN JSON_TABLE(:entry_ids, '$[*]' COLUMNS (n FOR ORDINALITY, entry_id VARCHAR(64) PATH '$')) AS e ON e.n = i.n
JOIN JSON_TABLE(:streams, '$[*]' COLUMNS (n FOR ORDINALITY, stream VARCHAR(255) PATH '$')) AS st ON st.n = i.n
SET o.status = 'DELIVERED', o.delivered_at = NOW(3), o.stream_entry_id = e.entry_id, o.stream_key = st.stream,
    o.lease_expires_at = NULL, o.last_error = NULL
WHERE {FENCE}"
        ),
        StatementKind::DeliveredSince => "\
SELECT id, stream_key AS stream, stream_entry_id AS entry_id, event_id FROM {table}
WHERE status = 'DELIVERED' AND delivered_at > NOW(3) - INTERVAL :age_ms * 1000 MICROSECOND
  AND stream_key IS NOT NULL AND stream_entry_id IS NOT NULL
ORDER BY delivered_at"
            .to_owned(),
        StatementKind::Redrive => "\
UPDATE JSON_TABLE(:ids, '$[*]' COLUMNS (n FOR ORDINALITY, id BIGINT PATH '$')) AS i
STRAIGHT_JOIN {table} o FORCE INDEX (PRIMARY) ON o.id = i.id
JOIN JSON_TABLE(:entry_ids, '$[*]' COLUMNS (n FOR ORDINALITY, entry_id VARCHAR(64) PATH '$')) AS e ON e.n = i.n
SET o.status = 'PENDING', o.next_attempt_at = NOW(3), o.lease_expires_at = NULL,
    o.redrives = o.redrives + 1, o.redriven_at = NOW(3)
WHERE o.status = 'DELIVERED' AND o.stream_entry_id = e.entry_id"
            .to_owned(),
        StatementKind::Delete => format!("DELETE o FROM {ROWS} WHERE {FENCE}"),
        StatementKind::Release => {
            format!(
                "UPDATE {ROWS} SET o.status = 'PENDING', o.lease_expires_at = NULL,
    o.next_attempt_at = IF(:delay_ms > 0, NOW(3) + INTERVAL :delay_ms * 1000 MICROSECOND, o.next_attempt_at)
WHERE {FENCE}"
            )
        }
        StatementKind::Renew => format!(
            "UPDATE {ROWS} SET o.lease_expires_at = NOW(3) + INTERVAL :lease_ms * 1000 MICROSECOND WHERE {FENCE}"
        ),
        StatementKind::Retry => "\
UPDATE {table}
SET status = 'PENDING', attempts = attempts + 1, last_error = :error, lease_expires_at = NULL,
    next_attempt_at = NOW(3) + INTERVAL :delay_ms * 1000 MICROSECOND
WHERE id = :id AND claim_token = :token AND claimed_by = :claimant AND lease_expires_at IS NOT NULL"
            .to_owned(),
        StatementKind::Dead => "\
UPDATE {table}
SET status = 'DEAD', attempts = attempts + 1, last_error = :error, lease_expires_at = NULL, dead_at = NOW(3)
WHERE id = :id AND claim_token = :token AND claimed_by = :claimant AND lease_expires_at IS NOT NULL"
            .to_owned(),
        StatementKind::Stats => "\
SELECT (SELECT COUNT(*) FROM {table} WHERE status = 'PENDING') AS pending,
       (SELECT COUNT(*) FROM {table} WHERE status = 'IN_FLIGHT') AS in_flight,
       (SELECT COUNT(*) FROM {table} WHERE status = 'DEAD') AS dead,
       COALESCE(TIMESTAMPDIFF(MICROSECOND,
           LEAST(COALESCE((SELECT MIN(created_at) FROM {table} WHERE status = 'PENDING'), NOW(3)),
                 COALESCE((SELECT MIN(created_at) FROM {table} WHERE status = 'IN_FLIGHT'), NOW(3))),
           NOW(3)) / 1000000, 0) AS oldest_pending_age_seconds"
            .to_owned(),
        StatementKind::Purge => "\
DELETE FROM {table}
WHERE status = 'DELIVERED' AND delivered_at < NOW(3) - INTERVAL :age_ms * 1000 MICROSECOND
ORDER BY delivered_at LIMIT :batch_size"
            .to_owned(),
    };
    text.replace("{table}", table).replace("{created_at}", if created_at { CREATED_AT } else { "" })
}
