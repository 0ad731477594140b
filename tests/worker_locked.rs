//! Workers with `claim = "locked"` (what `auto`, the default, chooses on Postgres for SQL
//! handlers): a transaction locks the batch, runs its handler statements and marks it PROCESSED
//! before it commits. What it must keep of the leased claim's guarantees, under kills and hangs.

use crate::common;

use common::http::{get, sample};
use common::process::Handoff;
use common::{TestEnv, eventually};

const SEED_HANDLER: &str = "INSERT INTO audit_logs (audit_id, source, action, actor, detail) VALUES (:event_id, :owner, :event_type, :payload.actor, :payload) ON CONFLICT (audit_id) DO NOTHING";

fn config(env: &TestEnv, extra: &str, handler: &[&str]) -> String {
    let sql: Vec<String> = handler.iter().map(|s| format!("{s:?}")).collect();
    format!(
        "{}\n[[worker]]\nname = \"worker\"\nconsumer = \"admin\"\npoll_interval = \"50ms\"\nclaim = \"locked\"\n{extra}\n\
         [[worker.handler]]\nevent_types = [\"*\"]\nsql = [{}]\n",
        env.base_config(),
        sql.join(", ")
    )
}

/// `n` PENDING rows `<prefix>-1` … with payload `{"actor": "admin", "n": i}`.
async fn insert_rows(env: &TestEnv, prefix: &str, n: i64) {
    env.db
        .execute(
            "INSERT INTO consumer_inbox (consumer, event_id, event_type, owner, payload, content_hash, stream, stream_entry_id)
             SELECT 'admin', $1 || '-' || g, 'auth.mfa_policy_changed', 'auth',
                    jsonb_build_object('actor', 'admin', 'n', g), 'hash', 's', g || '-0'
             FROM generate_series(1, $2::bigint) g",
            &[&prefix, &n],
        )
        .await
        .unwrap();
}

/// Inbox rows no transaction holds a lock on (a locked batch's rows are skipped).
async fn unlocked(env: &TestEnv) -> i64 {
    env.scalar_i64("SELECT count(*) FROM (SELECT id FROM consumer_inbox FOR UPDATE SKIP LOCKED) AS free").await
}

/// Rows exactly as the bridge inserted them: pending, never leased, no attempt.
async fn untouched(env: &TestEnv) -> i64 {
    env.scalar_i64(
        "SELECT count(*) FROM consumer_inbox WHERE status = 'PENDING' AND lease_owner IS NULL AND lease_token = 0
           AND attempts = 0 AND expired_leases = 0",
    )
    .await
}

async fn audit_rows(env: &TestEnv) -> i64 {
    env.scalar_i64("SELECT count(*) FROM audit_logs").await
}

async fn await_status(env: &TestEnv, status: &str, n: i64) {
    eventually(&format!("{n} inbox rows {status}"), || async { (env.inbox_count(status).await == n).then_some(()) })
        .await;
}

/// Starts `worker` and waits until its loop claims in locked transactions (after a leased turn).
async fn locked_worker(worker: Handoff) -> Handoff {
    worker.await_log("claiming in locked transactions").await;
    worker
}

#[tokio::test]
async fn two_locked_workers_apply_each_row_once_and_write_it_once() {
    let env = TestEnv::new().await;
    let config = config(&env, "lease = \"30s\"\nbatch_size = 100", &[SEED_HANDLER]);
    let a = locked_worker(Handoff::run(&config)).await;
    let b = locked_worker(Handoff::run(&config)).await;
    for chunk in 0..4 {
        insert_rows(&env, &format!("w{chunk}"), 500).await;
    }
    await_status(&env, "PROCESSED", 2000).await;
    assert_eq!(audit_rows(&env).await, 2000, "every effect once");
    // A locked claim never writes PROCESSING: the token a leased claim bumps stayed where it was.
    assert_eq!(env.scalar_i64("SELECT count(*) FROM consumer_inbox WHERE lease_token <> 0").await, 0);
    let workers = env.scalar_i64("SELECT count(DISTINCT split_part(lease_owner, '#', 1)) FROM consumer_inbox").await;
    assert_eq!(workers, 2, "both workers took part, and each row names its worker");
    drop((a, b));
}

