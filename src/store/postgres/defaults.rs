//! Default statements for the reference schema (`migrations/postgres`), with `{table}` replaced by
//! the relay's table. Every state change is fenced by claimant + token and by status.

use crate::store::statements::StatementKind;

/// Reclaims at most one lease-expired row and, only when there is none, claims a batch of due
/// rows. Taking expired rows one at a time isolates a row that crashes its claimant: only that
/// row's `expired_claims` grows towards DEAD, not its innocent batch neighbours'. Both arms walk
/// partial indexes that hold only PENDING / IN_FLIGHT rows, never delivered history.
const CLAIM: &str = "\
WITH expired AS (
    SELECT id FROM {table}
    WHERE status = 'IN_FLIGHT' AND lease_expires_at <= now()
    ORDER BY lease_expires_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT id FROM {table}
    WHERE status = 'PENDING' AND next_attempt_at <= now()
      AND NOT EXISTS (SELECT 1 FROM expired)
    ORDER BY next_attempt_at, id
    LIMIT :batch_size
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT id, true AS reclaimed FROM expired
    UNION ALL
    SELECT id, false FROM due
)
UPDATE {table} o
SET status = 'IN_FLIGHT',
    claimed_by = :claimant,
    claim_token = o.claim_token + 1,
    lease_expires_at = now() + :lease_ms::bigint * interval '1 millisecond',
    expired_claims = o.expired_claims + CASE WHEN o.status = 'IN_FLIGHT' THEN 1 ELSE 0 END
FROM picked
WHERE o.id = picked.id
RETURNING o.id, o.claim_token AS token, o.event_id, o.event_type, o.aggregate_type,
          o.aggregate_id, o.payload, o.headers, o.attempts, o.expired_claims,
          (extract(epoch FROM now() - o.created_at) * 1000)::float8 AS age_ms, picked.reclaimed";

const MARK_DELIVERED: &str = "\
UPDATE {table} o
SET status = 'DELIVERED', delivered_at = now(), stream_entry_id = s.entry_id,
    lease_expires_at = NULL, last_error = NULL
FROM unnest(:ids::bigint[], :tokens::bigint[], :entry_ids::text[]) AS s(id, token, entry_id)
WHERE o.id = s.id AND o.claim_token = s.token AND o.claimed_by = :claimant
  AND o.status = 'IN_FLIGHT'";

const DELETE: &str = "\
DELETE FROM {table} o
USING unnest(:ids::bigint[], :tokens::bigint[]) AS s(id, token)
WHERE o.id = s.id AND o.claim_token = s.token AND o.claimed_by = :claimant
  AND o.status = 'IN_FLIGHT'";

const RETRY: &str = "\
UPDATE {table}
SET status = 'PENDING', attempts = attempts + 1, last_error = :error, lease_expires_at = NULL,
    next_attempt_at = now() + :delay_ms::bigint * interval '1 millisecond'
WHERE id = :id::bigint AND claim_token = :token AND claimed_by = :claimant
  AND status = 'IN_FLIGHT'";

const DEAD: &str = "\
UPDATE {table}
SET status = 'DEAD', attempts = attempts + 1, last_error = :error, lease_expires_at = NULL,
    dead_at = now()
WHERE id = :id::bigint AND claim_token = :token AND claimed_by = :claimant
  AND status = 'IN_FLIGHT'";

/// Hands rows back untouched: an outage is not the row's fault, so attempts stay as they were.
const RELEASE: &str = "\
UPDATE {table} o
SET status = 'PENDING', lease_expires_at = NULL
FROM unnest(:ids::bigint[], :tokens::bigint[]) AS s(id, token)
WHERE o.id = s.id AND o.claim_token = s.token AND o.claimed_by = :claimant
  AND o.status = 'IN_FLIGHT'";

const RENEW: &str = "\
UPDATE {table} o
SET lease_expires_at = now() + :lease_ms::bigint * interval '1 millisecond'
FROM unnest(:ids::bigint[], :tokens::bigint[]) AS s(id, token)
WHERE o.id = s.id AND o.claim_token = s.token AND o.claimed_by = :claimant
  AND o.status = 'IN_FLIGHT'";

/// Gauges for the metrics sampler. Each arm reads one partial index (or the rows it covers), so
/// the cost follows the backlog and the DEAD rows, never the delivered history.
const STATS: &str = "\
WITH pending AS (
    SELECT count(*) AS n, min(created_at) AS oldest FROM {table} WHERE status = 'PENDING'
), in_flight AS (
    SELECT count(*) AS n, min(created_at) AS oldest FROM {table} WHERE status = 'IN_FLIGHT'
), dead AS (
    SELECT count(*) AS n FROM {table} WHERE status = 'DEAD'
)
SELECT pending.n AS pending, in_flight.n AS in_flight, dead.n AS dead,
       coalesce(extract(epoch FROM now() - least(pending.oldest, in_flight.oldest)), 0)::float8
           AS oldest_pending_age_seconds
FROM pending, in_flight, dead";

/// The default text of `kind` for `table`.
pub fn default_sql(kind: StatementKind, table: &str) -> String {
    let template = match kind {
        StatementKind::Claim => CLAIM,
        StatementKind::MarkDelivered => MARK_DELIVERED,
        StatementKind::Delete => DELETE,
        StatementKind::Retry => RETRY,
        StatementKind::Dead => DEAD,
        StatementKind::Release => RELEASE,
        StatementKind::Renew => RENEW,
        StatementKind::Stats => STATS,
    };
    template.replace("{table}", table)
}
