//! The inbox worker: effect and PROCESSED commit together, kills and stalls are fenced, failures
//! retry with backoff or go DEAD at once when retrying cannot help, HTTP handlers. The scenario
//! under `on_both_dialects!` runs on Postgres and on MariaDB.

use crate::common;

use std::io::Write;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use common::db_env::{DbEnv, Dialect};
use common::http::read_request;
use common::process::Handoff;
use common::{TestEnv, eventually};

async fn insert_inbox(env: &TestEnv, event_id: &str, payload: &str) {
    env.db
        .execute(
            "INSERT INTO consumer_inbox (consumer, event_id, event_type, owner, payload, headers, content_hash, stream, stream_entry_id)
             VALUES ('admin', $1, 'auth.mfa_policy_changed', 'auth', $2::text::jsonb,
                     '{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}', 'hash', 's', '0-1')",
            &[&event_id, &payload],
        )
        .await
        .unwrap();
}

async fn insert_many(env: &TestEnv, prefix: &str, n: usize) {
    for i in 1..=n {
        insert_inbox(env, &format!("{prefix}-{i}"), r#"{"actor": "admin", "n": 1}"#).await;
    }
}

async fn audit_rows(env: &TestEnv) -> i64 {
    env.scalar_i64("SELECT count(*) FROM audit_logs").await
}

async fn await_status(env: &TestEnv, status: &str, n: i64) {
    eventually(&format!("{n} inbox rows {status}"), || async { (env.inbox_count(status).await == n).then_some(()) })
        .await;
}

fn worker_config(env: &TestEnv, extra: &str) -> String {
    format!("{}{}", env.base_config(), TestEnv::worker_section(extra))
}

#[tokio::test]
async fn the_seed_handler_writes_each_audit_log_once_with_processed() {
    let env = TestEnv::new().await;
    insert_many(&env, "s", 20).await;
    let _worker = Handoff::run(&worker_config(&env, ""));
    await_status(&env, "PROCESSED", 20).await;
    assert_eq!(audit_rows(&env).await, 20);
    let row = env
        .db
        .query_one("SELECT source, action, actor, detail->>'n' FROM audit_logs WHERE audit_id = 's-1'", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "auth");
    assert_eq!(row.get::<_, String>(1), "auth.mfa_policy_changed");
    assert_eq!(row.get::<_, String>(2), "admin");
    assert_eq!(row.get::<_, String>(3), "1");
}

async fn a_worker_killed_mid_handler_commits_nothing_and_the_row_is_applied_once_later(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    // The row as the bridge inserts it, in SQL both dialects take (a JSON column from text).
    env.exec(
        "INSERT INTO consumer_inbox (consumer, event_id, event_type, owner, payload, headers, content_hash, stream, stream_entry_id)
         VALUES ('admin', 'k-1', 'auth.mfa_policy_changed', 'auth', '{\"actor\": \"admin\"}',
                 '{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}', 'hash', 's', '0-1')",
    )
    .await;
    let config = format!("{}{}", env.base_config(), env.worker_section(""));
    let mut victim = Handoff::run_paused(&config, "worker_in_handler");
    victim.await_paused().await;
    victim.kill();
    let audit_rows = "SELECT COUNT(*) FROM audit_logs";
    assert_eq!(env.scalar(audit_rows).await, 0, "the uncommitted effect died with the process");
    assert_eq!(env.inbox_count("PROCESSING").await, 1);

    let _next = Handoff::run(&config);
    eventually("the row processed", || async { (env.inbox_count("PROCESSED").await == 1).then_some(()) }).await;
    assert_eq!(env.scalar(audit_rows).await, 1);
    assert_eq!(env.scalar("SELECT expired_leases FROM consumer_inbox").await, 1, "the takeover was counted");
}

crate::on_both_dialects!(a_worker_killed_mid_handler_commits_nothing_and_the_row_is_applied_once_later);

#[tokio::test]
async fn effect_and_processed_are_committed_together_or_not_at_all() {
    let env = TestEnv::new().await;
    insert_inbox(&env, "z-1", r#"{"actor": "admin", "n": 5}"#).await;
    // The effect runs first, then a statement that fails: the transaction must take both back.
    let extra = r#"
[[worker.handler]]
event_types = ["auth.*"]
sql = [
  "INSERT INTO audit_logs (audit_id, source, action) VALUES (:event_id, :owner, :event_type)",
  "SELECT 1 / (:payload.n::text::int - 5)",
]
"#;
    let config = format!(
        "{}\n[[worker]]\nname = \"worker\"\nconsumer = \"admin\"\npoll_interval = \"50ms\"\n{extra}",
        env.base_config()
    );
    let _worker = Handoff::run(&config);
    await_status(&env, "DEAD", 1).await;
    assert_eq!(audit_rows(&env).await, 0, "the effect rolled back with the failure");
    let row = env.db.query_one("SELECT attempts, last_error FROM consumer_inbox", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 1, "division by zero is deterministic: DEAD at once, not retried");
    assert!(row.get::<_, String>(1).contains("division by zero"), "{}", row.get::<_, String>(1));
}

#[tokio::test]
async fn one_row_the_handler_refuses_goes_dead_alone_and_the_rest_of_its_batch_commits() {
    let env = TestEnv::new().await;
    for n in 1..=5 {
        insert_inbox(&env, &format!("b-{n}"), &format!(r#"{{"actor": "admin", "n": {n}}}"#)).await;
    }
    // Applied pipelined, the batch fails at b-3; the worker then isolates b-3 with savepoints.
    let extra = r#"
[[worker.handler]]
event_types = ["auth.*"]
sql = [
  "INSERT INTO audit_logs (audit_id, source, action) VALUES (:event_id, :owner, :event_type)",
  "SELECT 1 / (:payload.n::text::int - 3)",
]
"#;
    let config = format!(
        "{}\n[[worker]]\nname = \"worker\"\nconsumer = \"admin\"\npoll_interval = \"50ms\"\n{extra}",
        env.base_config()
    );
    let _worker = Handoff::run(&config);
    await_status(&env, "PROCESSED", 4).await;
    await_status(&env, "DEAD", 1).await;
    let dead: String =
        env.db.query_one("SELECT event_id FROM consumer_inbox WHERE status = 'DEAD'", &[]).await.unwrap().get(0);
    assert_eq!(dead, "b-3");
    assert_eq!(audit_rows(&env).await, 4, "the dead row's effect rolled back, the others' committed");
}

#[tokio::test]
async fn an_expired_lease_under_a_stalled_handler_is_fenced_and_rolled_back() {
    let env = TestEnv::new().await;
    insert_inbox(&env, "l-1", r#"{"actor": "admin"}"#).await;
    let config = worker_config(&env, "");
    let slow = Handoff::run_paused(&config, "worker_in_handler");
    slow.await_paused().await;
    slow.signal("STOP");
    eventually("the stalled worker's lease to expire", || async {
        let live = env.scalar_i64("SELECT count(*) FROM consumer_inbox WHERE lease_expires_at > now()").await;
        (live == 0).then_some(())
    })
    .await;
    let takeover = Handoff::run(&config);
    // The second worker claims the row and applies it; the stalled one, resumed, finds its
    // fence refused.
    eventually("the takeover to claim the row", || async {
        let reclaimed = env.scalar_i64("SELECT count(*) FROM consumer_inbox WHERE expired_leases = 1").await;
        (reclaimed == 1).then_some(())
    })
    .await;
    slow.resume();
    slow.signal("CONT");
    slow.await_log("commit refused by the fence").await;
    await_status(&env, "PROCESSED", 1).await;
    assert_eq!(audit_rows(&env).await, 1, "applied once, by the takeover");
    drop(takeover);
}

#[tokio::test]
async fn a_missing_payload_field_sends_the_row_dead_at_once() {
    let env = TestEnv::new().await;
    insert_inbox(&env, "m-1", r#"{"not_actor": "x"}"#).await;
    insert_inbox(&env, "m-2", r#"{"actor": "admin"}"#).await;
    let _worker = Handoff::run(&worker_config(&env, "max_attempts = 10"));
    await_status(&env, "DEAD", 1).await;
    await_status(&env, "PROCESSED", 1).await;
    let error: String =
        env.db.query_one("SELECT last_error FROM consumer_inbox WHERE status = 'DEAD'", &[]).await.unwrap().get(0);
    assert!(error.contains(":payload.actor"), "{error}");
}

/// A handler failure that is not about the row's data (here a raised `55000`, as a busy
/// resource would) is an outage of the store: the row is handed back untouched — no attempt
/// counted, nothing DEAD — and applied once the failure passes.
#[tokio::test]
async fn a_failure_not_of_the_rows_data_burns_no_attempt_and_the_row_is_applied_when_it_passes() {
    let env = TestEnv::new().await;
    // Fails twice, then works. A sequence counts the calls because it is not rolled back with
    // the failing transaction.
    env.db
        .batch_execute(
            "CREATE SEQUENCE flaky_calls;
             CREATE FUNCTION flaky() RETURNS int LANGUAGE plpgsql AS $$
             BEGIN
               IF nextval('flaky_calls') < 3 THEN
                 RAISE EXCEPTION 'temporarily unavailable' USING ERRCODE = '55000';
               END IF;
               RETURN 1;
             END $$;",
        )
        .await
        .unwrap();
    insert_inbox(&env, "r-1", r#"{"actor": "admin"}"#).await;
    let config = format!(
        "{}\n[[worker]]\nname = \"worker\"\nconsumer = \"admin\"\npoll_interval = \"50ms\"\nmax_attempts = 1\n\
         outage_backoff = {{ initial = \"50ms\", max = \"200ms\", multiplier = 2.0, jitter = 0.0 }}\n\
         [[worker.handler]]\nevent_types = [\"*\"]\nsql = [\"SELECT flaky()\", \"INSERT INTO audit_logs (audit_id, source, action) VALUES (:event_id, :owner, :event_type)\"]\n",
        env.base_config()
    );
    let _worker = Handoff::run(&config);
    await_status(&env, "PROCESSED", 1).await;
    let row = env.db.query_one("SELECT attempts, failed_at IS NULL FROM consumer_inbox", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 0, "outages burn no attempt (max_attempts = 1 would have made it DEAD)");
    assert!(row.get::<_, bool>(1));
    assert_eq!(audit_rows(&env).await, 1);
    assert_eq!(env.scalar_i64("SELECT nextval('flaky_calls')").await, 4, "it failed twice before it worked");
}

/// A handler's table missing a column is a schema outage: rows wait untouched (PENDING, no
/// attempt), the worker says why on /metrics and /readyz, and applies them once it is back.
#[tokio::test]
async fn a_broken_handler_schema_leaves_rows_pending_and_they_apply_once_it_is_fixed() {
    let env = TestEnv::new().await;
    let worker = Handoff::run(&worker_config(&env, ""));
    let address = worker.telemetry_address().await;
    // Broken after startup (startup itself refuses a handler statement that does not prepare).
    worker.await_log("worker started").await;
    env.db.batch_execute("ALTER TABLE audit_logs RENAME COLUMN actor TO actor_moved").await.unwrap();
    insert_many(&env, "b", 5).await;
    let series = r#"handoff_worker_inbox_unavailable_total{kind="schema",worker="worker"}"#;
    eventually("the schema outage counted", || async {
        let metrics = common::http::get(&address, "/metrics").1;
        (common::http::sample(&metrics, series).unwrap_or(0.0) >= 2.0).then_some(())
    })
    .await;
    assert_eq!(common::http::get(&address, "/readyz").0, 503);
    assert_eq!(env.scalar_i64("SELECT count(*) FROM consumer_inbox WHERE status = 'DEAD' OR attempts > 0").await, 0);
    env.db.batch_execute("ALTER TABLE audit_logs RENAME COLUMN actor_moved TO actor").await.unwrap();
    await_status(&env, "PROCESSED", 5).await;
    assert_eq!(audit_rows(&env).await, 5);
    assert_eq!(env.scalar_i64("SELECT max(attempts)::bigint FROM consumer_inbox").await, 0);
}

/// What the receiver saw of one request: (event id, Idempotency-Key, traceparent).
type Request = (String, String, String);

/// A tiny HTTP receiver: records each request's event id, idempotency key and traceparent, and
/// answers per event id: `retry-*` fails once with 503, `reject-*` gets 422, others 200.
fn receiver() -> (String, Arc<Mutex<Vec<Request>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}/events", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<Request>>> = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (header, event) = read_request(&stream);
            let id = event["event_id"].as_str().unwrap_or_default().to_owned();
            let earlier = log.lock().unwrap().iter().filter(|(e, _, _)| *e == id).count();
            log.lock().unwrap().push((id.clone(), header("idempotency-key"), header("traceparent")));
            let status = match () {
                _ if id.starts_with("reject") => "422 Unprocessable Entity",
                _ if id.starts_with("retry") && earlier == 0 => "503 Service Unavailable",
                _ if id.starts_with("nul") && earlier == 0 => "500 Internal Server Error",
                _ => "200 OK",
            };
            // An endpoint's error body may hold anything: a NUL byte cannot be stored as text.
            let body = if status.starts_with("500") { "bad\0body" } else { "ok" };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (address, seen)
}

#[tokio::test]
async fn the_http_handler_posts_a_batch_concurrently_up_to_its_bound() {
    const BOUND: usize = 4;
    let env = TestEnv::new().await;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/events", listener.local_addr().unwrap());
    // Each request is answered only once BOUND requests have arrived together: a handler that
    // posted one row after the other would never see an answer (its calls time out and retry).
    let arrived = Arc::new((Mutex::new(0usize), std::sync::Condvar::new()));
    let most = Arc::new(Mutex::new(0usize));
    let (seen_arrived, seen_most) = (arrived.clone(), most.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (arrived, most) = (seen_arrived.clone(), seen_most.clone());
            std::thread::spawn(move || {
                let _ = read_request(&stream);
                let (count, ready) = &*arrived;
                let mut n = count.lock().unwrap();
                *n += 1;
                let mut m = most.lock().unwrap();
                *m = (*m).max(*n);
                drop(m);
                ready.notify_all();
                while *n < BOUND {
                    n = ready.wait(n).unwrap();
                }
                drop(n);
                let _ = write!(stream, "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
            });
        }
    });
    for i in 0..BOUND {
        insert_inbox(&env, &format!("c-{i}"), r#"{"actor": "admin"}"#).await;
    }
    let config = format!(
        "{}\n[[worker]]\nname = \"worker\"\nconsumer = \"admin\"\npoll_interval = \"50ms\"\n\
         [[worker.handler]]\nevent_types = [\"*\"]\nhttp = {{ url = \"{url}\", timeout = \"60s\", concurrency = {BOUND} }}\n",
        env.base_config()
    );
    let _worker = Handoff::run(&config);
    await_status(&env, "PROCESSED", BOUND as i64).await;
    assert_eq!(*most.lock().unwrap(), BOUND, "the batch's requests were in flight together");
}

#[tokio::test]
async fn the_http_handler_sends_the_idempotency_key_retries_5xx_and_kills_on_4xx() {
    let env = TestEnv::new().await;
    let (url, seen) = receiver();
    insert_inbox(&env, "ok-1", r#"{"actor": "admin"}"#).await;
    insert_inbox(&env, "retry-1", r#"{"actor": "admin"}"#).await;
    insert_inbox(&env, "reject-1", r#"{"actor": "admin"}"#).await;
    let config = format!(
        "{}\n[[worker]]\nname = \"worker\"\nconsumer = \"admin\"\npoll_interval = \"50ms\"\n\
         backoff = {{ initial = \"100ms\", max = \"1s\", multiplier = 2.0, jitter = 0.0 }}\n\
         [[worker.handler]]\nevent_types = [\"*\"]\nhttp = {{ url = \"{url}\", timeout = \"2s\" }}\n",
        env.base_config()
    );
    let _worker = Handoff::run(&config);
    await_status(&env, "PROCESSED", 2).await;
    await_status(&env, "DEAD", 1).await;
    let seen = seen.lock().unwrap().clone();
    assert!(seen.iter().all(|(event, key, _)| event == key), "Idempotency-Key is the event id: {seen:?}");
    assert!(seen.iter().all(|(_, _, trace)| trace.starts_with("00-0af7651916cd43dd")), "traceparent travels: {seen:?}");
    assert_eq!(seen.iter().filter(|(e, _, _)| e == "retry-1").count(), 2, "5xx is retried");
    assert_eq!(seen.iter().filter(|(e, _, _)| e == "reject-1").count(), 1, "422 is not");
    // A 503 says the endpoint is down: no attempt, though it answered the batch's other events.
    let attempts: i32 =
        env.db.query_one("SELECT attempts FROM consumer_inbox WHERE event_id = 'retry-1'", &[]).await.unwrap().get(0);
    assert_eq!(attempts, 0, "a 503 counts no attempt");
    let error: String =
        env.db.query_one("SELECT last_error FROM consumer_inbox WHERE status = 'DEAD'", &[]).await.unwrap().get(0);
    assert!(error.contains("422"), "{error}");
}

/// An HTTP endpoint that drops every connection without an answer while `down` is set, and
/// drops those for event ids starting with `hang` always; it answers 200 otherwise.
fn flaky_endpoint(down: Arc<std::sync::atomic::AtomicBool>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/events", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (_, event) = read_request(&stream);
            let id = event["event_id"].as_str().unwrap_or_default().to_owned();
            if down.load(std::sync::atomic::Ordering::SeqCst) || id.starts_with("hang") {
                continue; // closed without a word
            }
            let _ = write!(stream, "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    url
}

fn http_worker_config(env: &TestEnv, url: &str, max_attempts: u32) -> String {
    format!(
        "{}\n[[worker]]\nname = \"worker\"\nconsumer = \"admin\"\npoll_interval = \"50ms\"\nmax_attempts = {max_attempts}\n\
         backoff = {{ initial = \"50ms\", max = \"100ms\", multiplier = 2.0, jitter = 0.0 }}\n\
         outage_backoff = {{ initial = \"50ms\", max = \"100ms\", multiplier = 2.0, jitter = 0.0 }}\n\
         [[worker.handler]]\nname = \"billing\"\nevent_types = [\"*\"]\nhttp = {{ url = \"{url}\", timeout = \"5s\" }}\n",
        env.base_config()
    )
}

/// An HTTP endpoint that gives no verdict (here it closes every connection unanswered) is an
/// outage, not the row's failure: the row goes back untouched turn after turn, far past
/// `max_attempts`, readiness shows it, and the row is posted once the endpoint is back.
#[tokio::test]
async fn an_http_endpoint_that_is_down_counts_no_attempt_and_turns_nothing_dead() {
    let env = TestEnv::new().await;
    let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let url = flaky_endpoint(down.clone());
    insert_inbox(&env, "down-1", r#"{"actor": "admin"}"#).await;
    let worker = Handoff::run(&http_worker_config(&env, &url, 2));
    let address = worker.telemetry_address().await;
    let series = r#"handoff_worker_endpoint_unavailable_total{handler="billing",worker="worker"}"#;
    // Five turns: with attempts counted, the second would have made the row DEAD.
    eventually("the endpoint's outage met five times", || async {
        let metrics = common::http::get(&address, "/metrics").1;
        (common::http::sample(&metrics, series).unwrap_or(0.0) >= 5.0).then_some(())
    })
    .await;
    assert_eq!(common::http::get(&address, "/readyz").0, 503, "readiness shows the outage");
    let row = env.db.query_one("SELECT status, attempts, last_error FROM consumer_inbox", &[]).await.unwrap();
    assert_ne!(row.get::<_, String>(0), "DEAD");
    assert_eq!(row.get::<_, i32>(1), 0, "no attempt counted");
    assert_eq!(row.get::<_, Option<String>>(2), None, "no failure recorded");
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    await_status(&env, "PROCESSED", 1).await;
    let attempts: i32 = env.db.query_one("SELECT attempts FROM consumer_inbox", &[]).await.unwrap().get(0);
    assert_eq!(attempts, 0);
    eventually("readiness back", || async { (common::http::get(&address, "/readyz").0 == 200).then_some(()) }).await;
}

/// An endpoint that answers the other events of a batch is up: the one event it gives no verdict
/// on (it hangs up on that event alone) counts an attempt, and turns DEAD at `max_attempts`.
#[tokio::test]
async fn a_row_the_endpoint_alone_gives_no_verdict_on_while_it_answers_others_counts_an_attempt() {
    let env = TestEnv::new().await;
    let url = flaky_endpoint(Arc::default());
    insert_inbox(&env, "ok-1", r#"{"actor": "admin"}"#).await;
    insert_inbox(&env, "hang-1", r#"{"actor": "admin"}"#).await;
    let _worker = Handoff::run(&http_worker_config(&env, &url, 1));
    await_status(&env, "PROCESSED", 1).await;
    await_status(&env, "DEAD", 1).await;
    let row =
        env.db.query_one("SELECT event_id, last_error FROM consumer_inbox WHERE status = 'DEAD'", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "hang-1");
    assert!(row.get::<_, String>(1).contains("the endpoint answered other events"), "{:?}", row.get::<_, String>(1));
}

#[tokio::test]
async fn retention_purges_old_processed_rows_and_keeps_dead_and_recent_ones() {
    let env = TestEnv::new().await;
    insert_many(&env, "old", 12).await;
    insert_many(&env, "new", 3).await;
    env.db
        .batch_execute(
            "UPDATE consumer_inbox SET status = 'PROCESSED', processed_at = now() - interval '8 days' WHERE event_id LIKE 'old-%';
             UPDATE consumer_inbox SET status = 'DEAD', dead_at = now() - interval '30 days' WHERE event_id = 'old-1';",
        )
        .await
        .unwrap();
    let extra = "[worker.retention]\nprocessed_after = \"7d\"\nbatch = 5\ninterval = \"100ms\"";
    let worker = Handoff::run(&worker_config(&env, extra));
    eventually("old processed rows purged", || async {
        (env.scalar_i64("SELECT count(*) FROM consumer_inbox WHERE event_id LIKE 'old-%'").await == 1).then_some(())
    })
    .await;
    await_status(&env, "PROCESSED", 3).await;
    assert_eq!(env.inbox_count("DEAD").await, 1);
    worker.await_log("purged processed rows").await;
}

#[tokio::test]
async fn dead_inbox_rows_are_listed_and_re_driven_by_the_operator_commands() {
    let env = TestEnv::new().await;
    insert_inbox(&env, "d-1", r#"{"no_actor": true}"#).await;
    let worker = Handoff::run(&worker_config(&env, ""));
    await_status(&env, "DEAD", 1).await;
    let path = worker.config_path();
    let (ok, out) = common::process::run_with_path(&path, &["dead", "list", "--worker", "worker", "--json"]);
    assert!(ok, "{out}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["count"], 1);
    assert_eq!(listed["rows"][0]["source"], "worker worker");
    // Fix the cause (the payload gains the field), then re-drive: the handler applies it.
    env.db.batch_execute("UPDATE consumer_inbox SET payload = '{\"actor\": \"admin\"}'").await.unwrap();
    let (ok, out) = common::process::run_with_path(&path, &["dead", "retry", "--worker", "worker"]);
    assert!(ok && out.contains("re-driven: 1 row(s)"), "{out}");
    await_status(&env, "PROCESSED", 1).await;
    let redrives: i32 = env.db.query_one("SELECT redrives FROM consumer_inbox", &[]).await.unwrap().get(0);
    assert_eq!(redrives, 1);
    assert_eq!(audit_rows(&env).await, 1);
}

/// An error body with a NUL byte is stored escaped, so the failure is recorded and the row is
/// retried (before, recording it failed and the row waited for its lease to lapse).
#[tokio::test]
async fn an_http_error_body_with_a_nul_byte_is_recorded_and_the_row_retried() {
    let env = TestEnv::new().await;
    let (url, seen) = receiver();
    insert_inbox(&env, "nul-1", r#"{"actor": "admin"}"#).await;
    let config = format!(
        "{}\n[[worker]]\nname = \"worker\"\nconsumer = \"admin\"\npoll_interval = \"50ms\"\nlease = \"1m\"\n\
         backoff = {{ initial = \"100ms\", max = \"1s\", multiplier = 2.0, jitter = 0.0 }}\n\
         [[worker.handler]]\nevent_types = [\"*\"]\nhttp = {{ url = \"{url}\", timeout = \"2s\" }}\n",
        env.base_config()
    );
    let _worker = Handoff::run(&config);
    await_status(&env, "PROCESSED", 1).await;
    assert_eq!(seen.lock().unwrap().len(), 2, "posted, refused with 500, posted again");
    let row = env.db.query_one("SELECT attempts, expired_leases FROM consumer_inbox", &[]).await.unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, i32>(1)), (1, 0), "one failure recorded, no lease lapsed");
}

/// A foreign key whose parent row has not arrived yet (events of two aggregates applied out of
/// order) is retried with backoff, not DEAD at once; once the parent is there the row applies.
#[tokio::test]
async fn a_foreign_key_violation_is_retried_and_applies_once_its_parent_arrives() {
    let env = TestEnv::new().await;
    env.db
        .batch_execute(
            "CREATE TABLE parents (id text PRIMARY KEY);
             CREATE TABLE children (id text PRIMARY KEY, parent text NOT NULL REFERENCES parents (id));",
        )
        .await
        .unwrap();
    insert_inbox(&env, "child-1", r#"{"parent": "p-1"}"#).await;
    let config = format!(
        "{}\n[[worker]]\nname = \"worker\"\nconsumer = \"admin\"\npoll_interval = \"50ms\"\nmax_attempts = 20\n\
         backoff = {{ initial = \"100ms\", max = \"500ms\", multiplier = 2.0, jitter = 0.0 }}\n\
         [[worker.handler]]\nname = \"children\"\nevent_types = [\"*\"]\n\
         sql = [\"INSERT INTO children (id, parent) VALUES (:event_id, :payload.parent)\"]\n",
        env.base_config()
    );
    let worker = Handoff::run(&config);
    let error = eventually("the violation to be recorded as a retry", || async {
        let row = env.db.query_one("SELECT status, attempts, last_error FROM consumer_inbox", &[]).await.unwrap();
        let (status, attempts): (String, i32) = (row.get(0), row.get(1));
        (status == "PENDING" && attempts >= 1).then(|| row.get::<_, String>(2))
    })
    .await;
    assert!(error.contains("23503") || error.contains("foreign key"), "{error}");
    env.db.execute("INSERT INTO parents (id) VALUES ('p-1')", &[]).await.unwrap();
    await_status(&env, "PROCESSED", 1).await;
    assert_eq!(env.scalar_i64("SELECT count(*) FROM children").await, 1);
    let address = worker.telemetry_address().await;
    let metrics = common::http::get(&address, "/metrics").1;
    let series = r#"handoff_worker_processed_total{handler="children",worker="worker"}"#;
    assert_eq!(common::http::sample(&metrics, series), Some(1.0), "labelled by handler: {metrics}");
}

/// Producers choose event types, and one writing ids into them must not grow a metric series per
/// event: 2,000 distinct types no handler serves settle, and `/metrics` grows by a fixed bound.
#[tokio::test]
async fn two_thousand_distinct_unhandled_event_types_add_no_series_per_type() {
    let env = TestEnv::new().await;
    insert_inbox(&env, "warm-1", r#"{"actor": "admin"}"#).await;
    let worker = Handoff::run(&worker_config(&env, ""));
    let address = worker.telemetry_address().await;
    await_status(&env, "PROCESSED", 1).await;
    let series = |metrics: &str| metrics.lines().filter(|l| !l.starts_with('#')).count();
    let before = series(&common::http::get(&address, "/metrics").1);
    env.db
        .execute(
            "INSERT INTO consumer_inbox (consumer, event_id, event_type, owner, payload, content_hash, stream, stream_entry_id)
             SELECT 'admin', 'odd-' || g, 'type.' || g, 'auth', '{}', 'hash', 's', '0-1' FROM generate_series(1, 2000) g",
            &[],
        )
        .await
        .unwrap();
    // The reference handler serves every type: the other worker config serves none of these.
    drop(worker);
    let config = worker_config(&env, "").replace("event_types = [\"*\"]", "event_types = [\"auth.*\"]");
    let worker = Handoff::run(&config);
    let address = worker.telemetry_address().await;
    await_status(&env, "DEAD", 2000).await;
    let after = series(&common::http::get(&address, "/metrics").1);
    assert!(after <= before + 20, "series grew from {before} to {after}");
}
