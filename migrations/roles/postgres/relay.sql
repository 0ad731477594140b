-- 0001_audit_outbox (outbox)
-- handoff reference schema, Postgres: the owner service's outbox.
-- The service adds one INSERT to its own transaction; handoff does everything else.

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

-- 0004_outbox_extras (outbox)
-- handoff reference schema, Postgres: what the optional relay features use.

-- Low-latency wake-up: a statement-level trigger NOTIFYs the relay's channel once per INSERT
-- statement (NOTIFY also folds identical notifications within a transaction). Polling stays as
-- the fallback. For another channel or table, create the same trigger with other arguments.
CREATE OR REPLACE FUNCTION handoff_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], TG_TABLE_NAME);
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS audit_outbox_notify ON audit_outbox;
CREATE TRIGGER audit_outbox_notify AFTER INSERT ON audit_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION handoff_notify('handoff_outbox');

-- Per-key ordering: the id of the inserting transaction. A transaction that took a lower outbox
-- id earlier and is still running has a lower transaction id (it wrote before this one), so
-- once every transaction below this value has ended (the claim compares it with the oldest
-- running one), no row with a lower id can still appear: the commit-order horizon.
-- Added without a default first so an existing table is not rewritten; older rows stay NULL,
-- which the ordered claim treats as long settled.
ALTER TABLE audit_outbox ADD COLUMN IF NOT EXISTS commit_horizon xid8;
ALTER TABLE audit_outbox ALTER COLUMN commit_horizon SET DEFAULT pg_current_xact_id();

-- Re-drive history: DEAD rows sent back to PENDING keep their last error and count this.
ALTER TABLE audit_outbox ADD COLUMN IF NOT EXISTS redrives integer NOT NULL DEFAULT 0;
ALTER TABLE audit_outbox ADD COLUMN IF NOT EXISTS redriven_at timestamptz;

-- 0005_queue_vacuum (outbox)
-- Queue tables churn: every claim and settle leaves dead row versions and dead entries in the
-- partial indexes the claims walk. Vacuum them after a fixed number of changes rather than a
-- fraction of the table, so a table holding millions of delivered rows is still vacuumed every
-- few thousand settles and claims stay fast.
ALTER TABLE audit_outbox SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 20000,
    autovacuum_analyze_scale_factor = 0.02
);

-- 0006_settled_guard (outbox)
-- handoff reference schema, Postgres: a settled row stays settled.
-- A claim may take only PENDING rows and lease-expired IN_FLIGHT rows. A DELIVERED or DEAD row
-- moved back to PENDING / IN_FLIGHT by anything but an operator's re-drive is a bug that would
-- append the event again, so the database refuses it loudly instead. Re-drives (`handoff dead
-- retry`, broker-loss repair) set `handoff.redrive` for their own transaction. The WHEN clause is
-- evaluated without calling the function, so settles and claims pay next to nothing for it.
CREATE OR REPLACE FUNCTION handoff_refuse_reopen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('handoff.redrive', true), '') <> 'on' THEN
        RAISE EXCEPTION 'handoff: % row % is % and only an operator re-drive may move it to %',
            TG_TABLE_NAME, OLD.id, OLD.status, NEW.status
            USING HINT = 'a claim statement tried to take a settled row; see handoff dead retry for re-drives';
    END IF;
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS audit_outbox_settled_guard ON audit_outbox;
CREATE TRIGGER audit_outbox_settled_guard BEFORE UPDATE OF status ON audit_outbox
    FOR EACH ROW
    WHEN (OLD.status IN ('DELIVERED', 'DEAD') AND NEW.status IN ('PENDING', 'IN_FLIGHT'))
    EXECUTE FUNCTION handoff_refuse_reopen();

-- 0008_outbox_stream_key (outbox)
-- handoff reference schema, Postgres: the stream each delivered row's entry went to. With
-- stream_entry_id it names the entry, so a relay can look delivered rows' entries up in their
-- streams and re-drive those a broker lost. NULL for rows delivered before this column existed.
ALTER TABLE audit_outbox ADD COLUMN IF NOT EXISTS stream_key text;

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

-- 0012_replays (replays)
-- handoff reference schema, Postgres: replay jobs (`handoff replay`). One row per job: what it
-- replays (the relay, the target stream, the selection as JSON, the highest row id it covers)
-- and how far it got (`after_id`: every matching row up to it has been appended). A replay
-- killed or interrupted resumes from here; at most the batch in flight is appended twice.
CREATE TABLE IF NOT EXISTS handoff_replays (
    job         text        PRIMARY KEY,
    relay       text        NOT NULL,
    target      text        NOT NULL,
    selection   text        NOT NULL,
    through_id  bigint      NOT NULL,
    after_id    bigint      NOT NULL,
    appended    bigint      NOT NULL DEFAULT 0,
    total       bigint      NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
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

-- 0014_outbox_notify (outbox)
-- handoff reference schema, Postgres: the outbox's NOTIFY trigger, only where a relay listens.

-- 0004 made the trigger for every outbox. A transaction that NOTIFYs takes a lock for the whole
-- cluster at commit and holds it until the commit is durable, so with the trigger the owner's
-- inserting transactions commit one at a time (with 16 clients inserting a row each, 2.7x fewer
-- transactions a second). `handoff migrate` makes it again (part notify) only for a relay with
-- [relay.notify] on this table and channel.
DROP TRIGGER IF EXISTS audit_outbox_notify ON audit_outbox;

