//! A consumer that already has its own inbox (text ids, its own state words and column names, no
//! `consumer` / `owner` / `stream` columns) and producers that already speak a camelCase
//! envelope adopt handoff by configuration alone: the relay writes that envelope exactly, the
//! bridge takes it over into that table, the worker applies a handler that binds an extra field
//! — each event exactly once, through SIGKILLs of the bridge and of the worker. On Postgres with
//! the shipped example's statements, on MariaDB with its own (the claim and the renewal as MySQL
//! scripts).

use crate::common;

use common::db_env::{DbEnv, Dialect};
use common::process::Handoff;
use common::{TestEnv, eventually};
use handoff::StatementKind;

const ROUNDS: usize = 3;
const PER_ROUND: usize = 300;

/// The consumer's own tables on Postgres (as in docs/reference/sql-contract.md): its inbox and the effect
/// the handler writes. The effect has no `ON CONFLICT`: applying an event twice would fail, and
/// the row would go to `failed`.
const POSTGRES_TABLES: &str = "
CREATE TABLE app_inbox (
    message_id     text PRIMARY KEY,
    kind           text NOT NULL,
    entity_id      text,
    entity_version int,
    body           jsonb NOT NULL,
    trace          jsonb,
    state          text NOT NULL DEFAULT 'new' CHECK (state IN ('new', 'working', 'done', 'failed', 'skipped')),
    tries          int  NOT NULL DEFAULT 0,
    lost_leases    int  NOT NULL DEFAULT 0,
    next_retry_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner    text,
    fence          bigint NOT NULL DEFAULT 0,
    lease_until    timestamptz,
    done_at        timestamptz,
    error          text
);
CREATE TABLE order_versions (
    event_id text PRIMARY KEY,
    order_id text NOT NULL,
    version  int  NOT NULL
);";

/// The same tables on MariaDB (varchar ids, JSON bodies).
const MARIADB_TABLES: &[&str] = &[
    "CREATE TABLE app_inbox (
        message_id     VARCHAR(128) NOT NULL PRIMARY KEY,
        kind           VARCHAR(64)  NOT NULL,
        entity_id      VARCHAR(64)  NULL,
        entity_version INT          NULL,
        body           JSON         NOT NULL,
        trace          JSON         NULL,
        state          VARCHAR(16)  NOT NULL DEFAULT 'new',
        tries          INT          NOT NULL DEFAULT 0,
        lost_leases    INT          NOT NULL DEFAULT 0,
        next_retry_at  DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
        lease_owner    VARCHAR(255) NULL,
        fence          BIGINT       NOT NULL DEFAULT 0,
        lease_until    DATETIME(3)  NULL,
        done_at        DATETIME(3)  NULL,
        error          TEXT         NULL,
        KEY app_inbox_due (state, next_retry_at, message_id)
    ) ENGINE = InnoDB",
    // No ON DUPLICATE KEY: applying an event twice would fail, and the row would go to `failed`.
    "CREATE TABLE order_versions (
        event_id VARCHAR(128) NOT NULL PRIMARY KEY,
        order_id VARCHAR(64)  NOT NULL,
        version  INT          NOT NULL
    ) ENGINE = InnoDB",
];

/// The relay: the reference outbox, whose claim also returns the payload's version, written as
/// a camelCase envelope in a fixed order.
fn relay_config(env: &DbEnv) -> String {
    let claim = match env.dialect() {
        Dialect::Postgres => handoff::postgres_outbox_sql(StatementKind::Claim, "audit_outbox")
            .replace("o.headers, o.attempts", "o.headers, o.payload->>'version' AS aggregate_version, o.attempts"),
        Dialect::Mariadb => handoff::mysql_outbox_sql(StatementKind::Claim, "audit_outbox").replace(
            "payload, headers, attempts",
            "payload, headers, JSON_VALUE(payload, '$.version') AS aggregate_version, attempts",
        ),
    };
    env.config(&format!(
        r#"stream = "{id}:orders"
batch_size = 50

[relay.envelope]
eventId = "{{event_id}}"
eventType = "{{event_type}}"
aggregateId = "{{aggregate_id}}"
aggregateVersion = "{{aggregate_version}}"
schemaVersion = "2"
payload = "{{payload}}"
headers = "{{headers}}"

[relay.sql]
claim = """{claim}"""
"#,
        id = env.id(),
    ))
}

