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


-- 0002_consumer_inbox (poison)
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

-- 0007_poison_redrive (poison)
-- handoff reference schema, Postgres: `handoff poison retry` appends a poison record's entry to
-- its stream again and keeps the record, counting the re-drive.
ALTER TABLE consumer_inbox_poison ADD COLUMN IF NOT EXISTS redrives integer NOT NULL DEFAULT 0;
ALTER TABLE consumer_inbox_poison ADD COLUMN IF NOT EXISTS redriven_at timestamptz;

-- 0009_inbox_fields (inbox)
-- handoff reference schema, Postgres: the fields an entry carried beyond the mapped ones
-- (`[bridge.envelope]`), kept with the inbox row as a JSON object of strings; handlers bind
-- them as :fields.<name>.
ALTER TABLE consumer_inbox ADD COLUMN IF NOT EXISTS fields jsonb NOT NULL DEFAULT '{}'::jsonb;

-- 0010_inbox_deliveries (deliveries)
-- handoff reference schema, Postgres: deliveries of stream entries that reached the inbox
-- database without a verdict. The bridge counts a redelivered entry here (an entry it reads
-- again from the pending list or claims from a dead consumer) before it handles it, in a
-- transaction of its own; taking the entry over removes its row. So only deliveries that got
-- as far as the database count towards max_deliveries: a redelivery during an inbox outage, or
-- one the bridge was restarted in before it could write anything, never does. A row lives only
-- while its entry is pending; rows not counted again for delete_idle_consumers_after are purged.
CREATE TABLE IF NOT EXISTS consumer_inbox_deliveries (
    consumer        text        NOT NULL,
    stream          text        NOT NULL,
    stream_entry_id text        NOT NULL,
    deliveries      integer     NOT NULL DEFAULT 1,
    first_at        timestamptz NOT NULL DEFAULT now(),
    last_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, stream, stream_entry_id)
);

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

-- 0013_stream_shards (shards)
-- handoff reference schema, Postgres: the shard count each family of sharded streams was first
-- written with. A relay whose stream template spreads keys over shards (`{shard(column, N)}`)
-- records N here at start, and refuses to start when the family was written with another N:
-- the same key would land in another shard while the old one may still hold its earlier
-- events, and consumers would see them out of order. `handoff reshard` records a new count
-- once the old shards are drained.
CREATE TABLE IF NOT EXISTS handoff_stream_shards (
    family      text        PRIMARY KEY,
    shard_count integer     NOT NULL CHECK (shard_count > 0),
    recorded_by text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

