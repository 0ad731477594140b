//! The consumer-adoption test of `consumer_foreign_layout.rs` on MariaDB: a consumer's own inbox
//! (varchar ids, its own state words and column names, no `consumer` / `owner` / `stream`
//! columns) and a camelCase envelope, adopted by configuration alone — the claim and the
//! renewal as MySQL scripts — each event exactly once through SIGKILLs of the bridge and worker.

use crate::common;

use common::eventually;
use common::mysql::MyEnv;
use common::process::Handoff;
use handoff::store::outbox::contract::StatementKind;

const ROUNDS: usize = 3;
const PER_ROUND: usize = 200;

const TABLES: &[&str] = &[
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

fn relay_config(env: &MyEnv) -> String {
    let claim = handoff::store::outbox::mysql_sql::default_sql(StatementKind::Claim, "audit_outbox").replace(
        "payload, headers, attempts",
        "payload, headers, JSON_VALUE(payload, '$.version') AS aggregate_version, attempts",
    );
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
        id = env.id,
    ))
}

fn bridge_config(env: &MyEnv) -> String {
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
        id = env.id,
    )
}

/// `:ids` and `:tokens` zipped by position onto the table's rows.
const ROWS: &str =
    "JOIN JSON_TABLE(:ids, '$[*]' COLUMNS (n FOR ORDINALITY, id VARCHAR(128) PATH '$')) AS i ON w.message_id = i.id
JOIN JSON_TABLE(:tokens, '$[*]' COLUMNS (n FOR ORDINALITY, token BIGINT PATH '$')) AS t ON t.n = i.n";
const FENCE: &str = "w.fence = t.token AND w.lease_owner = :claimant AND w.state = 'working'";
const ONE: &str = "message_id = :id AND fence = :token AND lease_owner = :claimant AND state = 'working'";

fn worker_config(env: &MyEnv) -> String {
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

async fn insert_orders(env: &MyEnv, round: usize, n: usize) {
    let values: Vec<String> = (1..=n)
        .map(|g| {
            format!(
                "('ord-{round}-{g}', 'order', 'o-{}', 'OrderPlaced', JSON_OBJECT('version', {g}, 'total', {}), \
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

#[tokio::test]
async fn an_existing_inbox_and_envelope_are_adopted_by_configuration_through_kills() {
    let env = MyEnv::new().await;
    for table in TABLES {
        env.exec(table).await;
    }
    let (relay, bridge, worker) = (relay_config(&env), bridge_config(&env), worker_config(&env));
    for config in [&relay, &bridge, &worker] {
        let (ok, out) = common::process::run_to_end(config, &["check"]);
        assert!(ok, "check accepts the consumer's own statements:\n{out}");
    }

    let _relay = Handoff::run(&relay);
    let mut bridge_process = Handoff::run(&bridge);
    let mut worker_process = Handoff::run(&worker);
    for round in 0..ROUNDS {
        insert_orders(&env, round, PER_ROUND).await;
        let taken = env.scalar("SELECT COUNT(*) FROM app_inbox").await;
        eventually("the bridge to make progress", || async {
            (env.scalar("SELECT COUNT(*) FROM app_inbox").await > taken).then_some(())
        })
        .await;
        bridge_process.kill();
        bridge_process = Handoff::run(&bridge);
        let applied = env.scalar("SELECT COUNT(*) FROM order_versions").await;
        eventually("the worker to make progress", || async {
            (env.scalar("SELECT COUNT(*) FROM order_versions").await > applied).then_some(())
        })
        .await;
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
    let wrong = "SELECT COUNT(*) FROM order_versions v JOIN audit_outbox o ON o.event_id = v.event_id
                 WHERE v.version <> JSON_VALUE(o.payload, '$.version') OR v.order_id <> o.aggregate_id";
    assert_eq!(env.scalar(wrong).await, 0, "the extra field reached the handler");
    let missing = "SELECT COUNT(*) FROM audit_outbox o WHERE NOT EXISTS (SELECT 1 FROM order_versions v WHERE v.event_id = o.event_id)";
    assert_eq!(env.scalar(missing).await, 0, "no committed event was lost");

    use fred::prelude::*;
    let entries: Vec<(String, Vec<(String, String)>)> =
        env.redis.xrange(format!("{}:orders", env.id), "-", "+", Some(1)).await.unwrap();
    let names: Vec<&str> = entries[0].1.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["eventId", "eventType", "aggregateId", "aggregateVersion", "schemaVersion", "payload", "headers"]
    );
}
