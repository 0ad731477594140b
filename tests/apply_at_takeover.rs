//! Apply at take-over (`[bridge] apply`): the bridge inserts an event and runs its handler in one
//! transaction, so each event's effect is committed exactly once with its inbox row (PROCESSED)
//! — through kills before and after that commit — and a handler refusing a batch's data leaves
//! the batch to the worker, whose savepoints find the row at fault. Batch handlers (`:event_ids`,
//! `:payloads`, … as arrays) in the worker and at take-over.

use crate::common;

use common::http::{get, sample};
use common::process::{Handoff, run_to_end};
use common::{TestEnv, eventually};

/// Writes `applied (id, n)` for a batch, `n` from the payload; a negative `n` breaks its CHECK.
const BATCH_HANDLER: &str = "INSERT INTO applied (id, n) SELECT e.id, (e.p ->> 'n')::int FROM unnest(:event_ids::text[], :payloads::jsonb[]) AS e(id, p) ON CONFLICT (id) DO NOTHING";

fn payload(id: &str, n: i64) -> String {
    format!(r#"{{"auditId":"{id}","n":{n}}}"#)
}

async fn setup(env: &TestEnv) {
    env.db.batch_execute("CREATE TABLE applied (id text PRIMARY KEY, n int NOT NULL CHECK (n >= 0))").await.unwrap();
}

async fn add_events(env: &TestEnv, prefix: &str, n: usize) {
    for i in 1..=n {
        let id = format!("{prefix}-{i}");
        env.xadd_event("user", &id, &payload(&id, i as i64)).await;
    }
}

/// A bridge applying the worker's batch handler at take-over, and that worker, in one process.
fn consumer_config(env: &TestEnv, bridge_extra: &str) -> String {
    let bridge = env.bridge_config("b1", &["user"], &format!("apply = \"worker\"\n{bridge_extra}"));
    format!("{bridge}{}", common::worker_section_with("", BATCH_HANDLER))
}

async fn applied(env: &TestEnv) -> i64 {
    env.scalar_i64("SELECT count(*) FROM applied").await
}

async fn await_acknowledged(env: &TestEnv) {
    eventually("every entry acknowledged", || async { env.group_caught_up("user").await.then_some(()) }).await;
}

fn series(env: &TestEnv, name: &str) -> String {
    format!(r#"{name}{{bridge="bridge",stream="{}"}}"#, env.stream("user"))
}

#[tokio::test]
async fn events_are_applied_in_the_takeover_transaction_and_the_worker_runs_none() {
    let env = TestEnv::new().await;
    setup(&env).await;
    add_events(&env, "a", 40).await;
    let handoff = Handoff::run(&consumer_config(&env, ""));
    await_acknowledged(&env).await;
    assert_eq!(applied(&env).await, 40);
    assert_eq!(env.inbox_count("PROCESSED").await, 40);
    let untouched =
        env.scalar_i64("SELECT count(*) FROM consumer_inbox WHERE processed_at = received_at AND attempts = 0").await;
    assert_eq!(untouched, 40, "stamped PROCESSED by the insert itself (one transaction's now()), never claimed");
    let address = handoff.telemetry_address().await;
    let metrics = get(&address, "/metrics").1;
    assert_eq!(sample(&metrics, &series(&env, "handoff_bridge_applied_total")), Some(40.0), "{metrics}");
    let worker = sample(&metrics, r#"handoff_worker_processed_total{handler="*",worker="worker"}"#);
    assert!(worker.is_none_or(|n| n == 0.0), "the worker applied nothing: {worker:?}");
}

#[tokio::test]
async fn a_crash_before_the_takeover_commits_applies_nothing_and_the_restart_applies_each_event_once() {
    let env = TestEnv::new().await;
    setup(&env).await;
    add_events(&env, "c", 30).await;
    let config = consumer_config(&env, "");
    let mut crashed = Handoff::run_paused(&config, "bridge_before_commit");
    crashed.await_paused().await;
    crashed.kill();
    assert_eq!(applied(&env).await, 0, "no effect committed");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM consumer_inbox").await, 0, "no inbox row committed");

    let _restarted = Handoff::run(&config);
    await_acknowledged(&env).await;
    assert_eq!(applied(&env).await, 30);
    assert_eq!(env.inbox_count("PROCESSED").await, 30);
}

#[tokio::test]
async fn a_crash_after_the_takeover_commits_before_the_ack_applies_no_event_twice() {
    let env = TestEnv::new().await;
    setup(&env).await;
    add_events(&env, "d", 25).await;
    let config = consumer_config(&env, "");
    let mut crashed = Handoff::run_paused(&config, "bridge_before_ack");
    crashed.await_paused().await;
    crashed.kill();
    // The first batch committed, effects and rows together, and was not acknowledged.
    let committed = env.inbox_count("PROCESSED").await;
    assert!(committed >= 1, "committed");
    assert_eq!(applied(&env).await, committed, "each committed row's effect, and only theirs");
    assert!(env.group_pending("user").await.is_some_and(|n| n as i64 >= committed), "not acknowledged");

    let restarted = Handoff::run(&config);
    await_acknowledged(&env).await;
    assert_eq!(applied(&env).await, 25, "one effect per event");
    assert_eq!(env.inbox_count("PROCESSED").await, 25);
    let address = restarted.telemetry_address().await;
    let metrics = eventually("the redelivered entries counted as duplicates", || async {
        let body = get(&address, "/metrics").1;
        (sample(&body, &series(&env, "handoff_bridge_duplicates_total")) == Some(committed as f64)).then_some(body)
    })
    .await;
    assert_eq!(sample(&metrics, &series(&env, "handoff_bridge_applied_total")), Some((25 - committed) as f64));
}

#[tokio::test]
async fn a_row_the_handler_refuses_leaves_its_batch_to_the_worker_which_applies_the_rest_and_kills_it() {
    let env = TestEnv::new().await;
    setup(&env).await;
    for i in 1..=20 {
        let id = format!("r-{i}");
        // The 7th breaks the CHECK: the batch's one statement fails as a whole, at take-over and
        // again in the worker, which then applies row by row.
        env.xadd_event("user", &id, &payload(&id, if i == 7 { -1 } else { i })).await;
    }
    let _handoff = Handoff::run(&consumer_config(&env, ""));
    eventually("the refused row DEAD, the others PROCESSED", || async {
        (env.inbox_count("DEAD").await == 1 && env.inbox_count("PROCESSED").await == 19).then_some(())
    })
    .await;
    await_acknowledged(&env).await;
    assert_eq!(applied(&env).await, 19);
    let dead = env.db.query_one("SELECT event_id, last_error FROM consumer_inbox WHERE status = 'DEAD'", &[]).await;
    let dead = dead.unwrap();
    assert_eq!(dead.get::<_, String>(0), "r-7");
    let error: String = dead.get(1);
    assert!(error.contains("23514") || error.contains("check constraint"), "{error}");
}

#[tokio::test]
async fn a_handler_missing_its_table_leaves_batches_to_the_worker_and_they_apply_once_it_is_back() {
    let env = TestEnv::new().await;
    setup(&env).await;
    let handoff = Handoff::run(&consumer_config(&env, ""));
    // Broken after startup (startup itself refuses a handler statement that does not prepare):
    // no batch can be applied at take-over, and the worker waits the outage out.
    handoff.await_log("worker started").await;
    env.db.batch_execute("ALTER TABLE applied RENAME TO applied_away").await.unwrap();
    add_events(&env, "t", 15).await;
    await_acknowledged(&env).await;
    assert_eq!(env.inbox_count("PENDING").await, 15, "taken over for the worker, nothing lost or poisoned");
    assert!(env.poison().await.is_empty());
    let address = handoff.telemetry_address().await;
    let fallbacks = sample(&get(&address, "/metrics").1, &series(&env, "handoff_bridge_apply_fallbacks_total"));
    assert!(fallbacks.is_some_and(|n| n >= 1.0), "{fallbacks:?}");
    env.db.batch_execute("ALTER TABLE applied_away RENAME TO applied").await.unwrap();
    eventually("the worker to apply every row", || async { (env.inbox_count("PROCESSED").await == 15).then_some(()) })
        .await;
    assert_eq!(applied(&env).await, 15);
}

#[tokio::test]
async fn an_event_whose_per_event_statement_cannot_be_bound_is_left_to_the_worker_and_its_neighbours_apply() {
    let env = TestEnv::new().await;
    setup(&env).await;
    for i in 1..=10 {
        let id = format!("m-{i}");
        let body = if i == 4 { format!(r#"{{"auditId":"{id}"}}"#) } else { payload(&id, i) };
        env.xadd_event("user", &id, &body).await;
    }
    let bridge = env.bridge_config("b1", &["user"], "apply = \"worker\"");
    let per_event = "INSERT INTO applied (id, n) VALUES (:event_id, :payload.n) ON CONFLICT (id) DO NOTHING";
    let handoff = Handoff::run(&format!("{bridge}{}", common::worker_section_with("", per_event)));
    eventually("the unbindable row DEAD, the others PROCESSED", || async {
        (env.inbox_count("DEAD").await == 1 && env.inbox_count("PROCESSED").await == 9).then_some(())
    })
    .await;
    let row = env.db.query_one("SELECT last_error FROM consumer_inbox WHERE status = 'DEAD'", &[]).await.unwrap();
    let error: String = row.get(0);
    assert!(error.contains(":payload.n"), "{error}");
    let metrics = get(&handoff.telemetry_address().await, "/metrics").1;
    assert_eq!(sample(&metrics, &series(&env, "handoff_bridge_applied_total")), Some(9.0), "{metrics}");
}

#[tokio::test]
async fn the_worker_applies_a_batch_handler_with_each_rows_own_values_and_isolates_a_refused_row() {
    let env = TestEnv::new().await;
    setup(&env).await;
    for i in 1..=30 {
        let id = format!("w-{i}");
        env.xadd_event("user", &id, &payload(&id, if i == 11 { -5 } else { i })).await;
    }
    // Apply off: the bridge takes over, the worker applies the batch handler.
    let bridge = env.bridge_config("b1", &["user"], "apply = \"off\"");
    let _handoff = Handoff::run(&format!("{bridge}{}", common::worker_section_with("batch_size = 50", BATCH_HANDLER)));
    eventually("the refused row DEAD, the others PROCESSED", || async {
        (env.inbox_count("DEAD").await == 1 && env.inbox_count("PROCESSED").await == 29).then_some(())
    })
    .await;
    assert_eq!(applied(&env).await, 29);
    let n: i64 = env.scalar_i64("SELECT sum(n) FROM applied").await;
    assert_eq!(n, (1..=30).sum::<i64>() - 11, "each row its own payload's value");
}

#[tokio::test]
async fn the_configuration_refuses_apply_without_a_worker_of_the_same_inbox_naming_the_key() {
    let env = TestEnv::new().await;
    let bridge = env.bridge_config("b1", &["user"], "apply = \"nobody\"");
    let (ok, output) = run_to_end(&bridge, &["check"]);
    assert!(!ok, "{output}");
    assert!(output.contains("bridge[0].apply") && output.contains("nobody"), "{output}");
    let other =
        format!("{bridge}{}", common::worker_section_with("", BATCH_HANDLER)).replace("\"nobody\"", "\"worker\"");
    let other = other.replace("consumer = \"admin\"\npoll_interval", "consumer = \"billing\"\npoll_interval");
    let (ok, output) = run_to_end(&other, &["check"]);
    assert!(!ok && output.contains("same inbox"), "{output}");
}

#[tokio::test]
async fn by_default_a_bridge_applies_the_one_worker_of_its_inbox_where_it_can_and_check_says_why() {
    let env = TestEnv::new().await;
    setup(&env).await;
    let bridge = env.bridge_config("b1", &["user"], "");
    let (ok, output) = run_to_end(&format!("{bridge}{}", common::worker_section_with("", BATCH_HANDLER)), &["check"]);
    assert!(ok, "{output}");
    assert!(output.contains("bridge `bridge`: apply = \"worker\" (auto: the one worker of this inbox"), "{output}");
    // Alone in its file, or beside a worker of another inbox: off, and why.
    let (ok, output) = run_to_end(&bridge, &["check"]);
    assert!(ok && output.contains("apply = off (auto: no worker of this inbox in this file)"), "{output}");
    let http = format!(
        "{bridge}\n[[worker]]\nname = \"hooks\"\nconsumer = \"admin\"\n[[worker.handler]]\nevent_types = [\"*\"]\nhttp = {{ url = \"http://127.0.0.1:9/\" }}\n"
    );
    let (ok, output) = run_to_end(&http, &["check"]);
    assert!(ok && output.contains("apply = off (auto: worker `hooks` has no SQL handler to apply)"), "{output}");
}
