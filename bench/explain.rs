//! `handoff-bench --explain`: the plans of the relay's default statements on a mostly
//! delivered outbox, plain and partitioned by day, written to docs/dev/claim-plans.md. Each runs
//! with EXPLAIN ANALYZE inside a transaction that is rolled back.

use std::fmt::Write as _;
use std::time::SystemTime;

use handoff::Database;
use handoff::OutboxLayout;
use handoff::SettleMode;
use handoff::StatementKind;
use handoff::postgres_outbox_sql as default_sql;
use handoff::{LockedSql, delivered_sql};
use handoff::{PartitionedOutbox, Span};
use tokio_postgres::NoTls;

const DAY: std::time::Duration = std::time::Duration::from_secs(86_400);

/// A Postgres error with the server's message (its Display says only "db error").
fn pg(what: &str) -> impl Fn(tokio_postgres::Error) -> anyhow::Error + '_ {
    move |e| anyhow::anyhow!("{what}: {}", e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_owned()))
}

/// One statement's plan on one layout.
struct Plan {
    statement: &'static str,
    text: String,
    millis: f64,
}

/// Builds a schema of `layout` holding `rows` rows (99% DELIVERED over the last seven days, 0.1%
/// DEAD, the rest PENDING and created now) and explains the statements on it.
async fn plans(base_url: &str, layout: OutboxLayout, rows: usize) -> anyhow::Result<Vec<Plan>> {
    let schema = format!("explain_{}_{}", std::process::id(), layout == OutboxLayout::Partitioned);
    let (admin, conn) = tokio_postgres::connect(base_url, NoTls).await?;
    tokio::spawn(conn);
    admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")).await?;
    let sep = if base_url.contains('?') { '&' } else { '?' };
    let url = format!("{base_url}{sep}options=-csearch_path%3D{schema}");
    let (db, conn) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(conn);
    let config = handoff::load_str(&format!("[database]\nurl = \"{url}\"\n"))?;
    let database = Database::connect(&config.database, "handoff-explain")?;
    handoff::migrate(&database, layout, &handoff::Part::ALL.into_iter().collect()).await?;
    if let Some(outbox) =
        PartitionedOutbox::new(&database, "audit_outbox").filter(|_| layout == OutboxLayout::Partitioned)
    {
        // Seven days of history, today and two days ahead, as `[relay.partitions]` keeps them.
        for days in -7i32..=2 {
            let at = if days < 0 {
                SystemTime::now() - DAY * days.unsigned_abs()
            } else {
                SystemTime::now() + DAY * days as u32
            };
            outbox.create(Span::holding(at, DAY)).await?;
        }
    }
    db.batch_execute(&format!(
        "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, status, delivered_at, stream_entry_id)
         SELECT 'e-' || g, 'user', 'u-' || g, 'user.changed', jsonb_build_object('n', g),
                CASE WHEN g % 100 = 0 THEN now() ELSE now() - (1 + g % 7) * interval '1 day' + interval '1 hour' END,
                CASE WHEN g % 100 = 0 THEN 'PENDING' ELSE 'DELIVERED' END,
                CASE WHEN g % 100 = 0 THEN NULL ELSE now() END, '0-1'
         FROM generate_series(1, {rows}) g;
         UPDATE audit_outbox SET status = 'DEAD', dead_at = now() WHERE id % 1000 = 0 AND status = 'DELIVERED';"
    ))
    .await
    .map_err(pg("filling the outbox"))?;
    db.batch_execute("VACUUM ANALYZE audit_outbox").await.map_err(pg("vacuum"))?;
    let partitioned = layout == OutboxLayout::Partitioned;
    let locked = LockedSql::new("audit_outbox", SettleMode::MarkDelivered, partitioned);
    // The relay settles a partitioned outbox's rows in their partition (all of today's here).
    let target =
        if partitioned { Span::holding(SystemTime::now(), DAY).name("audit_outbox") } else { "audit_outbox".into() };
    let named =
        |sql: String| sql.replace(":batch_size", "500").replace(":claimant", "'explain'").replace(":lease_ms", "30000");
    let picked = "(SELECT array_agg(id) FROM (SELECT id FROM audit_outbox WHERE status = 'PENDING' ORDER BY next_attempt_at, id LIMIT 500) p)";
    let statements = [
        (
            "lock (claim = \"locked\", what \"auto\" picks on Postgres; batch 500)",
            locked.lock.replace("$1", "500").replace("$2", "0"),
        ),
        ("locked mark delivered (500 rows)", locked_delivered(&target, picked)),
        ("claim (claim = \"leased\"; batch 500)", named(default_sql(StatementKind::Claim, "audit_outbox"))),
        ("stats", default_sql(StatementKind::Stats, "audit_outbox")),
    ];
    let mut plans = Vec::new();
    for (statement, sql) in statements {
        db.batch_execute("BEGIN").await?;
        let rows =
            db.query(&format!("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}"), &[]).await.map_err(pg(statement))?;
        db.batch_execute("ROLLBACK").await?;
        let lines: Vec<String> = rows.iter().map(|r| r.get::<_, String>(0)).collect();
        let millis = lines
            .iter()
            .find_map(|l| l.strip_prefix("Execution Time: ")?.strip_suffix(" ms")?.parse().ok())
            .unwrap_or(0.0);
        plans.push(Plan { statement, text: lines.join("\n"), millis });
    }
    admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await?;
    Ok(plans)
}

