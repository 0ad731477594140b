-- 0002_consumer_inbox (inbox)
-- handoff reference schema, MySQL 8 / MariaDB 10.6+: the consumer side.
CREATE TABLE IF NOT EXISTS consumer_inbox (
    id               BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    consumer         VARCHAR(128) NOT NULL,
    event_id         VARCHAR(128) NOT NULL,
    event_type       VARCHAR(128) NOT NULL,
    owner            VARCHAR(128) NULL,
    aggregate_type   VARCHAR(128) NULL,
    aggregate_id     VARCHAR(128) NULL,
    payload          JSON         NOT NULL,
    headers          JSON         NULL,
    content_hash     CHAR(64)     NOT NULL,
    stream           VARCHAR(255) NOT NULL,
    stream_entry_id  VARCHAR(64)  NOT NULL,
    status           VARCHAR(16)  NOT NULL DEFAULT 'PENDING',
    attempts         INT          NOT NULL DEFAULT 0,
    expired_leases   INT          NOT NULL DEFAULT 0,
    next_retry_at    DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    lease_owner      VARCHAR(255) NULL,
    lease_token      BIGINT       NOT NULL DEFAULT 0,
    lease_expires_at DATETIME(3)  NULL,
    claimed_at       DATETIME(3)  NULL,
    failed_at        DATETIME(3)  NULL,
    received_at      DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    processed_at     DATETIME(3)  NULL,
    dead_at          DATETIME(3)  NULL,
    last_error       TEXT         NULL,
    redrives         INT          NOT NULL DEFAULT 0,
    redriven_at      DATETIME(3)  NULL,
    UNIQUE KEY consumer_inbox_event (consumer, event_id),
    KEY consumer_inbox_due (consumer, status, next_retry_at, id),
    KEY consumer_inbox_lease (consumer, status, lease_expires_at)
) ENGINE = InnoDB;


-- 0006_inbox_fields (inbox)
-- handoff reference schema, MySQL / MariaDB: the fields an entry carried beyond the mapped ones
-- (`[bridge.envelope]`), a JSON object of strings; handlers bind them as :fields.<name>.
ALTER TABLE consumer_inbox ADD COLUMN IF NOT EXISTS fields JSON NULL;

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

