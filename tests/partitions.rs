//! A time-partitioned outbox (`handoff migrate --partitioned`, `[relay.partitions]`): rows on
//! either side of midnight land in their day's partition and are all delivered; a partition is
//! dropped only once every row in it is delivered, never while one is PENDING or DEAD; rows that
//! arrived before their partition existed move into it; a plain outbox is refused.

use std::time::{Duration, SystemTime};

use crate::common;

use common::{TestEnv, eventually, process};
use handoff::Database;
use handoff::{PartitionedOutbox, Span};

const DAY: Duration = Duration::from_secs(86_400);

/// `[relay.partitions]` for daily partitions, one ahead, a pass every 100 ms.
const PARTITIONS: &str = "[relay.partitions]\nevery = \"1d\"\nahead = 1\ndrop_after = \"1d\"\ninterval = \"100ms\"\n";

/// The day `days` before today (UTC) as a span.
fn day(days: u32) -> Span {
    Span::holding(SystemTime::now() - DAY * days, DAY)
}

/// A schema with the outbox created by `handoff migrate --partitioned` under `config`.
async fn partitioned(config: impl Fn(&TestEnv) -> String) -> TestEnv {
    let env = TestEnv::empty().await;
    let (ok, out) = process::run_to_end(&config(&env), &["migrate", "--partitioned"]);
    assert!(ok, "{out}");
    env
}

fn outbox(env: &TestEnv) -> PartitionedOutbox {
    let db = Database::connect(&env.database_config(), "handoff-test").unwrap();
    PartitionedOutbox::new(&db, "audit_outbox").unwrap()
}

async fn exists(env: &TestEnv, table: &str) -> bool {
    env.db.query_one("SELECT to_regclass($1) IS NOT NULL", &[&table]).await.unwrap().get(0)
}

/// Inserts `n` events `<prefix>-<i>` created at `created_at` (SQL) plus `i` milliseconds times `step`.
async fn insert_at(env: &TestEnv, prefix: &str, created_at: &str, step: i32, n: i32) {
    let sql = format!(
        "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at)
         SELECT $1 || '-' || g, 'user', 'agg-' || g, 'user.changed', jsonb_build_object('n', g),
                {created_at} + g * $2::int * interval '1 millisecond'
         FROM generate_series(0, $3::int - 1) g"
    );
    env.db.execute(&sql, &[&prefix, &step, &n]).await.unwrap();
}

