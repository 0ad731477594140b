-- handoff reference schema, Postgres: the outbox's NOTIFY trigger, only where a relay listens.
-- part: outbox

-- 0004 made the trigger for every outbox. A transaction that NOTIFYs takes a lock for the whole
-- cluster at commit and holds it until the commit is durable, so with the trigger the owner's
-- inserting transactions commit one at a time (with 16 clients inserting a row each, 2.7x fewer
-- transactions a second). `handoff migrate` makes it again (part notify) only for a relay with
-- [relay.notify] on this table and channel.
DROP TRIGGER IF EXISTS audit_outbox_notify ON audit_outbox;
-- part: notify
-- Made again, not kept: a trigger of this name made by hand (after `handoff check` warned) is
-- replaced rather than failing the migration.
DROP TRIGGER IF EXISTS audit_outbox_notify ON audit_outbox;
CREATE TRIGGER audit_outbox_notify AFTER INSERT ON audit_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION handoff_notify('handoff_outbox');
