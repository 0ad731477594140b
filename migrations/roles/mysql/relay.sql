-- 0001_audit_outbox (outbox)
-- handoff reference schema, MySQL 8 / MariaDB 10.6+: the owner service's outbox.
-- MySQL has no partial indexes; (status, …) indexes serve the same intent: the claim reads the
-- PENDING / IN_FLIGHT ranges of the index and never the delivered history.
CREATE TABLE IF NOT EXISTS audit_outbox (
    id               BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    event_id         VARCHAR(128) NOT NULL,
    aggregate_type   VARCHAR(128) NOT NULL,
    aggregate_id     VARCHAR(128) NOT NULL,
    event_type       VARCHAR(128) NOT NULL,
    payload          JSON         NOT NULL,
    headers          JSON         NULL,
    status           VARCHAR(16)  NOT NULL DEFAULT 'PENDING',
    attempts         INT          NOT NULL DEFAULT 0,
    expired_claims   INT          NOT NULL DEFAULT 0,
    next_attempt_at  DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    claimed_by       VARCHAR(255) NULL,
    claim_token      BIGINT       NOT NULL DEFAULT 0,
    lease_expires_at DATETIME(3)  NULL,
    created_at       DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    delivered_at     DATETIME(3)  NULL,
    stream_entry_id  VARCHAR(64)  NULL,
    dead_at          DATETIME(3)  NULL,
    last_error       TEXT         NULL,
    redrives         INT          NOT NULL DEFAULT 0,
    redriven_at      DATETIME(3)  NULL,
    UNIQUE KEY audit_outbox_event (event_id),
    KEY audit_outbox_due (status, next_attempt_at, id),
    KEY audit_outbox_lease (status, lease_expires_at),
    KEY audit_outbox_settled (status, delivered_at)
) ENGINE = InnoDB;

-- 0005_outbox_stream_key (outbox)
-- handoff reference schema, MySQL / MariaDB: the stream each delivered row's entry went to
-- (broker-loss repair looks the entries up). NULL for rows delivered before it existed.
ALTER TABLE audit_outbox ADD COLUMN IF NOT EXISTS stream_key VARCHAR(255) NULL;

-- 0008_pauses (pauses)
-- handoff reference schema, MySQL / MariaDB: paused components (see
-- migrations/postgres/0011_pauses.sql): a row per paused relay, bridge or worker, polled by
-- every replica, deleted by `handoff resume`.
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

-- 0009_replays (replays)
-- handoff reference schema, MySQL / MariaDB: replay jobs (see
-- migrations/postgres/0012_replays.sql): the checkpoint a `handoff replay` resumes from.
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

-- 0010_stream_shards (shards)
-- handoff reference schema, MySQL / MariaDB: the shard count each family of sharded streams was
-- first written with (see migrations/postgres/0013_stream_shards.sql).
CREATE TABLE IF NOT EXISTS handoff_stream_shards (
    family      VARCHAR(700) NOT NULL PRIMARY KEY,
    shard_count INT          NOT NULL,
    recorded_by VARCHAR(200) NOT NULL,
    recorded_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    CONSTRAINT handoff_stream_shards_count CHECK (shard_count > 0)
) ENGINE = InnoDB;

