//! A table with its own layout (text ids, other column names, other status words) is relayed by
//! configuration alone: every statement replaced, nothing else changed.

use crate::common;

use common::process::Handoff;
use common::{TestEnv, eventually};
use fred::prelude::*;

const TABLE: &str = "
CREATE TABLE events_out (
    uid         text PRIMARY KEY,
    kind        text NOT NULL,
    topic       text NOT NULL,
    body        jsonb NOT NULL,
    state       text NOT NULL DEFAULT 'new',
    tries       int  NOT NULL DEFAULT 0,
    lost_leases int  NOT NULL DEFAULT 0,
    retry_at    timestamptz NOT NULL DEFAULT now(),
    owner_claim text,
    fence       bigint NOT NULL DEFAULT 0,
    lease_until timestamptz,
    made_at     timestamptz NOT NULL DEFAULT now(),
    sent_entry  text,
    problem     text
);
CREATE INDEX events_out_due ON events_out (retry_at) WHERE state = 'new';";

fn relay_config(env: &TestEnv) -> String {
    let fence = "uid = :id AND fence = :token AND owner_claim = :claimant AND state = 'sending'";
    let batch_fence = "e.uid = s.uid AND e.fence = s.fence AND e.owner_claim = :claimant AND e.state = 'sending'";
    env.config(&format!(
        r#"stream = "{id}:{{topic}}"
max_attempts = 1
fields = {{ source = "legacy", topic_copy = "{{topic}}" }}

[relay.sql]
claim = """
WITH due AS (
    SELECT uid FROM events_out
    WHERE (state = 'new' AND retry_at <= now()) OR (state = 'sending' AND lease_until <= now())
    ORDER BY made_at LIMIT :batch_size FOR UPDATE SKIP LOCKED
)
UPDATE events_out e SET state = 'sending', owner_claim = :claimant, fence = e.fence + 1,
    lease_until = now() + :lease_ms::bigint * interval '1 millisecond',
    lost_leases = e.lost_leases + CASE WHEN e.state = 'sending' THEN 1 ELSE 0 END
FROM due WHERE e.uid = due.uid
RETURNING e.uid AS id, e.fence AS token, e.uid AS event_id, e.kind AS event_type, e.topic,
    e.body AS payload, e.tries AS attempts, e.lost_leases AS expired_claims,
    (extract(epoch FROM now() - e.made_at) * 1000)::float8 AS age_ms"""
mark_delivered = """
UPDATE events_out e SET state = 'sent', sent_entry = s.entry
FROM unnest(:ids::text[], :tokens::bigint[], :entry_ids::text[]) AS s(uid, fence, entry)
WHERE {batch_fence}"""
retry = "UPDATE events_out SET state = 'new', tries = tries + 1, problem = :error, retry_at = now() + :delay_ms::bigint * interval '1 millisecond' WHERE {fence}"
dead = "UPDATE events_out SET state = 'failed', tries = tries + 1, problem = :error WHERE {fence}"
release = "UPDATE events_out e SET state = 'new' FROM unnest(:ids::text[], :tokens::bigint[]) AS s(uid, fence) WHERE {batch_fence}"
renew = "UPDATE events_out e SET lease_until = now() + :lease_ms::bigint * interval '1 millisecond' FROM unnest(:ids::text[], :tokens::bigint[]) AS s(uid, fence) WHERE {batch_fence}"
"#,
        id = env.id,
    ))
}

#[tokio::test]
async fn a_foreign_table_is_relayed_by_configuration_alone() {
    let env = TestEnv::new().await;
    env.db.batch_execute(TABLE).await.unwrap();
    env.db
        .batch_execute(
            "INSERT INTO events_out (uid, kind, topic, body)
             SELECT 'uid-' || md5(g::text), 'invoice.paid', 'billing', jsonb_build_object('n', g)
             FROM generate_series(1, 25) g;
             INSERT INTO events_out (uid, kind, topic, body) VALUES ('uid-bad', 'invoice.paid', 'blocked', '{}');",
        )
        .await
        .unwrap();
    let _: () = env.redis.set(env.stream("blocked"), "a string, not a stream", None, None, false).await.unwrap();
    let config = relay_config(&env);
    let (ok, out) = common::process::run_to_end(&config, &["check"]);
    assert!(ok, "check accepts the foreign statements:\n{out}");

    let _relay = Handoff::run(&config);
    eventually("25 rows sent and one failed", || async {
        let sent = env.scalar_i64("SELECT count(*) FROM events_out WHERE state = 'sent'").await;
        let failed = env.scalar_i64("SELECT count(*) FROM events_out WHERE state = 'failed'").await;
        (sent == 25 && failed == 1).then_some(())
    })
    .await;
    let entries = env.stream_entries(&env.stream("billing")).await;
    assert_eq!(entries.len(), 25);
    let (entry_id, fields) = &entries[0];
    assert!(fields["event_id"].starts_with("uid-"));
    assert_eq!(fields["event_type"], "invoice.paid");
    assert_eq!(fields["source"], "legacy");
    assert_eq!(fields["topic_copy"], "billing");
    assert!(fields["payload"].contains("\"n\""));
    let recorded: String = env
        .db
        .query_one("SELECT sent_entry FROM events_out WHERE uid = $1", &[&fields["event_id"]])
        .await
        .unwrap()
        .get(0);
    assert_eq!(&recorded, entry_id);
    let problem: String =
        env.db.query_one("SELECT problem FROM events_out WHERE uid = 'uid-bad'", &[]).await.unwrap().get(0);
    assert!(problem.contains("WRONGTYPE"), "{problem}");
}
