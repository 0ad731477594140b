//! The default claim and stats statements stay on the partial indexes when the table is mostly
//! delivered history: their plans never scan the table (the cost follows the backlog only).

use crate::common;

use common::TestEnv;
use handoff::sql::params::{Placeholder, rewrite};
use handoff::store::postgres::defaults::default_sql;
use handoff::store::statements::StatementKind;

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

/// On MariaDB every default statement that reaches rows through an `:ids` array reads the ids
/// first and each row by primary key, even on a new, empty table whose statistics invite a
/// scan: in an UPDATE (or a locking read) a scan locks every row it passes, and two relays'
/// settles, renewals and claims then deadlocked until leases lapsed.
#[tokio::test]
async fn mariadb_statements_on_id_arrays_fetch_rows_by_primary_key_on_an_empty_table() {
    use handoff::config::consumer_sql::WorkerStatement;
    use handoff::store::mysql::{defaults, worker_default_sql};
    use mysql_async::prelude::Queryable;

    let env = common::mysql::MyEnv::new().await;
    env.exec("ANALYZE TABLE audit_outbox, consumer_inbox").await;
    let relay = StatementKind::ALL.iter().map(|&k| (k.name().to_owned(), defaults::default_sql(k, "audit_outbox")));
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
