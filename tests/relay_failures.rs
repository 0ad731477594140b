//! Rows that fail for reasons of their own back off, retry and end DEAD with their error;
//! rows that can never become an entry go DEAD at once; shutdown leaves nothing claimed. The
//! scenarios under `on_both_dialects!` run on Postgres and on MariaDB.

use crate::common;

use common::db_env::{DbEnv, Dialect};
use common::process::Handoff;
use common::{TestEnv, eventually};
use fred::prelude::*;

async fn a_row_the_stream_rejects_backs_off_retries_and_turns_dead(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    // The key for aggregate type `bad` holds a string, so XADD answers WRONGTYPE for those rows.
    let _: () = env.redis().set(env.stream("bad"), "not a stream", None, None, false).await.unwrap();
    env.insert_events("bad", "bad", 1).await;
    env.insert_events("good", "user", 10).await;
    let config = env
        .config("max_attempts = 3\n[relay.backoff]\ninitial = \"200ms\"\nmax = \"1s\"\nmultiplier = 2.0\njitter = 0.0");
    let mut relay = Handoff::run(&config);
    env.await_delivered(10).await;

    // After the first failure the row waits out its backoff by the database clock.
    let waited = env.pick("created_at + interval '150 milliseconds'", "created_at + INTERVAL 150000 MICROSECOND");
    let retry = format!(
        "SELECT attempts, CASE WHEN next_attempt_at > {waited} THEN 1 ELSE 0 END FROM audit_outbox
         WHERE event_id = 'bad-1'"
    );
    let (attempts, waits) = eventually("the first retry to be scheduled", || async {
        let row = env.text_rows(&retry).await.remove(0);
        let attempts: i32 = row[0].as_deref().unwrap().parse().unwrap();
        (attempts >= 1).then(|| (attempts, row[1].as_deref() == Some("1")))
    })
    .await;
    assert!(attempts < 3 && waits, "a failed row is retried later, not at once");

    eventually("the rejected row to turn DEAD", || async { (env.count("DEAD").await == 1).then_some(()) }).await;
    let row = env.text_rows("SELECT attempts, last_error, status FROM audit_outbox WHERE event_id = 'bad-1'").await;
    let (attempts, error) = (row[0][0].as_deref().unwrap(), row[0][1].clone().unwrap_or_default());
    assert_eq!(attempts, "3");
    assert!(error.contains("WRONGTYPE"), "{error}");
    // A relay whose rows went DEAD still drains and exits cleanly.
    relay.signal("TERM");
    assert!(relay.await_exit().await.success());
}

#[tokio::test]
async fn a_row_that_cannot_become_an_entry_turns_dead_at_once() {
    let env = TestEnv::new().await;
    // The stream key template needs a column that is empty for this row.
    env.insert_events("ok", "user", 3).await;
    env.db
        .execute(
            "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
             VALUES ('no-route', '', 'x', 'user.changed', '{}')",
            &[],
        )
        .await
        .unwrap();
    let _relay = Handoff::run(&env.config("max_attempts = 10"));
    env.await_delivered(3).await;
    eventually("the unroutable row to turn DEAD", || async { (env.count("DEAD").await == 1).then_some(()) }).await;
    let row =
        env.db.query_one("SELECT attempts, last_error FROM audit_outbox WHERE status = 'DEAD'", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 1, "judged once, not retried ten times");
    assert!(row.get::<_, String>(1).contains("aggregate_type"));
}

async fn sigterm_with_a_batch_in_flight_exits_cleanly_and_leaves_nothing_claimed(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    env.insert_events("t", "user", 40).await;
    // The append never completes (parked), so only the drain deadline can end the batch.
    let mut relay = Handoff::run_paused(&env.config(env.parking_loops()), "before_append");
    relay.await_paused().await;
    assert_eq!(env.count("IN_FLIGHT").await, 40);
    let asked = std::time::Instant::now();
    relay.signal("TERM");
    let status = relay.await_exit().await;
    assert!(status.success(), "exit status {status:?}\n{}", relay.logs());
    assert!(
        asked.elapsed() <= common::process::grace() + std::time::Duration::from_secs(2),
        "bounded by the grace period"
    );
    assert_eq!(env.count("IN_FLIGHT").await, 0, "in-flight rows were released");
    assert_eq!(env.count("PENDING").await, 40);
    assert_eq!(env.scalar("SELECT COALESCE(MAX(attempts), 0) FROM audit_outbox").await, 0);
}

crate::on_both_dialects!(
    a_row_the_stream_rejects_backs_off_retries_and_turns_dead,
    sigterm_with_a_batch_in_flight_exits_cleanly_and_leaves_nothing_claimed,
);

#[tokio::test]
async fn sigterm_while_idle_exits_at_once_with_success() {
    let env = TestEnv::new().await;
    let mut relay = Handoff::run(&env.config(""));
    relay.await_log("relay started").await;
    relay.signal("TERM");
    let status = relay.await_exit().await;
    assert!(status.success());
    assert!(relay.logs().contains("drained; exiting"));
}
