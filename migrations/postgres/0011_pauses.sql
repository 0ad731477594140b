-- handoff reference schema, Postgres: paused components. `handoff pause` writes a row here and
-- `handoff resume` deletes it; every replica of the named relay, bridge or worker polls this
-- table and stops claiming or reading while its row is present and not expired. The row lives
-- in the database the component already uses, so a pause survives restarts and reaches every
-- replica without another moving part.
-- part: pauses
CREATE TABLE IF NOT EXISTS handoff_pauses (
    component  text        NOT NULL CHECK (component IN ('relay', 'bridge', 'worker')),
    name       text        NOT NULL,
    reason     text,
    paused_by  text        NOT NULL,
    paused_at  timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    PRIMARY KEY (component, name)
);
