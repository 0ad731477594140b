-- Example read model from the seed: the consumer's audit log, written by a worker handler keyed
-- by the event id (INSERT … ON CONFLICT DO NOTHING), in the transaction that marks the inbox
-- row PROCESSED.
-- part: demo

CREATE TABLE IF NOT EXISTS audit_logs (
    audit_id    text PRIMARY KEY,
    source      text        NOT NULL,
    action      text        NOT NULL,
    actor       text,
    target      text,
    detail      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
