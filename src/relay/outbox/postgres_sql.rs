//! Default statements for the reference schema (`migrations/postgres`), with `{table}` replaced by
//! the relay's table. Every state change is fenced by claimant + token, and by
//! `lease_expires_at IS NOT NULL`, which in this schema holds exactly for IN_FLIGHT rows. The
//! settles say that rather than `status = 'IN_FLIGHT'` on purpose: that predicate makes the
//! planner scan the whole IN_FLIGHT partial index — every dead entry settled rows left in it
//! since the last vacuum — instead of probing the primary key once per row (measured: settle
//! times growing from 8 ms to 150 ms per 500 rows within seconds under load).

use super::contract::StatementKind;
use crate::relay::config::OnFailure;

/// The end of every claim: the rows in `picked` become IN_FLIGHT under a fresh token and a lease
/// from the database clock (a lease-expired row counts one more expired claim), and come back
/// with the claim's result columns. `age_ms` subtracts epochs rather than timestamps: a
/// `created_at` of `infinity` then gives an infinite age for that row (which the relay makes
/// DEAD) instead of failing the whole statement with "cannot subtract infinite timestamps". A row is taken only if it is still in the state the claim
/// saw (`picked.status`, `picked.claim_token`): when the update waits for another transaction's
/// lock, Postgres re-evaluates this on the newest row version, so a row another claim took, or
/// settled, in the meantime is left alone rather than taken from under it.
macro_rules! take_picked {
    () => {
        "UPDATE {table} o
SET status = 'IN_FLIGHT',
    claimed_by = :claimant,
    claim_token = o.claim_token + 1,
    lease_expires_at = now() + :lease_ms::bigint * interval '1 millisecond',
    expired_claims = o.expired_claims + CASE WHEN o.status = 'IN_FLIGHT' THEN 1 ELSE 0 END
FROM picked
WHERE o.id = picked.id AND o.status = picked.status AND o.claim_token = picked.claim_token
RETURNING o.id, o.claim_token AS token, o.event_id, o.event_type, o.aggregate_type,
          o.aggregate_id, o.payload, o.headers, o.attempts, o.expired_claims,
          ((extract(epoch FROM now()) - extract(epoch FROM o.created_at)) * 1000)::float8 AS age_ms,
          picked.reclaimed{created_at}"
    };
}

/// The row's `created_at` as RFC 3339 text in UTC, microseconds included (CloudEvents' `time`):
/// returned by the claims of a relay whose entries carry it, after the other columns. NULL for a
/// `created_at` of `infinity` (that row turns DEAD by its age).
pub(crate) fn created_at_column(alias: &str) -> String {
    format!(
        ",\n          to_char({alias}created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS created_at"
    )
}

/// Reclaims at most one lease-expired row and, only when there is none, claims a batch of due
/// rows. Taking expired rows one at a time isolates a row that crashes its claimant: only that
/// row's `expired_claims` grows towards DEAD, not its innocent batch neighbours'. Both arms walk
/// partial indexes that hold only PENDING / IN_FLIGHT rows, never delivered history.
const CLAIM: &str = concat!(
    "\
WITH expired AS (
    SELECT id, status, claim_token FROM {table}
    WHERE status = 'IN_FLIGHT' AND lease_expires_at <= now()
    ORDER BY lease_expires_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT id, status, claim_token FROM {table}
    WHERE status = 'PENDING' AND next_attempt_at <= now()
      AND NOT EXISTS (SELECT 1 FROM expired)
    ORDER BY next_attempt_at, id
    LIMIT :batch_size
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT id, status, claim_token, true AS reclaimed FROM expired
    UNION ALL
    SELECT id, status, claim_token, false FROM due
)
",
    take_picked!()
);

const MARK_DELIVERED: &str = "\
UPDATE {table} o
SET status = 'DELIVERED', delivered_at = now(), stream_entry_id = s.entry_id, stream_key = s.stream,
    lease_expires_at = NULL, last_error = NULL
FROM unnest(:ids::bigint[], :tokens::bigint[], :entry_ids::text[], :streams::text[]) AS s(id, token, entry_id, stream)
WHERE o.id = s.id AND o.claim_token = s.token AND o.claimed_by = :claimant
  AND o.lease_expires_at IS NOT NULL";

const DELETE: &str = "\
DELETE FROM {table} o
USING unnest(:ids::bigint[], :tokens::bigint[]) AS s(id, token)
WHERE o.id = s.id AND o.claim_token = s.token AND o.claimed_by = :claimant
  AND o.lease_expires_at IS NOT NULL";

const RETRY: &str = "\
UPDATE {table}
SET status = 'PENDING', attempts = attempts + 1, last_error = :error, lease_expires_at = NULL,
    next_attempt_at = now() + :delay_ms::bigint * interval '1 millisecond'
