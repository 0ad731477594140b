-- handoff reference schema, MySQL / MariaDB: the shard count each family of sharded streams was
-- first written with (see migrations/postgres/0013_stream_shards.sql).
-- part: shards
CREATE TABLE IF NOT EXISTS handoff_stream_shards (
    family      VARCHAR(700) NOT NULL PRIMARY KEY,
    shard_count INT          NOT NULL,
    recorded_by VARCHAR(200) NOT NULL,
    recorded_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    CONSTRAINT handoff_stream_shards_count CHECK (shard_count > 0)
) ENGINE = InnoDB;
