-- handoff reference schema, Postgres, partitioned by time (`handoff migrate --partitioned`):
-- the same outbox as 0001_audit_outbox.sql, split into ranges of `created_at` so retention drops
-- a whole partition instead of deleting rows one by one. The relay's `[relay.partitions]`
-- creates the partitions ahead of time and drops old ones once every row in them is delivered.
--
-- A partitioned table's unique keys must include the partition key, so the primary key is
-- (id, created_at) and `event_id` is unique only together with `created_at`: two rows with one
-- event_id and different creation times are both accepted here. Consumers still apply an event
-- once (their inbox is keyed on the event id), so a repeated id means the second event is
-- dropped as a duplicate; producers must keep event ids unique (UUIDs do).
-- part: outbox

CREATE TABLE IF NOT EXISTS audit_outbox (
    id               bigint GENERATED ALWAYS AS IDENTITY,
    event_id         text        NOT NULL,
    aggregate_type   text        NOT NULL,
    aggregate_id     text        NOT NULL,
    event_type       text        NOT NULL,
    payload          jsonb       NOT NULL,
    headers          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    status           text        NOT NULL DEFAULT 'PENDING'
                     CHECK (status IN ('PENDING', 'IN_FLIGHT', 'DELIVERED', 'DEAD')),
    attempts         integer     NOT NULL DEFAULT 0,
    expired_claims   integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    claimed_by       text,
    claim_token      bigint      NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    stream_entry_id  text,
    dead_at          timestamptz,
    last_error       text,
    PRIMARY KEY (id, created_at),
    UNIQUE (event_id, created_at)
) PARTITION BY RANGE (created_at);

-- Rows no partition covers (the relay has not created it yet, or an odd created_at such as
-- 'infinity') land here instead of failing the service's INSERT. The relay relays them like
-- any other; when it creates a partition over some of them it moves them in, and it deletes
-- the delivered ones the partitions' retention would have dropped.
CREATE TABLE IF NOT EXISTS audit_outbox_default PARTITION OF audit_outbox DEFAULT;

-- The same partial indexes as the plain outbox, created on every partition.
CREATE INDEX IF NOT EXISTS audit_outbox_due
    ON audit_outbox (next_attempt_at, id) WHERE status = 'PENDING';
CREATE INDEX IF NOT EXISTS audit_outbox_in_flight
    ON audit_outbox (lease_expires_at) WHERE status = 'IN_FLIGHT';
CREATE INDEX IF NOT EXISTS audit_outbox_dead
    ON audit_outbox (dead_at) WHERE status = 'DEAD';
CREATE INDEX IF NOT EXISTS audit_outbox_delivered
    ON audit_outbox (delivered_at) WHERE status = 'DELIVERED';
