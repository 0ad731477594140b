-- handoff reference schema, Postgres: deliveries of stream entries that reached the inbox
-- database without a verdict. The bridge counts a redelivered entry here (an entry it reads
-- again from the pending list or claims from a dead consumer) before it handles it, in a
-- transaction of its own; taking the entry over removes its row. So only deliveries that got
-- as far as the database count towards max_deliveries: a redelivery during an inbox outage, or
-- one the bridge was restarted in before it could write anything, never does. A row lives only
-- while its entry is pending; rows not counted again for delete_idle_consumers_after are purged.
-- part: deliveries
CREATE TABLE IF NOT EXISTS consumer_inbox_deliveries (
    consumer        text        NOT NULL,
    stream          text        NOT NULL,
    stream_entry_id text        NOT NULL,
    deliveries      integer     NOT NULL DEFAULT 1,
    first_at        timestamptz NOT NULL DEFAULT now(),
    last_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, stream, stream_entry_id)
);
