-- handoff reference schema, Postgres: the stream each delivered row's entry went to. With
-- stream_entry_id it names the entry, so a relay can look delivered rows' entries up in their
-- streams and re-drive those a broker lost. NULL for rows delivered before this column existed.
-- part: outbox
ALTER TABLE audit_outbox ADD COLUMN IF NOT EXISTS stream_key text;
