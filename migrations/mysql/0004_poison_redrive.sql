-- handoff reference schema, MySQL / MariaDB: `handoff poison retry` keeps the record and counts
-- the re-drive.
-- part: poison
ALTER TABLE consumer_inbox_poison ADD COLUMN IF NOT EXISTS redrives INT NOT NULL DEFAULT 0;
ALTER TABLE consumer_inbox_poison ADD COLUMN IF NOT EXISTS redriven_at DATETIME(3) NULL;
