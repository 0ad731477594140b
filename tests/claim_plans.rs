//! The default claim and stats statements stay on the partial indexes when the table is mostly
//! delivered history: their plans never scan the table (the cost follows the backlog only).

use crate::common;

use common::TestEnv;
use handoff::LockedSql;
use handoff::SettleMode;
use handoff::StatementKind;
use handoff::postgres_outbox_sql as default_sql;
use handoff::{Placeholder, rewrite_placeholders as rewrite};

async fn plan(env: &TestEnv, kind: StatementKind) -> String {
    let named = rewrite(&default_sql(kind, "audit_outbox"), Placeholder::Numbered).unwrap();
    let name = format!("p_{}", kind.name());
    env.db.batch_execute(&format!("PREPARE {name} AS {}", named.sql)).await.unwrap();
    let values: Vec<&str> = named
        .names
        .iter()
        .map(|n| match n.as_str() {
            "claimant" => "'claimant'",
            "batch_size" => "500",
            _ => "30000",
        })
        .collect();
    let args = if values.is_empty() { String::new() } else { format!("({})", values.join(", ")) };
    let rows = env.db.query(&format!("EXPLAIN EXECUTE {name}{args}"), &[]).await.unwrap();
    rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn claim_and_stats_read_only_the_partial_indexes_on_a_mostly_delivered_table() {
    let env = TestEnv::new().await;
    env.insert_events("h", "user", 100_000).await;
    env.db
        .batch_execute(
            "UPDATE audit_outbox SET status = 'DELIVERED', delivered_at = now() WHERE id % 100 <> 0;
             UPDATE audit_outbox SET status = 'DEAD', dead_at = now() WHERE id % 1000 = 0;
             ANALYZE audit_outbox;",
        )
        .await
        .unwrap();
    let claim = plan(&env, StatementKind::Claim).await;
    assert!(!claim.contains("Seq Scan"), "{claim}");
    assert!(claim.contains("audit_outbox_due") && claim.contains("audit_outbox_in_flight"), "{claim}");
    let stats = plan(&env, StatementKind::Stats).await;
    assert!(!stats.contains("Seq Scan"), "{stats}");
    assert!(stats.contains("audit_outbox_dead"), "{stats}");
}

/// Pages a locked claim of 50 rows reads (index and heap, shared buffers hit or read), run with
/// `from` as the lower bound on `next_attempt_at` (seconds since the epoch), and the rows it
/// took; rolled back.
async fn locked_claim_reads(env: &TestEnv, from: f64) -> (i64, i64) {
    let lock = LockedSql::new("audit_outbox", SettleMode::MarkDelivered, false).lock;
    env.db.batch_execute("BEGIN").await.unwrap();
    let explain = format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}", lock.replace("$1", "50").replace("$2", "$1"));
    let plan: serde_json::Value = env.db.query_one(&explain, &[&from]).await.unwrap().get(0);
    env.db.batch_execute("ROLLBACK").await.unwrap();
    let top = &plan[0]["Plan"];
    let blocks = top["Shared Hit Blocks"].as_i64().unwrap() + top["Shared Read Blocks"].as_i64().unwrap();
    (blocks, top["Actual Rows"].as_i64().unwrap())
}