/// The shipped example for an existing consumer table on Postgres
/// (`config/existing-consumer.toml`), its `[[bridge]]` or `[[worker]]` part on this test's
/// servers (`base_config`), stream (prefix `id`) and timings.
fn example_part(base_config: &str, id: &str, part: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/existing-consumer.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let (bridge, worker) = text.split_at(text.find("[[worker]]").unwrap());
    let bridge = &bridge[bridge.find("[[bridge]]").unwrap()..];
    let chosen = if part == "bridge" { bridge } else { worker };
    let tuned = chosen
        .replace(
            r#"streams = [{ key = "orders" }]"#,
            &format!("streams = [{{ key = \"{id}:orders\" }}]\ninstance = \"b1\"\nblock = \"200ms\"\nclaim_idle = \"1s\"\nbatch_size = 40"),
        )
        .replace(r#"poll_interval = "250ms""#, r#"poll_interval = "50ms""#)
        .replace(r#"lease = "30s""#, "lease = \"2s\"\nbatch_size = 30");
    assert_ne!(tuned, chosen, "the example still has the keys this test tunes");
    format!("{base_config}\n{tuned}")
}

/// The consumer's bridge on MariaDB: its insert written in MySQL's SQL.
fn mariadb_bridge(env: &DbEnv) -> String {
    format!(
        r#"{base}
[[bridge]]
name = "orders"
consumer = "orders"
instance = "b1"
streams = [{{ key = "{id}:orders" }}]
block = "200ms"
claim_idle = "1s"
batch_size = 40

[bridge.envelope]
event_id = "eventId"
event_type = "eventType"
aggregate_id = "aggregateId"
aggregate_type = ""
owner = ""

[bridge.sql]
insert = """
INSERT INTO app_inbox (message_id, kind, entity_id, entity_version, body, trace, state)
SELECT :event_id, :event_type, :aggregate_id, :fields.aggregateVersion, :payload, :headers,
       IF(:status = 'IGNORED', 'skipped', 'new') FROM DUAL
WHERE NOT EXISTS (SELECT 1 FROM app_inbox WHERE message_id = :event_id)"""
"#,
        base = env.base_config(),
        id = env.id(),
    )
}

/// `:ids` and `:tokens` zipped by position onto the table's rows.
const ROWS: &str =
    "JOIN JSON_TABLE(:ids, '$[*]' COLUMNS (n FOR ORDINALITY, id VARCHAR(128) PATH '$')) AS i ON w.message_id = i.id
JOIN JSON_TABLE(:tokens, '$[*]' COLUMNS (n FOR ORDINALITY, token BIGINT PATH '$')) AS t ON t.n = i.n";
const FENCE: &str = "w.fence = t.token AND w.lease_owner = :claimant AND w.state = 'working'";
const ONE: &str = "message_id = :id AND fence = :token AND lease_owner = :claimant AND state = 'working'";

/// The consumer's worker on MariaDB: the claim and the renewal as MySQL scripts.
fn mariadb_worker(env: &DbEnv) -> String {
    format!(
        r#"{base}
[[worker]]
name = "orders"
consumer = "orders"
table = "app_inbox"
poll_interval = "50ms"
lease = "2s"
batch_size = 30

[worker.sql]
claim = """
SELECT message_id FROM app_inbox WHERE state = 'working' AND lease_until <= NOW(3)
ORDER BY lease_until LIMIT 1 FOR UPDATE SKIP LOCKED;
SELECT message_id FROM app_inbox WHERE state = 'new' AND next_retry_at <= NOW(3) AND JSON_LENGTH(:ids) = 0
ORDER BY next_retry_at, message_id LIMIT :batch_size FOR UPDATE SKIP LOCKED;
UPDATE app_inbox w JOIN JSON_TABLE(:ids, '$[*]' COLUMNS (id VARCHAR(128) PATH '$')) AS j ON w.message_id = j.id
SET w.lost_leases = w.lost_leases + IF(w.state = 'working', 1, 0), w.state = 'working',
    w.lease_owner = :claimant, w.fence = w.fence + 1, w.lease_until = NOW(3) + INTERVAL :lease_ms * 1000 MICROSECOND
WHERE w.state = 'new' OR (w.state = 'working' AND w.lease_until <= NOW(3));
SELECT message_id AS id, fence AS token, message_id AS event_id, kind AS event_type, entity_id AS aggregate_id,
       CAST(body AS CHAR) AS payload, CAST(trace AS CHAR) AS headers, tries AS attempts,
       lost_leases AS expired_leases, entity_version AS aggregateVersion
FROM app_inbox
WHERE message_id IN (SELECT j.id FROM JSON_TABLE(:ids, '$[*]' COLUMNS (id VARCHAR(128) PATH '$')) AS j)
  AND state = 'working' AND lease_owner = :claimant"""
processed = """UPDATE app_inbox w {ROWS}
SET w.state = 'done', w.done_at = NOW(3), w.lease_until = NULL WHERE {FENCE}"""
retry = "UPDATE app_inbox SET state = 'new', tries = tries + 1, error = :error, next_retry_at = NOW(3) + INTERVAL :delay_ms * 1000 MICROSECOND, lease_until = NULL WHERE {ONE}"
dead = "UPDATE app_inbox SET state = 'failed', tries = tries + 1, error = :error, lease_until = NULL WHERE {ONE}"
renew = """
SELECT w.message_id FROM app_inbox w {ROWS} WHERE {FENCE} FOR UPDATE SKIP LOCKED;
UPDATE app_inbox w JOIN JSON_TABLE(:ids, '$[*]' COLUMNS (id VARCHAR(128) PATH '$')) AS j ON w.message_id = j.id
SET w.lease_until = NOW(3) + INTERVAL :lease_ms * 1000 MICROSECOND"""
release = """UPDATE app_inbox w {ROWS} SET w.state = 'new', w.lease_until = NULL WHERE {FENCE}"""
stats = """
SELECT SUM(state = 'failed') AS dead, SUM(state = 'new') AS pending,
       0 AS oldest_lease_age_seconds, 0 AS oldest_retry_age_seconds FROM app_inbox"""
purge = "DELETE FROM app_inbox WHERE state = 'done' AND done_at < NOW(3) - INTERVAL :age_ms * 1000 MICROSECOND LIMIT :batch_size"

[[worker.handler]]
event_types = ["Order*"]
sql = ["INSERT INTO order_versions (event_id, order_id, version) VALUES (:event_id, :aggregate_id, :fields.aggregateVersion)"]
"#,
        base = env.base_config(),
    )
}

/// `n` orders `ord-<round>-<g>` of aggregate `o-<g % 7>`, each payload carrying its version.
async fn insert_orders(env: &DbEnv, round: usize, n: usize) {
    let values: Vec<String> = (1..=n)
        .map(|g| {
            format!(
                "('ord-{round}-{g}', 'order', 'o-{}', 'OrderPlaced', '{{\"version\": {g}, \"total\": {}}}', \
                 '{{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}}')",
                g % 7,
                g * 10
            )
        })
        .collect();
    env.exec(&format!(
        "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES {}",
        values.join(", ")
    ))
    .await;
}

async fn rows(env: &DbEnv, table: &str) -> i64 {
    env.scalar(&format!("SELECT COUNT(*) FROM {table}")).await
}

/// Waits until `table` holds more than `before` rows.
async fn await_more_rows(env: &DbEnv, table: &str, before: i64, what: &str) {
    eventually(what, || async { (rows(env, table).await > before).then_some(()) }).await;
}

async fn an_existing_inbox_and_envelope_are_adopted_by_configuration_through_kills(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    for table in env.pick(&[POSTGRES_TABLES][..], MARIADB_TABLES) {
        env.exec(table).await;
    }
    let (bridge, worker) = match dialect {
        Dialect::Postgres => {
            (example_part(&env.base_config(), env.id(), "bridge"), example_part(&env.base_config(), env.id(), "worker"))
        }
        Dialect::Mariadb => (mariadb_bridge(&env), mariadb_worker(&env)),
    };
    let relay = relay_config(&env);
    for config in [&relay, &bridge, &worker] {
        let (ok, out) = common::process::run_to_end(config, &["check"]);
        assert!(ok, "check accepts the consumer's own statements:\n{out}");
    }

    let _relay = Handoff::run(&relay);
    let mut bridge_process = Handoff::run(&bridge);
    let mut worker_process = Handoff::run(&worker);
    for round in 0..ROUNDS {
        // Counted before the round's events exist: the worker may apply all of them before the
        // bridge is restarted, and progress is measured from here either way.
        let (taken, applied) = (rows(&env, "app_inbox").await, rows(&env, "order_versions").await);
        insert_orders(&env, round, PER_ROUND).await;
        await_more_rows(&env, "app_inbox", taken, "the bridge to make progress").await;
        bridge_process.kill();
        bridge_process = Handoff::run(&bridge);
        await_more_rows(&env, "order_versions", applied, "the worker to make progress").await;
        worker_process.kill();
        worker_process = Handoff::run(&worker);
    }

    let total = (ROUNDS * PER_ROUND) as i64;
    eventually("every event applied", || async {
        (env.scalar("SELECT COUNT(*) FROM app_inbox WHERE state = 'done'").await == total).then_some(())
    })
    .await;
    assert_eq!(env.scalar("SELECT COUNT(*) FROM order_versions").await, total, "each event applied once");
    assert_eq!(env.scalar("SELECT COUNT(*) FROM app_inbox WHERE state <> 'done'").await, 0);
    assert_eq!(env.scalar("SELECT COUNT(*) FROM consumer_inbox_poison").await, 0, "nothing poisoned");
    let version = env.pick("(o.payload->>'version')::int", "JSON_VALUE(o.payload, '$.version')");
    let wrong = format!(
        "SELECT COUNT(*) FROM order_versions v JOIN audit_outbox o ON o.event_id = v.event_id
         WHERE v.version <> {version} OR v.order_id <> o.aggregate_id"
    );
    assert_eq!(env.scalar(&wrong).await, 0, "the extra field reached the handler");
    let missing = "SELECT COUNT(*) FROM audit_outbox o WHERE NOT EXISTS (SELECT 1 FROM order_versions v WHERE v.event_id = o.event_id)";
    assert_eq!(env.scalar(missing).await, 0, "no committed event was lost");

    // The envelope, exactly: these names, in this order (headers follow the payload).
    use fred::prelude::*;
    let entries: Vec<(String, Vec<(String, String)>)> =
        env.redis().xrange(env.stream("orders"), "-", "+", Some(1)).await.unwrap();
    let names: Vec<&str> = entries[0].1.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["eventId", "eventType", "aggregateId", "aggregateVersion", "schemaVersion", "payload", "headers"]
    );
}

crate::on_both_dialects!(an_existing_inbox_and_envelope_are_adopted_by_configuration_through_kills);

/// An adopted inbox without a content-hash column still tells a replay from a conflict: its
/// `existing` statement is offered the entry's payload and hash, and compares the payload.
#[tokio::test]
async fn an_adopted_inbox_without_a_hash_column_detects_a_replay_with_other_content() {
    let env = TestEnv::new().await;
    env.db.batch_execute(POSTGRES_TABLES).await.unwrap();
    let bridge = example_part(&env.base_config(), &env.id, "bridge");
    let (ok, out) = common::process::run_to_end(&bridge, &["check"]);
    assert!(ok, "{out}");
    let _bridge = Handoff::run(&bridge);
    let entry = |payload: &str| -> Vec<(&str, Vec<u8>)> {
        vec![
            ("eventId", b"ord-x".to_vec()),
            ("eventType", b"OrderPlaced".to_vec()),
            ("aggregateId", b"o-1".to_vec()),
            ("payload", payload.as_bytes().to_vec()),
        ]
    };
    env.xadd_raw("orders", entry(r#"{"total": 10}"#)).await;
    env.xadd_raw("orders", entry(r#"{"total": 10}"#)).await;
    env.xadd_raw("orders", entry(r#"{"total": 99}"#)).await;
    eventually("the conflicting replay to be recorded", || async {
        (env.scalar_i64("SELECT count(*) FROM consumer_inbox_poison").await == 1).then_some(())
    })
    .await;
    let reason: String = env.db.query_one("SELECT reason FROM consumer_inbox_poison", &[]).await.unwrap().get(0);
    assert_eq!(reason, "payload_conflict", "the same payload again is a duplicate, another one a conflict");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM app_inbox").await, 1);
}

/// As a user's database is: only the service's own tables (`app_inbox`, `order_versions`).
/// `handoff migrate` with the shipped example's bridge, then its worker, creates handoff's own
/// bookkeeping beside them and nothing else — no reference inbox, no outbox, no demo table —
/// and `check` then accepts both.
#[tokio::test]
async fn migrate_beside_an_adopted_inbox_creates_only_handoffs_own_tables_and_check_passes() {
    let env = TestEnv::empty().await;
    env.db.batch_execute(POSTGRES_TABLES).await.unwrap();
    for part in ["bridge", "worker"] {
        let config = example_part(&env.base_config(), &env.id, part);
        let (ok, out) = common::process::run_to_end(&config, &["migrate"]);
        assert!(ok, "migrate for the {part}: {out}");
        let (ok, out) = common::process::run_to_end(&config, &["check"]);
        assert!(ok, "check for the {part}: {out}");
    }
    let rows = env
        .db
        .query("SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema()", &[])
        .await
        .unwrap();
    let mut tables: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    tables.sort();
    assert_eq!(
        tables,
        [
            "app_inbox",
            "consumer_inbox_deliveries",
            "consumer_inbox_poison",
            "handoff_pauses",
            "handoff_schema_migrations",
            "handoff_stream_shards",
            "order_versions"
        ]
    );
}
