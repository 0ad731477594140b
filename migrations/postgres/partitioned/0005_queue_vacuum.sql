-- handoff reference schema, Postgres, partitioned outbox: a partitioned table takes no storage
-- parameters, so the queue-vacuum settings of 0005_queue_vacuum.sql go on each partition as the
-- relay creates it (and on the default partition here). The inbox is the same as unpartitioned.
-- part: outbox
ALTER TABLE audit_outbox_default SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 20000,
    autovacuum_analyze_scale_factor = 0.02
);
-- part: inbox
ALTER TABLE consumer_inbox SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 20000,
    autovacuum_analyze_scale_factor = 0.02
);
