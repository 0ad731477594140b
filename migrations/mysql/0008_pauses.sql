-- handoff reference schema, MySQL / MariaDB: paused components (see
-- migrations/postgres/0011_pauses.sql): a row per paused relay, bridge or worker, polled by
-- every replica, deleted by `handoff resume`.
-- part: pauses
CREATE TABLE IF NOT EXISTS handoff_pauses (
    component  VARCHAR(16)  NOT NULL,
    name       VARCHAR(200) NOT NULL,
    reason     TEXT,
    paused_by  VARCHAR(200) NOT NULL,
    paused_at  DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    expires_at DATETIME(3),
    PRIMARY KEY (component, name),
    CONSTRAINT handoff_pauses_component CHECK (component IN ('relay', 'bridge', 'worker'))
) ENGINE = InnoDB;
