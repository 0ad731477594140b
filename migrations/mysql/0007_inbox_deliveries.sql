-- handoff reference schema, MySQL / MariaDB: deliveries of stream entries that reached the inbox
-- database without a verdict (see migrations/postgres/0010_inbox_deliveries.sql): only those
-- count towards a bridge's max_deliveries.
-- part: deliveries
CREATE TABLE IF NOT EXISTS consumer_inbox_deliveries (
    consumer        VARCHAR(128) NOT NULL,
    stream          VARCHAR(255) NOT NULL,
    stream_entry_id VARCHAR(64)  NOT NULL,
    deliveries      INT          NOT NULL DEFAULT 1,
    first_at        DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    last_at         DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (consumer, stream, stream_entry_id)
) ENGINE = InnoDB;
