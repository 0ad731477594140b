-- 0002_consumer_inbox (inbox)
-- handoff reference schema, Postgres: the consumer side. The bridge takes stream entries over
-- into consumer_inbox (unique per consumer and event) before acknowledging them; the worker
-- applies each row's effect and marks it PROCESSED in one transaction.

CREATE TABLE IF NOT EXISTS consumer_inbox (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer         text        NOT NULL,
    event_id         text        NOT NULL,
    event_type       text        NOT NULL,
    owner            text,
    aggregate_type   text,
    aggregate_id     text,
    payload          jsonb       NOT NULL,
    headers          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- sha256 of the event's content: a replay with the same id but other content is a conflict.
    content_hash     text        NOT NULL,
    stream           text        NOT NULL,
    stream_entry_id  text        NOT NULL,
    status           text        NOT NULL DEFAULT 'PENDING'
                     CHECK (status IN ('PENDING', 'PROCESSING', 'PROCESSED', 'DEAD', 'IGNORED')),
    attempts         integer     NOT NULL DEFAULT 0,
    expired_leases   integer     NOT NULL DEFAULT 0,
    next_retry_at    timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    lease_token      bigint      NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    -- When the current lease was taken (oldest-lease-age gauge).
    claimed_at       timestamptz,
    -- When the last handler failure happened (oldest-retry-age gauge).
    failed_at        timestamptz,
    received_at      timestamptz NOT NULL DEFAULT now(),
    processed_at     timestamptz,
    dead_at          timestamptz,
    last_error       text,
    UNIQUE (consumer, event_id)
);

-- The worker's claim reads only rows that still need work.
CREATE INDEX IF NOT EXISTS consumer_inbox_due
    ON consumer_inbox (consumer, next_retry_at, id) WHERE status = 'PENDING';
CREATE INDEX IF NOT EXISTS consumer_inbox_leased
    ON consumer_inbox (consumer, lease_expires_at) WHERE status = 'PROCESSING';
CREATE INDEX IF NOT EXISTS consumer_inbox_dead
    ON consumer_inbox (consumer, dead_at) WHERE status = 'DEAD';
-- Retention purges processed rows oldest first.
CREATE INDEX IF NOT EXISTS consumer_inbox_processed
    ON consumer_inbox (processed_at) WHERE status = 'PROCESSED';


-- 0004_outbox_extras (inbox)
ALTER TABLE consumer_inbox ADD COLUMN IF NOT EXISTS redrives integer NOT NULL DEFAULT 0;
ALTER TABLE consumer_inbox ADD COLUMN IF NOT EXISTS redriven_at timestamptz;

-- 0005_queue_vacuum (inbox)
ALTER TABLE consumer_inbox SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 20000,
    autovacuum_analyze_scale_factor = 0.02
);

-- 0009_inbox_fields (inbox)
-- handoff reference schema, Postgres: the fields an entry carried beyond the mapped ones
-- (`[bridge.envelope]`), kept with the inbox row as a JSON object of strings; handlers bind
-- them as :fields.<name>.
ALTER TABLE consumer_inbox ADD COLUMN IF NOT EXISTS fields jsonb NOT NULL DEFAULT '{}'::jsonb;

-- 0011_pauses (pauses)
-- handoff reference schema, Postgres: paused components. `handoff pause` writes a row here and
-- `handoff resume` deletes it; every replica of the named relay, bridge or worker polls this
-- table and stops claiming or reading while its row is present and not expired. The row lives
-- in the database the component already uses, so a pause survives restarts and reaches every
-- replica without another moving part.
CREATE TABLE IF NOT EXISTS handoff_pauses (
    component  text        NOT NULL CHECK (component IN ('relay', 'bridge', 'worker')),
    name       text        NOT NULL,
    reason     text,
    paused_by  text        NOT NULL,
    paused_at  timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    PRIMARY KEY (component, name)
);

