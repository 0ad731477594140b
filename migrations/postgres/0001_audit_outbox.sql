-- handoff reference schema, Postgres: the owner service's outbox.
-- The service adds one INSERT to its own transaction; handoff does everything else.
-- part: outbox

CREATE TABLE IF NOT EXISTS audit_outbox (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Unique across the owner's events; consumers deduplicate on it.
    event_id         text        NOT NULL UNIQUE,
    aggregate_type   text        NOT NULL,
    aggregate_id     text        NOT NULL,
    event_type       text        NOT NULL,
    payload          jsonb       NOT NULL,
    -- Propagated context such as {"traceparent": "00-…"}.
    headers          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    status           text        NOT NULL DEFAULT 'PENDING'
                     CHECK (status IN ('PENDING', 'IN_FLIGHT', 'DELIVERED', 'DEAD')),
    -- Failures attributable to the row (outages do not count).
    attempts         integer     NOT NULL DEFAULT 0,
    -- Claims that ended with the lease expiring: the claimant died holding the row.
    expired_claims   integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    claimed_by       text,
    -- Fencing token: +1 on every claim; settles must present the current value.
    claim_token      bigint      NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    stream_entry_id  text,
    dead_at          timestamptz,
    last_error       text
);

-- The claim walks only rows that still need work; delivered history is in none of these.
CREATE INDEX IF NOT EXISTS audit_outbox_due
    ON audit_outbox (next_attempt_at, id) WHERE status = 'PENDING';
CREATE INDEX IF NOT EXISTS audit_outbox_in_flight
    ON audit_outbox (lease_expires_at) WHERE status = 'IN_FLIGHT';
CREATE INDEX IF NOT EXISTS audit_outbox_dead
    ON audit_outbox (dead_at) WHERE status = 'DEAD';
-- Retention purges delivered rows oldest first without scanning the live ones.
CREATE INDEX IF NOT EXISTS audit_outbox_delivered
    ON audit_outbox (delivered_at) WHERE status = 'DELIVERED';
