//! A table with its own layout (text or UUID ids, other column names, other status words) is
//! relayed by configuration alone: every statement replaced, nothing else changed. One scenario,
//! run on Postgres and on MariaDB, each with a table and statements written in its own SQL.

use crate::common;

use common::db_env::{DbEnv, Dialect};
use common::eventually;
use common::process::Handoff;
use fred::prelude::*;

/// One dialect's foreign table: its name, how it is made and filled, its words, and the statements that
/// relay it. `rows` rows of topic `billing` and one of topic `blocked`.
struct Layout {
    name: &'static str,
    table: &'static str,
    insert: &'static str,
    rows: usize,
    /// The id column and the one the entry id is recorded in.
    id: &'static str,
    entry: &'static str,
    /// The status words of a sent and of a dead row.
    sent: &'static str,
    dead: &'static str,
    /// The `[relay.sql]` statements.
    sql: String,
}

const POSTGRES_TABLE: &str = "
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

fn postgres() -> Layout {
    let fence = "uid = :id AND fence = :token AND owner_claim = :claimant AND state = 'sending'";
    let batch_fence = "e.uid = s.uid AND e.fence = s.fence AND e.owner_claim = :claimant AND e.state = 'sending'";
    Layout {
        name: "events_out",
        table: POSTGRES_TABLE,
        insert: "INSERT INTO events_out (uid, kind, topic, body)
                 SELECT 'uid-' || md5(g::text), 'invoice.paid', 'billing', jsonb_build_object('n', g)
                 FROM generate_series(1, 25) g;
                 INSERT INTO events_out (uid, kind, topic, body) VALUES ('uid-bad', 'invoice.paid', 'blocked', '{}');",
        rows: 25,
        id: "uid",
        entry: "sent_entry",
        sent: "sent",
        dead: "failed",
        sql: format!(
            r#"claim = """
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
"#
        ),
    }
}

/// A table of its own: varchar UUID ids, a `state` column with its own words, `claim_owner` /
/// `claimed_at` / `next_retry_at` columns.
const MARIADB_TABLE: &str = "
CREATE TABLE outbox_events (
    uuid          VARCHAR(36)  NOT NULL PRIMARY KEY,
    kind          VARCHAR(64)  NOT NULL,
    topic         VARCHAR(64)  NOT NULL,
    body          JSON         NOT NULL,
    state         VARCHAR(16)  NOT NULL DEFAULT 'waiting',
    tries         INT          NOT NULL DEFAULT 0,
    lapses        INT          NOT NULL DEFAULT 0,
    next_retry_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    claim_owner   VARCHAR(255) NULL,
    claim_seq     BIGINT       NOT NULL DEFAULT 0,
    claimed_at    DATETIME(3)  NULL,
    lease_until   DATETIME(3)  NULL,
    made_at       DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    published_as  VARCHAR(64)  NULL,
    problem       TEXT         NULL,
    KEY due (state, next_retry_at)
)";

