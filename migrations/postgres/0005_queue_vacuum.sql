-- Queue tables churn: every claim and settle leaves dead row versions and dead entries in the
-- partial indexes the claims walk. Vacuum them after a fixed number of changes rather than a
-- fraction of the table, so a table holding millions of delivered rows is still vacuumed every
-- few thousand settles and claims stay fast.
-- part: outbox
ALTER TABLE audit_outbox SET (
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
