-- handoff reference schema, MySQL 8 / MariaDB 10.6+: the owner service's outbox.
-- MySQL has no partial indexes; (status, …) indexes serve the same intent: the claim reads the
-- PENDING / IN_FLIGHT ranges of the index and never the delivered history.
-- part: outbox
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