fn mariadb() -> Layout {
    let rows = "JOIN JSON_TABLE(:ids, '$[*]' COLUMNS (n FOR ORDINALITY, id VARCHAR(36) PATH '$')) AS i ON e.uuid = i.id \
                JOIN JSON_TABLE(:tokens, '$[*]' COLUMNS (n FOR ORDINALITY, seq BIGINT PATH '$')) AS t ON t.n = i.n";
    let fence = "e.claim_seq = t.seq AND e.claim_owner = :claimant AND e.state = 'sending'";
    Layout {
        name: "outbox_events",
        table: MARIADB_TABLE,
        insert: "INSERT INTO outbox_events (uuid, kind, topic, body)
                 SELECT UUID(), 'invoice.paid', 'billing', JSON_OBJECT('n', seq)
                 FROM (SELECT 1 AS seq UNION SELECT 2 UNION SELECT 3 UNION SELECT 4 UNION SELECT 5) s;
                 INSERT INTO outbox_events (uuid, kind, topic, body) VALUES (UUID(), 'invoice.paid', 'blocked', '{}')",
        rows: 5,
        id: "uuid",
        entry: "published_as",
        sent: "sent",
        dead: "gave_up",
        sql: format!(
            r#"claim = """
SELECT uuid AS id FROM outbox_events
WHERE (state = 'waiting' AND next_retry_at <= NOW(3)) OR (state = 'sending' AND lease_until <= NOW(3))
ORDER BY made_at LIMIT :batch_size FOR UPDATE SKIP LOCKED;
UPDATE outbox_events SET lapses = lapses + IF(state = 'sending', 1, 0), state = 'sending',
    claim_owner = :claimant, claim_seq = claim_seq + 1, claimed_at = NOW(3),
    lease_until = NOW(3) + INTERVAL :lease_ms * 1000 MICROSECOND
WHERE uuid IN (SELECT j.id FROM JSON_TABLE(:ids, '$[*]' COLUMNS (id VARCHAR(36) PATH '$')) AS j);
SELECT uuid AS id, claim_seq AS token, uuid AS event_id, kind AS event_type, topic, body AS payload,
       tries AS attempts, lapses AS expired_claims, TIMESTAMPDIFF(MICROSECOND, made_at, NOW(3)) / 1000 AS age_ms
FROM outbox_events WHERE uuid IN (SELECT j.id FROM JSON_TABLE(:ids, '$[*]' COLUMNS (id VARCHAR(36) PATH '$')) AS j)"""
mark_delivered = """UPDATE outbox_events e {rows}
JOIN JSON_TABLE(:entry_ids, '$[*]' COLUMNS (n FOR ORDINALITY, entry VARCHAR(64) PATH '$')) AS x ON x.n = i.n
SET e.state = 'sent', e.published_as = x.entry, e.lease_until = NULL WHERE {fence}"""
retry = "UPDATE outbox_events SET state = 'waiting', tries = tries + 1, problem = :error, lease_until = NULL, next_retry_at = NOW(3) + INTERVAL :delay_ms * 1000 MICROSECOND WHERE uuid = :id AND claim_seq = :token AND claim_owner = :claimant AND state = 'sending'"
dead = "UPDATE outbox_events SET state = 'gave_up', tries = tries + 1, problem = :error, lease_until = NULL WHERE uuid = :id AND claim_seq = :token AND claim_owner = :claimant AND state = 'sending'"
release = "UPDATE outbox_events e {rows} SET e.state = 'waiting', e.lease_until = NULL WHERE {fence}"
renew = "UPDATE outbox_events e {rows} SET e.lease_until = NOW(3) + INTERVAL :lease_ms * 1000 MICROSECOND WHERE {fence}"
"#
        ),
    }
}

async fn a_foreign_table_is_relayed_by_configuration_alone(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    let layout = env.pick(postgres(), mariadb());
    let table = layout.name;
    env.exec(layout.table).await;
    env.exec(layout.insert).await;
    let _: () = env.redis().set(env.stream("blocked"), "a string, not a stream", None, None, false).await.unwrap();
    let config = env.config(&format!(
        "stream = \"{id}:{{topic}}\"\nmax_attempts = 1\nfields = {{ source = \"legacy\", topic_copy = \"{{topic}}\" }}\n\n\
         [relay.sql]\n{sql}",
        id = env.id(),
        sql = layout.sql,
    ));
    let (ok, out) = common::process::run_to_end(&config, &["check"]);
    assert!(ok, "check accepts the foreign statements:\n{out}");

    let _relay = Handoff::run(&config);
    eventually(&format!("{} rows sent and one dead", layout.rows), || async {
        let sent = env.scalar(&format!("SELECT COUNT(*) FROM {table} WHERE state = '{}'", layout.sent)).await;
        let dead = env.scalar(&format!("SELECT COUNT(*) FROM {table} WHERE state = '{}'", layout.dead)).await;
        (sent == layout.rows as i64 && dead == 1).then_some(())
    })
    .await;
    let entries = env.stream_entries(&env.stream("billing")).await;
    assert_eq!(entries.len(), layout.rows);
    let (entry_id, fields) = &entries[0];
    match dialect {
        // The ids each table was filled with: `uid-<md5>` on Postgres, `UUID()` on MariaDB.
        Dialect::Postgres => assert!(fields["event_id"].starts_with("uid-")),
        Dialect::Mariadb => assert_eq!(fields["event_id"].len(), 36, "a UUID id travels as text"),
    }
    assert_eq!(fields["event_type"], "invoice.paid");
    assert_eq!(fields["source"], "legacy");
    assert_eq!(fields["topic_copy"], "billing");
    assert!(fields["payload"].contains("\"n\""));
    let recorded =
        env.text(&format!("SELECT {} FROM {table} WHERE {} = '{}'", layout.entry, layout.id, fields["event_id"])).await;
    assert_eq!(&recorded, entry_id);
    let problem = env.text(&format!("SELECT problem FROM {table} WHERE topic = 'blocked'")).await;
    assert!(problem.contains("WRONGTYPE"), "{problem}");
}

crate::on_both_dialects!(a_foreign_table_is_relayed_by_configuration_alone);
