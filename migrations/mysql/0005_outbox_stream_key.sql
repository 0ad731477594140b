-- handoff reference schema, MySQL / MariaDB: the stream each delivered row's entry went to
-- (broker-loss repair looks the entries up). NULL for rows delivered before it existed.
-- part: outbox
ALTER TABLE audit_outbox ADD COLUMN IF NOT EXISTS stream_key VARCHAR(255) NULL;
