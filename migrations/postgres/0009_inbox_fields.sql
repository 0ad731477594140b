-- handoff reference schema, Postgres: the fields an entry carried beyond the mapped ones
-- (`[bridge.envelope]`), kept with the inbox row as a JSON object of strings; handlers bind
-- them as :fields.<name>.
-- part: inbox
ALTER TABLE consumer_inbox ADD COLUMN IF NOT EXISTS fields jsonb NOT NULL DEFAULT '{}'::jsonb;
