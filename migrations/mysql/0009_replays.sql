-- handoff reference schema, MySQL / MariaDB: replay jobs (see
-- migrations/postgres/0012_replays.sql): the checkpoint a `handoff replay` resumes from.
-- part: replays
CREATE TABLE IF NOT EXISTS handoff_replays (
    job         VARCHAR(200) NOT NULL PRIMARY KEY,
    relay       VARCHAR(200) NOT NULL,
    target      VARCHAR(255) NOT NULL,
    selection   TEXT         NOT NULL,
    through_id  BIGINT       NOT NULL,
    after_id    BIGINT       NOT NULL,
    appended    BIGINT       NOT NULL DEFAULT 0,
    total       BIGINT       NOT NULL,
    started_at  DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at  DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    finished_at DATETIME(3)  NULL
) ENGINE = InnoDB;