#[tokio::test]
async fn a_worker_killed_mid_transaction_leaves_its_rows_untouched_and_another_applies_them() {
    let env = TestEnv::new().await;
    let config = config(&env, "lease = \"30s\"", &[SEED_HANDLER]);
    let mut victim = locked_worker(Handoff::run_paused(&config, "worker_in_handler")).await;
    insert_rows(&env, "k", 20).await;
    victim.await_paused().await;
    assert_eq!(untouched(&env).await, 20, "a locked turn changes nothing before its commit");
    assert_eq!(unlocked(&env).await, 0, "the open transaction holds the rows");
    victim.kill();
    eventually("the server to roll the killed worker's transaction back", || async {
        (unlocked(&env).await == 20).then_some(())
    })
    .await;
    assert_eq!(untouched(&env).await, 20, "the rows came back exactly as they were");
    assert_eq!(audit_rows(&env).await, 0, "no effect outlived the transaction");

    let _next = Handoff::run(&config);
    await_status(&env, "PROCESSED", 20).await;
    assert_eq!(audit_rows(&env).await, 20);
}

#[tokio::test]
async fn a_hung_worker_loses_its_locks_to_the_server_side_idle_timeout() {
    let env = TestEnv::new().await;
    // The lease is the idle-in-transaction timeout of a locked batch.
    let config = config(&env, "lease = \"2s\"", &[SEED_HANDLER]);
    let hung = locked_worker(Handoff::run_paused(&config, "worker_in_handler")).await;
    insert_rows(&env, "h", 10).await;
    hung.await_paused().await;
    assert_eq!(untouched(&env).await, 10, "a locked turn took the batch");
    // No lease to see in the table, yet the oldest-lease gauge (and its alert) sees the batch.
    let address = hung.telemetry_address().await;
    eventually("the oldest-lease gauge to count the open locked batch", || async {
        let metrics = get(&address, "/metrics").1;
        let age = sample(&metrics, "handoff_worker_oldest_lease_age_seconds{worker=\"worker\"}")?;
        (age > 0.0).then_some(())
    })
    .await;
    // The worker stays parked inside its transaction; the server ends the session after the
    // lease and the rows are free again, untouched.
    eventually("the server to end the idle transaction", || async { (unlocked(&env).await == 10).then_some(()) }).await;
    assert_eq!(untouched(&env).await, 10);
    let _other = Handoff::run(&config);
    await_status(&env, "PROCESSED", 10).await;
    // Woken, the hung worker finds its transaction gone: it commits nothing.
    hung.resume();
    hung.await_log("failed the locked batch").await;
    assert_eq!(audit_rows(&env).await, 10, "each effect once");
}

#[tokio::test]
async fn a_row_that_keeps_killing_a_locked_worker_still_turns_dead() {
    let env = TestEnv::new().await;
    let config = config(&env, "lease = \"2s\"\nmax_expired_leases = 2", &[SEED_HANDLER]);
    // Killed inside a locked transaction: no trace of the claim survives.
    let mut first = locked_worker(Handoff::run_paused(&config, "worker_in_handler")).await;
    insert_rows(&env, "c", 1).await;
    first.await_paused().await;
    first.kill();
    eventually("the rollback", || async { (unlocked(&env).await == 1).then_some(()) }).await;
    assert_eq!(untouched(&env).await, 1);
    // A restarted worker claims leased first: the next kills leave expired leases behind.
    for round in 1..=2 {
        let mut victim = Handoff::run_paused(&config, "worker_in_handler");
        victim.await_paused().await;
        victim.kill();
        eventually(&format!("lease {round} to expire"), || async {
            let live = env.scalar_i64("SELECT count(*) FROM consumer_inbox WHERE lease_expires_at > now()").await;
            (live == 0).then_some(())
        })
        .await;
    }
    let _survivor = Handoff::run(&config);
    await_status(&env, "DEAD", 1).await;
    let row = env.db.query_one("SELECT expired_leases, last_error FROM consumer_inbox", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 2);
    assert!(row.get::<_, String>(1).contains("lease expired 2 times"), "{}", row.get::<_, String>(1));
    assert_eq!(audit_rows(&env).await, 0);
}