/// Rows the relay delivered leave their entries at the start of the due index until a vacuum
/// removes them. The locked claim starts where the previous claim's first row was (less a
/// second), so it does not read them again on every claim; one that reads from the start, as it
/// does at least once a second to find rows that committed late, does.
#[tokio::test]
async fn a_locked_claim_that_starts_after_the_delivered_rows_does_not_read_their_entries() {
    let env = TestEnv::new().await;
    env.db
        .batch_execute(
            "ALTER TABLE audit_outbox SET (autovacuum_enabled = false);
             INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, next_attempt_at)
             SELECT 'old-' || g, 'user', 'a', 'user.changed', '{}', now() - interval '1 hour'
             FROM generate_series(1, 100000) g;
             UPDATE audit_outbox SET status = 'DELIVERED', delivered_at = now();",
        )
        .await
        .unwrap();
    env.insert_events("new", "user", 500).await;
    let first_due: f64 = env
        .db
        .query_one(
            "SELECT extract(epoch FROM min(next_attempt_at))::float8 FROM audit_outbox WHERE status = 'PENDING'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // The first claim from the start also marks the entries it finds dead; the second is what
    // every later claim from the start pays.
    locked_claim_reads(&env, f64::NEG_INFINITY).await;
    let (from_start, taken) = locked_claim_reads(&env, f64::NEG_INFINITY).await;
    assert_eq!(taken, 50);
    let (bounded, taken) = locked_claim_reads(&env, first_due - 1.0).await;
    assert_eq!(taken, 50, "the bounded claim takes the same rows");
    assert!(
        bounded * 3 < from_start,
        "a claim from the start reads {from_start} pages, one after the delivered rows {bounded}"
    );
}

/// On MariaDB every default statement that reaches rows through an `:ids` array reads the ids
/// first and each row by primary key, even on a new, empty table whose statistics invite a
/// scan: in an UPDATE (or a locking read) a scan locks every row it passes, and two relays'
/// settles, renewals and claims then deadlocked until leases lapsed.
#[tokio::test]
async fn mariadb_statements_on_id_arrays_fetch_rows_by_primary_key_on_an_empty_table() {
    use handoff::WorkerStatement;
    use handoff::mysql_outbox_sql;
    use handoff::mysql_worker_sql as worker_default_sql;
    use mysql_async::prelude::Queryable;

    let env = common::mysql::MyEnv::new().await;
    env.exec("ANALYZE TABLE audit_outbox, consumer_inbox").await;
    let relay = StatementKind::ALL.iter().map(|&k| (k.name().to_owned(), mysql_outbox_sql(k, "audit_outbox")));
    let worker = WorkerStatement::ALL.iter().map(|&s| (s.name().to_owned(), worker_default_sql(s, "consumer_inbox")));
    let mut checked = 0;
    let mut conn = env.db.get_conn().await.unwrap();
    for (name, script) in relay.chain(worker) {
        for part in script.split(';').filter(|p| p.contains("JSON_TABLE")) {
            let locking = !part.trim_start().starts_with("SELECT") || part.contains("FOR UPDATE");
            if !locking {
                continue;
            }
            let named = rewrite(part, Placeholder::Positional).unwrap();
            let mut sql = named.sql.clone();
            for n in &named.names {
                let value = match n.as_str() {
                    "ids" | "tokens" => "'[1, 2]'",
                    "entry_ids" => "'[\"1-0\", \"2-0\"]'",
                    "streams" => "'[\"s\", \"s\"]'",
                    "claimant" | "consumer" | "error" => "'x'",
                    _ => "1000",
                };
                sql = sql.replacen('?', value, 1);
            }
            let plan: Vec<mysql_async::Row> = conn.query(format!("EXPLAIN {sql}")).await.unwrap();
            let text = |row: &mysql_async::Row, column: &str| {
                row.get_opt::<Option<String>, _>(column).and_then(Result::ok).flatten().unwrap_or_default()
            };
            let tables: Vec<(String, String, String)> =
                plan.iter().map(|r| (text(r, "table"), text(r, "type"), text(r, "key"))).collect();
            let row_table = tables.iter().find(|(table, ..)| table == "o" || table == "w");
            assert!(
                matches!(row_table, Some((_, access, key)) if access == "eq_ref" && key == "PRIMARY"),
                "{name}: the table's rows are not fetched by primary key: {tables:?}\n{part}"
            );
            checked += 1;
        }
    }
    // The relay's claim, mark_delivered, delete, release, renew, redrive; the worker's claim,
    // processed, renew (both parts), release.
    assert_eq!(checked, 11, "statements checked");
}