WHERE id = :id::bigint AND claim_token = :token AND claimed_by = :claimant
  AND lease_expires_at IS NOT NULL";

const DEAD: &str = "\
UPDATE {table}
SET status = 'DEAD', attempts = attempts + 1, last_error = :error, lease_expires_at = NULL,
    dead_at = now()
WHERE id = :id::bigint AND claim_token = :token AND claimed_by = :claimant
  AND lease_expires_at IS NOT NULL";

/// Hands rows back untouched: an outage is not the row's fault, so attempts stay as they were.
/// With a `delay_ms`, they are due again only then (a shard of the broker is down: its rows
/// step aside for the others').
const RELEASE: &str = "\
UPDATE {table} o
SET status = 'PENDING', lease_expires_at = NULL,
    next_attempt_at = CASE WHEN :delay_ms::bigint > 0
                           THEN now() + :delay_ms::bigint * interval '1 millisecond' ELSE o.next_attempt_at END
FROM unnest(:ids::bigint[], :tokens::bigint[]) AS s(id, token)
WHERE o.id = s.id AND o.claim_token = s.token AND o.claimed_by = :claimant
  AND o.lease_expires_at IS NOT NULL";

/// Rows another statement holds (a settle in progress) are skipped rather than waited for.
const RENEW: &str = "\
UPDATE {table} r
SET lease_expires_at = now() + :lease_ms::bigint * interval '1 millisecond'
FROM (
    SELECT o.id FROM {table} o
    JOIN unnest(:ids::bigint[], :tokens::bigint[]) AS s(id, token) ON o.id = s.id
    WHERE o.claim_token = s.token AND o.claimed_by = :claimant AND o.lease_expires_at IS NOT NULL
    FOR UPDATE OF o SKIP LOCKED
) AS held
WHERE r.id = held.id";

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
       coalesce(extract(epoch FROM now()) - extract(epoch FROM least(pending.oldest, in_flight.oldest)), 0)::float8
           AS oldest_pending_age_seconds
FROM pending, in_flight, dead";

/// Retention: deletes one bounded batch of old delivered rows, skipping rows someone holds.
const PURGE: &str = "\
WITH old AS (
    SELECT id FROM {table}
    WHERE status = 'DELIVERED' AND delivered_at < now() - :age_ms::bigint * interval '1 millisecond'
    ORDER BY delivered_at
    LIMIT :batch_size
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {table} o USING old WHERE o.id = old.id";

/// Broker-loss repair: the recently delivered rows, on the partial index of delivered rows.
const DELIVERED_SINCE: &str = "\
SELECT id, stream_key AS stream, stream_entry_id AS entry_id, event_id FROM {table}
WHERE status = 'DELIVERED' AND delivered_at > now() - :age_ms::bigint * interval '1 millisecond'
  AND stream_key IS NOT NULL AND stream_entry_id IS NOT NULL
ORDER BY delivered_at";

/// Broker-loss repair: rows whose entries the broker lost go back to PENDING (run with
/// `handoff.redrive` set: the settled-row guard of `migrations/postgres/0006` allows it then).
/// Only while the row still points at the lost entry: one already delivered again (another
/// relay repaired it first) keeps its new entry.
const REDRIVE: &str = "\
UPDATE {table} o
SET status = 'PENDING', next_attempt_at = now(), lease_expires_at = NULL,
    redrives = o.redrives + 1, redriven_at = now()
FROM unnest(:ids::bigint[], :entry_ids::text[]) AS s(id, entry_id)
WHERE o.id = s.id AND o.status = 'DELIVERED' AND o.stream_entry_id = s.entry_id";

