-- handoff reference schema, MySQL / MariaDB: the fields an entry carried beyond the mapped ones
-- (`[bridge.envelope]`), a JSON object of strings; handlers bind them as :fields.<name>.
-- part: inbox
ALTER TABLE consumer_inbox ADD COLUMN IF NOT EXISTS fields JSON NULL;