/// The locked settle on `target` with the first 500 due rows as its ids.
fn locked_delivered(target: &str, picked: &str) -> String {
    delivered_sql(target, SettleMode::MarkDelivered)
        .replace("$4::text[]", &format!("array_fill('audit:user'::text, ARRAY[cardinality({picked})])"))
        .replace("$3::text[]", &format!("array_fill('1-0'::text, ARRAY[cardinality({picked})])"))
        .replace("$2::bigint[]", picked)
        .replace("$1", "'explain'")
}

/// Writes docs/dev/claim-plans.md.
pub async fn write(base_url: &str, rows: usize) -> anyhow::Result<()> {
    let plain = plans(base_url, OutboxLayout::Plain, rows).await?;
    let partitioned = plans(base_url, OutboxLayout::Partitioned, rows).await?;
    let (admin, conn) = tokio_postgres::connect(base_url, NoTls).await?;
    tokio::spawn(conn);
    let version: String = admin.query_one("SELECT version()", &[]).await?.get(0);
    let version = version.split(',').next().unwrap_or_default().to_owned();
    let mut doc = String::new();
    writeln!(doc, "# Claim, settle and stats plans on a mostly delivered outbox\n")?;
    writeln!(
        doc,
        "Generated by `scripts/explain` (`handoff-bench --explain --explain-rows {rows}`) on {version}: {rows} rows, 99% \
DELIVERED over the last seven days, 0.1% DEAD, the rest PENDING and created now, after VACUUM ANALYZE; \
each statement under EXPLAIN ANALYZE in a transaction that is rolled back. Once on the plain outbox, \
once on the outbox partitioned by day (`handoff migrate --partitioned`: seven days of history, today, \
two days ahead and the default partition, as `[relay.partitions]` keeps them).\n"
    )?;
    writeln!(
        doc,
        "No plan reads delivered rows: the claims and stats read only the partial indexes \
(`audit_outbox_due`, `audit_outbox_in_flight`, `audit_outbox_dead`, on each partition), and the \
settle finds its rows by primary key. On the partitioned outbox the lock also returns each row's \
partition and the relay settles the rows in their partition (all in today's here); the leased \
claim's take, by id through the outbox, probes every partition's primary key for each row (the \
partition key is `created_at`): cheap probes of empty ranges, but one per partition. Stats read today's partition whole: every row \
in it is PENDING and counts.\n"
    )?;
    writeln!(doc, "| statement | plain (ms) | partitioned (ms) |\n|---|---:|---:|")?;
    for (a, b) in plain.iter().zip(&partitioned) {
        writeln!(doc, "| {} | {:.2} | {:.2} |", a.statement, a.millis, b.millis)?;
    }
    for (title, plans) in [("Plain outbox", &plain), ("Partitioned outbox", &partitioned)] {
        writeln!(doc, "\n## {title}")?;
        for plan in plans.iter() {
            writeln!(doc, "\n### {}\n\n```\n{}\n```", plan.statement, plan.text)?;
        }
    }
    std::fs::write("docs/dev/claim-plans.md", doc)?;
    eprintln!("wrote docs/dev/claim-plans.md");
    Ok(())
}
