-- handoff reference schema, Postgres: the consumer side. The bridge takes stream entries over
-- into consumer_inbox (unique per consumer and event) before acknowledging them; the worker
-- applies each row's effect and marks it PROCESSED in one transaction.
-- part: inbox

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

-- part: poison
-- Entries the bridge could not take over, with the reason and the original fields; also
-- payload conflicts (same event id, other content). One row per stream entry, so a redelivered
-- entry is recorded once.
CREATE TABLE IF NOT EXISTS consumer_inbox_poison (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer        text        NOT NULL,
    stream          text        NOT NULL,
    stream_entry_id text        NOT NULL,
    event_id        text,
    reason          text        NOT NULL,
    detail          text        NOT NULL,
    -- Field name → value; values that are not UTF-8 are stored as {"base64": "…"}.
    fields          jsonb       NOT NULL,
    received_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (consumer, stream, stream_entry_id)
);
CREATE INDEX IF NOT EXISTS consumer_inbox_poison_received ON consumer_inbox_poison (received_at);
