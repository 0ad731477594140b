-- handoff reference schema, Postgres: the shard count each family of sharded streams was first
-- written with. A relay whose stream template spreads keys over shards (`{shard(column, N)}`)
-- records N here at start, and refuses to start when the family was written with another N:
-- the same key would land in another shard while the old one may still hold its earlier
-- events, and consumers would see them out of order. `handoff reshard` records a new count
-- once the old shards are drained.
-- part: shards
CREATE TABLE IF NOT EXISTS handoff_stream_shards (
    family      text        PRIMARY KEY,
    shard_count integer     NOT NULL CHECK (shard_count > 0),
    recorded_by text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
