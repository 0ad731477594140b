-- Example read model from the seed (MySQL / MariaDB): the consumer's audit log.
-- part: demo
CREATE TABLE IF NOT EXISTS audit_logs (
    audit_id    VARCHAR(128) NOT NULL PRIMARY KEY,
    source      VARCHAR(128) NOT NULL,
    action      VARCHAR(128) NOT NULL,
    actor       VARCHAR(255) NULL,
    target      VARCHAR(255) NULL,
    detail      JSON         NULL,
    recorded_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE = InnoDB;