/// Rows per partition, by the partition's name.
async fn placement(env: &TestEnv) -> Vec<(String, i64)> {
    let sql = "SELECT tableoid::regclass::text, count(*) FROM audit_outbox GROUP BY 1 ORDER BY 1";
    env.db.query(sql, &[]).await.unwrap().iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// UTC midnight `days` before today's, as SQL.
fn midnight(days: u32) -> String {
    format!("((date_trunc('day', now() AT TIME ZONE 'UTC') - {days} * interval '1 day') AT TIME ZONE 'UTC')")
}

#[tokio::test]
async fn rows_either_side_of_midnight_are_all_delivered_and_only_fully_delivered_partitions_are_dropped() {
    let env = partitioned(|env| env.config(PARTITIONS)).await;
    let outbox = outbox(&env);
    for days in 2..=5 {
        outbox.create(day(days)).await.unwrap();
    }
    // Both sides of the midnight that starts day D-2: the last microseconds of D-3 and the first of D-2.
    insert_at(&env, "before", &format!("{} - interval '1 microsecond'", midnight(2)), -1, 50).await;
    insert_at(&env, "after", &midnight(2), 1, 50).await;
    // A partition with a DEAD row, one with a PENDING row not due for a century, and rows no
    // partition covers (the default partition's).
    insert_at(&env, "dead", &format!("{} + interval '1 hour'", midnight(4)), 1, 6).await;
    env.db
        .execute("UPDATE audit_outbox SET status = 'DEAD', dead_at = now() WHERE event_id = 'dead-0'", &[])
        .await
        .unwrap();
    insert_at(&env, "waiting", &format!("{} + interval '1 hour'", midnight(5)), 1, 1).await;
    env.db
        .execute(
            "UPDATE audit_outbox SET next_attempt_at = now() + interval '100 years' WHERE event_id LIKE 'waiting-%'",
            &[],
        )
        .await
        .unwrap();
    insert_at(&env, "stray", &midnight(30), 1, 5).await;
    let expected = vec![
        ("audit_outbox_default".to_owned(), 5),
        (day(5).name("audit_outbox"), 1),
        (day(4).name("audit_outbox"), 6),
        (day(3).name("audit_outbox"), 50),
        (day(2).name("audit_outbox"), 50),
    ];
    let mut placed = placement(&env).await;
    placed.sort_by_key(|(name, _)| if name.ends_with("default") { String::new() } else { name.clone() });
    let mut sorted = expected.clone();
    sorted.sort_by_key(|(name, _)| if name.ends_with("default") { String::new() } else { name.clone() });
    assert_eq!(placed, sorted, "each row in the partition of its created_at");

    let relay = process::Handoff::run(&env.config(PARTITIONS));
    env.await_delivered(110).await;
    let mut delivered = env.stream_event_ids(&env.stream("user")).await;
    delivered.sort();
    let mut wanted: Vec<String> = ["before", "after"]
        .iter()
        .flat_map(|p| (0..50).map(move |i| format!("{p}-{i}")))
        .chain((1..6).map(|i| format!("dead-{i}")))
        .chain((0..5).map(|i| format!("stray-{i}")))
        .collect();
    wanted.sort();
    assert_eq!(delivered, wanted, "every due row appended once");
    // Today's partition and tomorrow's exist: created by migrate and kept by the relay.
    for span in [day(0), day(0).next()] {
        assert!(exists(&env, &span.name("audit_outbox")).await, "{}", span.name("audit_outbox"));
    }

    // Delivered just now: past its span's drop_after, but not its rows', so it stays.
    relay.await_log("0 PENDING, 0 IN_FLIGHT, 0 DEAD, 50 delivered within drop_after").await;
    assert!(exists(&env, &day(3).name("audit_outbox")).await && exists(&env, &day(2).name("audit_outbox")).await);

    // A day and more later: every delivered row is past drop_after.
    env.db.execute("UPDATE audit_outbox SET delivered_at = delivered_at - interval '2 days'", &[]).await.unwrap();
    eventually("the fully delivered partitions to be dropped", || async {
        (!exists(&env, &day(3).name("audit_outbox")).await && !exists(&env, &day(2).name("audit_outbox")).await)
            .then_some(())
    })
    .await;
    eventually("the default partition's delivered rows to be deleted", || async {
        (env.scalar_i64("SELECT count(*) FROM audit_outbox_default").await == 0).then_some(())
    })
    .await;
    assert!(exists(&env, &day(4).name("audit_outbox")).await, "a partition holding a DEAD row is kept");
    assert!(exists(&env, &day(5).name("audit_outbox")).await, "a partition holding a PENDING row is kept");
    assert_eq!(env.count("DEAD").await, 1);
    assert_eq!(env.count("PENDING").await, 1);
    drop(relay);
}

#[tokio::test]
async fn rows_inserted_before_their_partition_existed_move_into_it_while_the_relay_delivers_them() {
    let env = partitioned(|env| env.config("")).await;
    insert_at(&env, "early", "now()", 0, 2000).await;
    env.db
        .execute("UPDATE audit_outbox SET status = 'DEAD', dead_at = now() WHERE event_id = 'early-0'", &[])
        .await
        .unwrap();
    let before = env.scalar_i64("SELECT sum(id)::bigint FROM audit_outbox_default").await;
    assert_eq!(env.scalar_i64("SELECT count(*) FROM audit_outbox_default").await, 2000);

    // The relay claims from the default partition while its rows move out of it.
    let _relay = process::Handoff::run(&env.config("batch_size = 50"));
    eventually("the relay to deliver from the default partition", || async {
        (env.count("DELIVERED").await > 0).then_some(())
    })
    .await;
    let moved = outbox(&env).create(day(0)).await.unwrap();
    assert_eq!(moved, Some(2000), "every row of the span moves, whatever its state");
    assert_eq!(outbox(&env).create(day(0)).await.unwrap(), None, "created once");
    // A pass that finds the partition in place takes no lock: a transaction reading the outbox
    // (as every claim does) does not hold it up.
    let (reader, connection) = tokio_postgres::connect(&env.database_url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    reader.batch_execute("BEGIN; LOCK TABLE audit_outbox IN ACCESS SHARE MODE").await.unwrap();
    assert_eq!(outbox(&env).create(day(0)).await.unwrap(), None, "no lock taken for a partition in place");
    reader.batch_execute("ROLLBACK").await.unwrap();

    env.await_delivered(1999).await;
    assert_eq!(placement(&env).await, vec![(day(0).name("audit_outbox"), 2000)]);
    assert_eq!(env.scalar_i64("SELECT sum(id)::bigint FROM audit_outbox").await, before, "ids unchanged");
    assert_eq!(env.count("DEAD").await, 1);
    let ids = env.stream_event_ids(&env.stream("user")).await;
    let unique: std::collections::BTreeSet<_> = ids.iter().collect();
    assert_eq!((ids.len(), unique.len()), (1999, 1999), "each delivered once");
}

#[tokio::test]
async fn a_plain_outbox_is_neither_partitioned_in_place_nor_kept_as_one() {
    let env = TestEnv::new().await;
    let (ok, out) = process::run_to_end(&env.config(""), &["migrate", "--partitioned"]);
    assert!(!ok && out.contains("audit_outbox exists and is not partitioned"), "{out}");
    let (ok, out) = process::run_to_end(&env.config(PARTITIONS), &["check"]);
    assert!(!ok && out.contains("is not partitioned: relay.partitions needs"), "{out}");
    let mut relay = process::Handoff::run(&env.config(PARTITIONS));
    assert!(!relay.await_exit().await.success());
    assert!(relay.logs().contains("is not partitioned"), "{}", relay.logs());
}
