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