/// Ordered claim: per key (aggregate type + id) only the run of due rows at the head of the key
/// may be claimed, so two claimants never interleave a key. A row is due only once its
/// commit-order horizon has passed (no transaction that could still commit a lower id of the key
/// is running). Which rows block their key (`{parked}`, `{dead}`): with `hold`, DEAD rows and rows
/// waiting for a retry; with `park` they step aside. A lease-expired head is reclaimed alone.
///
/// Two claims whose snapshots differ can see different heads of one key (with `park`, a retrying
/// row becomes due between them). So the claim locks every row of the run it wants, each rechecked
/// on its newest version, and keeps of each key only the rows before the first one it could not
/// lock: a row another claim holds, or took and settled meanwhile, ends the key's run there.
const CLAIM_ORDERED: &str = concat!(
    "\
WITH live AS (
    SELECT id, aggregate_type, aggregate_id, status, claim_token, next_attempt_at, commit_horizon, lease_expires_at
    FROM {table} WHERE status = 'PENDING' {parked}
    UNION ALL
    SELECT id, aggregate_type, aggregate_id, status, claim_token, next_attempt_at, commit_horizon, lease_expires_at
    FROM {table} WHERE status = 'IN_FLIGHT'
    {dead}
), runs AS (
    SELECT id, aggregate_type, aggregate_id, status, claim_token, lease_expires_at,
           row_number() OVER w AS pos,
           bool_and(status = 'PENDING' AND next_attempt_at <= now()
                    AND coalesce(commit_horizon < pg_snapshot_xmin(pg_current_snapshot()), true)) OVER w AS runnable
    FROM live
    WINDOW w AS (PARTITION BY aggregate_type, aggregate_id ORDER BY id
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
), heads AS (
    SELECT o.id, o.aggregate_type, o.aggregate_id, r.runnable
    FROM {table} o JOIN runs r ON r.id = o.id
    WHERE r.pos = 1 AND (r.runnable OR (r.status = 'IN_FLIGHT' AND r.lease_expires_at <= now()))
      -- Rechecked on the newest row version: a head another claimant took (or settled) since
      -- this statement's snapshot is skipped, and with it its key.
      AND o.status = r.status AND o.claim_token = r.claim_token
    ORDER BY o.id
    LIMIT :batch_size
    FOR UPDATE OF o SKIP LOCKED
), wanted AS (
    SELECT r.id, r.status, r.claim_token, r.aggregate_type, r.aggregate_id, NOT h.runnable AS reclaimed
    FROM runs r JOIN heads h ON h.aggregate_type = r.aggregate_type AND h.aggregate_id = r.aggregate_id
    WHERE (h.runnable AND r.runnable) OR r.id = h.id
    ORDER BY r.id
    LIMIT :batch_size
), locked AS (
    SELECT o.id FROM {table} o JOIN wanted w ON w.id = o.id
    WHERE o.status = w.status AND o.claim_token = w.claim_token
    FOR UPDATE OF o SKIP LOCKED
), cut AS (
    SELECT w.aggregate_type, w.aggregate_id, min(w.id) AS at FROM wanted w
    WHERE NOT EXISTS (SELECT 1 FROM locked l WHERE l.id = w.id)
    GROUP BY w.aggregate_type, w.aggregate_id
), picked AS (
    SELECT w.id, w.status, w.claim_token, w.reclaimed
    FROM wanted w JOIN locked l ON l.id = w.id
    LEFT JOIN cut c ON c.aggregate_type = w.aggregate_type AND c.aggregate_id = w.aggregate_id
    WHERE c.at IS NULL OR w.id < c.at
)
",
    take_picked!(),
    ",
          o.aggregate_type || ':' || o.aggregate_id AS order_key"
);

/// The ordered claim for `table` with the given failure policy.
pub(crate) fn ordered_claim(table: &str, on_failure: OnFailure, created_at: bool) -> String {
    let (parked, dead) = match on_failure {
        OnFailure::Hold => (
            "",
            "UNION ALL
    SELECT id, aggregate_type, aggregate_id, status, claim_token, next_attempt_at, commit_horizon, lease_expires_at
    FROM {table} WHERE status = 'DEAD'",
        ),
        // A row waiting for its retry steps aside; DEAD rows are not in `live` at all.
        OnFailure::Park => ("AND (attempts = 0 OR next_attempt_at <= now())", ""),
    };
    let created_at = if created_at { created_at_column("o.") } else { String::new() };
    CLAIM_ORDERED
        .replace("{parked}", parked)
        .replace("{dead}", dead)
        .replace("{table}", table)
        .replace("{created_at}", &created_at)
}

/// The default text of `kind` for `table`.
pub fn default_sql(kind: StatementKind, table: &str) -> String {
    relay_sql(kind, table, false)
}

/// [`default_sql`], the claim also returning `created_at` when `created_at` is set.
pub(crate) fn relay_sql(kind: StatementKind, table: &str, created_at: bool) -> String {
    let template = match kind {
        StatementKind::Purge => PURGE,
        StatementKind::Claim => CLAIM,
        StatementKind::MarkDelivered => MARK_DELIVERED,
        StatementKind::Delete => DELETE,
        StatementKind::Retry => RETRY,
        StatementKind::Dead => DEAD,
        StatementKind::Release => RELEASE,
        StatementKind::Renew => RENEW,
        StatementKind::Stats => STATS,
        StatementKind::DeliveredSince => DELIVERED_SINCE,
        StatementKind::Redrive => REDRIVE,
    };
    let created_at = if created_at && kind == StatementKind::Claim { created_at_column("o.") } else { String::new() };
    template.replace("{table}", table).replace("{created_at}", &created_at)
}
