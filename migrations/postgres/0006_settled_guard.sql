-- handoff reference schema, Postgres: a settled row stays settled.
-- A claim may take only PENDING rows and lease-expired IN_FLIGHT rows. A DELIVERED or DEAD row
-- moved back to PENDING / IN_FLIGHT by anything but an operator's re-drive is a bug that would
-- append the event again, so the database refuses it loudly instead. Re-drives (`handoff dead
-- retry`, broker-loss repair) set `handoff.redrive` for their own transaction. The WHEN clause is
-- evaluated without calling the function, so settles and claims pay next to nothing for it.
-- part: outbox
CREATE OR REPLACE FUNCTION handoff_refuse_reopen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('handoff.redrive', true), '') <> 'on' THEN
        RAISE EXCEPTION 'handoff: % row % is % and only an operator re-drive may move it to %',
            TG_TABLE_NAME, OLD.id, OLD.status, NEW.status
            USING HINT = 'a claim statement tried to take a settled row; see handoff dead retry for re-drives';
    END IF;
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS audit_outbox_settled_guard ON audit_outbox;
CREATE TRIGGER audit_outbox_settled_guard BEFORE UPDATE OF status ON audit_outbox
    FOR EACH ROW
    WHEN (OLD.status IN ('DELIVERED', 'DEAD') AND NEW.status IN ('PENDING', 'IN_FLIGHT'))
    EXECUTE FUNCTION handoff_refuse_reopen();
