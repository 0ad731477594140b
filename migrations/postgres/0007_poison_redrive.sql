-- handoff reference schema, Postgres: `handoff poison retry` appends a poison record's entry to
-- its stream again and keeps the record, counting the re-drive.
-- part: poison
ALTER TABLE consumer_inbox_poison ADD COLUMN IF NOT EXISTS redrives integer NOT NULL DEFAULT 0;
ALTER TABLE consumer_inbox_poison ADD COLUMN IF NOT EXISTS redriven_at timestamptz;
