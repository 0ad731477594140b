-- handoff reference schema, Postgres: replay jobs (`handoff replay`). One row per job: what it
-- replays (the relay, the target stream, the selection as JSON, the highest row id it covers)
-- and how far it got (`after_id`: every matching row up to it has been appended). A replay
-- killed or interrupted resumes from here; at most the batch in flight is appended twice.
-- part: replays
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