/// On an outbox partitioned by day, the claims, the locked settle and stats read no partition
/// of delivered history: each partition's partial indexes, or its primary key. With 100,000
/// rows a day. At 20,000 a day and claims of 500 rows the planner reads the history partitions
/// whole for the leased claim's take instead (cheaper there than 500 probes into each): a
/// small day's history costs less than a batch's probes, so the rule holds where it matters.
#[tokio::test]
async fn on_a_partitioned_outbox_no_statement_scans_a_partition_of_delivered_history() {
    use handoff::Database;
    use handoff::{OutboxLayout, migrate_postgres_with};
    use handoff::{PartitionedOutbox, Span};
    use std::time::{Duration, SystemTime};

    let env = TestEnv::empty().await;
    let pool = handoff::postgres_pool(&env.database_config(), "handoff-test").unwrap();
    migrate_postgres_with(&pool, OutboxLayout::Partitioned).await.unwrap();
    let outbox = PartitionedOutbox::new(&Database::Postgres(pool), "audit_outbox").unwrap();
    let day = Duration::from_secs(86_400);
    let history: Vec<String> =
        (1..=3).map(|d| Span::holding(SystemTime::now() - day * d, day).name("audit_outbox")).collect();
    for d in 0..=3 {
        outbox.create(Span::holding(SystemTime::now() - day * d, day)).await.unwrap();
    }
    env.db
        .batch_execute(
            "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, status, delivered_at)
             SELECT 'h-' || g, 'user', 'a', 'user.changed', '{}', now() - (1 + g % 3) * interval '1 day', 'DELIVERED', now()
             FROM generate_series(1, 300000) g;
             INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
             SELECT 'p-' || g, 'user', 'a', 'user.changed', '{}' FROM generate_series(1, 600) g;
             UPDATE audit_outbox SET status = 'DEAD', dead_at = now() WHERE event_id LIKE 'h-%' AND id % 1000 = 0;
             ANALYZE audit_outbox;",
        )
        .await
        .unwrap();
    // The relay's lock on a partitioned outbox, and its settle through the outbox (the relay
    // settles in each row's partition; through the outbox is what a settle by id alone costs).
    let locked = LockedSql::new("audit_outbox", SettleMode::MarkDelivered, true);
    let delivered = handoff::delivered_sql("audit_outbox", SettleMode::MarkDelivered);
    let picked = "(SELECT array_agg(id) FROM (SELECT id FROM audit_outbox WHERE status = 'PENDING' LIMIT 500) p)";
    let statements = [
        ("claim", plan(&env, StatementKind::Claim).await),
        ("stats", plan(&env, StatementKind::Stats).await),
        ("lock", explain(&env, &locked.lock.replace("$1", "500").replace("$2", "0")).await),
        (
            "locked delivered",
            explain(
                &env,
                &delivered
                    .replace("$4::text[]", &format!("array_fill('s'::text, ARRAY[cardinality({picked})])"))
                    .replace("$3::text[]", &format!("array_fill('1-0'::text, ARRAY[cardinality({picked})])"))
                    .replace("$2::bigint[]", picked)
                    .replace("$1", "'c'"),
            )
            .await,
        ),
    ];
    for (name, plan) in statements {
        for partition in &history {
            assert!(!plan.contains(&format!("Seq Scan on {partition} ")), "{name} scans {partition}:\n{plan}");
        }
        assert!(plan.contains(&history[0]), "{name}: the plan covers the partitions\n{plan}");
    }
}

/// The plan of `sql` (run and rolled back).
async fn explain(env: &TestEnv, sql: &str) -> String {
    env.db.batch_execute("BEGIN").await.unwrap();
    let rows = env.db.query(&format!("EXPLAIN (ANALYZE, COSTS OFF) {sql}"), &[]).await.unwrap();
    env.db.batch_execute("ROLLBACK").await.unwrap();
    rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>().join("\n")
}