#[tokio::test]
async fn rows_at_fault_in_a_locked_batch_go_dead_alone_and_the_rest_commit() {
    let env = TestEnv::new().await;
    // Row 3 makes the second statement divide by zero; row `m-1` has no `actor` to bind.
    let config = config(&env, "lease = \"30s\"", &[SEED_HANDLER, "SELECT 1 / (:payload.n::text::int - 3)"]);
    let _worker = locked_worker(Handoff::run(&config)).await;
    insert_rows(&env, "b", 5).await;
    env.db
        .execute(
            "INSERT INTO consumer_inbox (consumer, event_id, event_type, owner, payload, content_hash, stream, stream_entry_id)
             VALUES ('admin', 'm-1', 'auth.mfa_policy_changed', 'auth', '{\"n\": 1}', 'hash', 's', '9-0')",
            &[],
        )
        .await
        .unwrap();
    await_status(&env, "DEAD", 2).await;
    await_status(&env, "PROCESSED", 4).await;
    assert_eq!(audit_rows(&env).await, 4, "the others' effects committed, the refused rows' did not");
    let dead = env
        .db
        .query("SELECT event_id, attempts, last_error FROM consumer_inbox WHERE status = 'DEAD' ORDER BY event_id", &[])
        .await
        .unwrap();
    assert_eq!(dead[0].get::<_, String>(0), "b-3");
    assert!(dead[0].get::<_, String>(2).contains("division by zero"), "{}", dead[0].get::<_, String>(2));
    assert_eq!(dead[1].get::<_, String>(0), "m-1");
    assert!(dead[1].get::<_, String>(2).contains(":payload.actor"), "{}", dead[1].get::<_, String>(2));
    assert!(dead.iter().all(|r| r.get::<_, i32>(1) == 1), "deterministic refusals: DEAD at once");
}

/// A locked worker claim starts reading the due index a second before the previous claim's first
/// row (rows processed since the last vacuum leave their entries there). A row whose takeover
/// began well before rows the worker already processed, and committed after them, is older than
/// that bound: a claim that reads from the start finds it, and it is applied.
#[tokio::test]
async fn a_row_committed_after_later_rows_were_processed_is_still_applied() {
    let env = TestEnv::new().await;
    // A lease longer than the test: the leased turn a locked worker takes once per lease (which
    // reads the whole index) does not come round to find the row.
    let config = config(&env, "lease = \"10m\"\nbatch_size = 50", &[SEED_HANDLER]);
    let _worker = locked_worker(Handoff::run(&config)).await;
    let (late, late_due) = env
        .late_row(
            "INSERT INTO consumer_inbox (consumer, event_id, event_type, owner, payload, content_hash, stream, stream_entry_id)
             VALUES ('admin', 'late', 'auth.mfa_policy_changed', 'auth', '{\"actor\": \"admin\"}', 'hash', 's', '0-1')
             RETURNING extract(epoch FROM next_retry_at)::float8",
        )
        .await;
    insert_rows(&env, "early", 500).await;
    await_status(&env, "PROCESSED", 500).await;
    let first_early = env.earliest("consumer_inbox", "next_retry_at").await;
    assert!(late_due < first_early - 1.0, "the late row lies before where a bounded claim starts");
    late.batch_execute("COMMIT").await.unwrap();
    await_status(&env, "PROCESSED", 501).await;
    assert_eq!(env.scalar_i64("SELECT count(*) FROM audit_logs WHERE audit_id = 'late'").await, 1);
}
