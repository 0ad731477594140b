-- handoff reference schema, Postgres: what the optional relay features use.
-- part: outbox

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
-- part: inbox
ALTER TABLE consumer_inbox ADD COLUMN IF NOT EXISTS redrives integer NOT NULL DEFAULT 0;
ALTER TABLE consumer_inbox ADD COLUMN IF NOT EXISTS redriven_at timestamptz;
