//! Silent network failures: a path that stops carrying bytes without a RST or a FIN (a
//! partition, a lost NAT entry, a proxy that lost its upstream), then heals for new connections
//! only. Each loop notices within its own timeouts, readiness says so, the rows count no
//! attempt, and the frozen process delivers again by itself once the path heals.

use crate::common;

use common::db_env::{DbEnv, Dialect};
use common::http::get;
use common::process::Handoff;
use common::proxy::Proxy;
use common::{TestEnv, eventually};

/// `config` with `from` replaced by `to`, which must be there.
fn replaced(config: &str, from: &str, to: &str) -> String {
    assert!(config.contains(from), "the test's config has `{from}`: {config}");
    config.replace(from, to)
}

/// Short database timeouts, so a frozen path is noticed within a test's wait.
fn fast(config: &str) -> String {
    replaced(config, "pool_size = 4", "pool_size = 4\nconnect_timeout = \"1s\"\nreply_timeout = \"2s\"")
}

fn port_of(url: &str) -> u16 {
    let rest = url.rsplit_once(':').map(|(_, rest)| rest).unwrap_or_default();
    rest.split('/').next().and_then(|p| p.parse().ok()).expect("a URL with a port")
}

async fn await_ready(address: &str, ready: bool) -> String {
    eventually(&format!("/readyz to answer {}", if ready { 200 } else { 503 }), || async {
        let (status, body) = get(address, "/readyz");
        ((status == 200) == ready).then_some(body)
    })
    .await
}

async fn assert_no_attempt_counted(env: &TestEnv) {
    assert_eq!(env.count("DEAD").await, 0);
    assert_eq!(env.scalar_i64("SELECT coalesce(max(attempts), 0)::int8 FROM audit_outbox").await, 0);
}

/// The relay's Redis path freezes with rows waiting, then heals: readiness fails meanwhile,
/// and every row is delivered after the heal through new connections (the Redis client's
/// frozen connection is dropped, not waited on for ever).
#[tokio::test]
async fn a_relay_whose_redis_path_freezes_delivers_again_after_the_heal() {
    let env = TestEnv::new().await;
    let proxy = Proxy::start(port_of(&env.redis_url)).await;
    let config = replaced(&env.config(""), &env.redis_url, &format!("redis://127.0.0.1:{}", proxy.port));
    let relay = Handoff::run(&config);
    let address = relay.telemetry_address().await;
    env.insert_events("before", "user", 100).await;
    env.await_delivered(100).await;
    await_ready(&address, true).await;

    proxy.freeze();
    env.insert_events("during", "user", 200).await;
    let body = await_ready(&address, false).await;
    assert!(body.contains("redis unreachable"), "{body}");
    assert_eq!(get(&address, "/healthz").0, 200, "waiting out an outage is alive");
    assert_eq!(env.count("DELIVERED").await, 100, "nothing is counted delivered while frozen");

    proxy.heal();
    env.await_delivered(300).await;
    await_ready(&address, true).await;
    assert_no_attempt_counted(&env).await;
    let ids = env.stream_event_ids(&env.stream("user")).await;
    assert!((1..=200).all(|i| ids.contains(&format!("during-{i}"))), "every row reached the stream");
}

/// A relay's database path freezes while it holds a locked batch (appended, not yet settled):
/// its settle gets no reply and fails within `database.reply_timeout`; the server ends the dead
/// session within the lease, so a replica takes the rows over and delivers them; after the heal
/// the frozen relay delivers new rows by itself.
#[tokio::test]
async fn a_relay_whose_database_path_freezes_holding_a_batch_leaves_it_to_a_replica_and_recovers() {
    let env = TestEnv::new().await;
    let proxy = Proxy::start(port_of(&env.database_url)).await;
    let proxied =
        env.database_url.replacen(&format!(":{}/", port_of(&env.database_url)), &format!(":{}/", proxy.port), 1);
    // The lease is the held batch's idle-in-transaction timeout; long enough that the batch
    // inserted after the first (leased) turn is claimed by a locked turn.
    let config = env.config("claim = \"locked\"\nlease = \"10s\"");
    let frozen_config = fast(&replaced(&config, &env.database_url, &proxied));
    let frozen = Handoff::run_paused(&frozen_config, "after_append");
    frozen.await_log("claiming in locked transactions").await;
    env.insert_events("held", "user", 20).await;
    frozen.await_paused().await;
    let address = frozen.telemetry_address().await;
    assert_eq!(env.count("DELIVERED").await, 0);

    proxy.freeze();
    frozen.resume();
    // Its settle is never answered: the connection is given up after reply_timeout.
    await_ready(&address, false).await;
    let replica = Handoff::run(&config);
    env.await_delivered(20).await;
    assert_no_attempt_counted(&env).await;

    proxy.heal();
    drop(replica);
    env.insert_events("after", "user", 30).await;
    env.await_delivered(50).await;
    await_ready(&address, true).await;
    assert_eq!(get(&address, "/healthz").0, 200);
    assert_no_attempt_counted(&env).await;
}

/// The Redis client's own connection (probes, consumer groups, trimming) through a frozen
/// path: a PING fails within the command timeout, and once the path heals the client answers
/// again by itself — the frozen connection is given up, not waited on for ever.
#[tokio::test]
async fn the_redis_client_gives_up_a_frozen_connection_and_answers_after_the_heal() {
    use handoff::EventStream;
    let proxy = Proxy::start(port_of(&common::base_redis_url())).await;
    let toml = format!("[redis]\nurl = \"redis://127.0.0.1:{}\"\ncommand_timeout = \"1s\"\n", proxy.port);
    let config = handoff::load_str(&format!("[database]\nurl = \"postgres://x@localhost/db\"\n{toml}")).unwrap();
    let (stream, _) = handoff::RedisStream::connect(&config.redis).await.unwrap();
    stream.ping().await.expect("answers before the freeze");
    proxy.freeze();
    assert!(stream.ping().await.is_err(), "a frozen path gives no answer within the command timeout");
    proxy.heal();
    eventually("the client to answer again through a new connection", || async { stream.ping().await.ok() }).await;
}

/// A bridge's Redis path freezes while it waits in a blocking read, with entries arriving
/// meanwhile: its reads fail within block + command_timeout, readiness says so, and after the
/// heal every entry is taken in and acknowledged (nothing waits on the frozen connection).
/// A reply cut after its first bytes: the first statement's rows reach the client, then the
/// path freezes while the next statement of the same request runs. The byte-level watch is
/// satisfied by those first bytes; the connection must still fail within its reply timeout,
/// waiting for the rest of the reply (its ReadyForQuery) no longer than that, and be replaced.
/// Plain (`sslmode=disable`): the socket follows the messages; under TLS (`scripts/services`
/// Postgres has it on) the session above it does.
async fn a_postgres_reply_cut_after_its_first_bytes_fails_the_statement_instead_of_waiting(sslmode: &str) {
    let env = TestEnv::empty().await;
    let port = port_of(&env.database_url);
    let proxy = Proxy::start(port).await;
    let url = replaced(&env.database_url, &format!(":{port}/"), &format!(":{}/", proxy.port));
    let url = format!("{url}&sslmode={sslmode}");
    let toml = format!("[database]\nurl = \"{url}\"\nconnect_timeout = \"1s\"\nreply_timeout = \"2s\"\n");
    let pool = handoff::postgres_pool(&handoff::load_str(&toml).unwrap().database, "handoff-test").unwrap();
    let client = pool.get().await.unwrap();
    // 256 KiB of rows overflow the server's send buffer, so they are sent before the sleep
    // (which the session's statement_timeout, the reply timeout, ends: its error is never seen).
    let request =
        tokio::spawn(async move { client.simple_query("SELECT repeat('x', 262144); SELECT pg_sleep(30)").await.err() });
    let sleeping = format!(
        "SELECT 1 FROM pg_stat_activity WHERE application_name = 'handoff-{}' AND wait_event = 'PgSleep'",
        env.id
    );
    eventually("the server to run the request's second statement", || async {
        (!env.db.query(&sleeping, &[]).await.unwrap().is_empty()).then_some(())
    })
    .await;
    proxy.freeze();
    eventually("the cut request to fail", || async { request.is_finished().then_some(()) }).await;
    // The watch failed the connection (its own error is logged by the connection's task); the
    // request learns that its connection closed.
    let error = request.await.unwrap().expect("the request fails: its reply never ends");
    assert!(error.is_closed(), "{error}");
    proxy.heal();
    let fresh = pool.get().await.unwrap();
    fresh.simple_query("SELECT 1").await.expect("a new connection once the path heals");
}

#[tokio::test]
async fn a_postgres_reply_cut_after_its_first_bytes_fails_the_statement_instead_of_waiting_plain() {
    a_postgres_reply_cut_after_its_first_bytes_fails_the_statement_instead_of_waiting("disable").await;
}

#[tokio::test]
async fn a_postgres_reply_cut_after_its_first_bytes_fails_the_statement_instead_of_waiting_tls() {
    a_postgres_reply_cut_after_its_first_bytes_fails_the_statement_instead_of_waiting("require").await;
}

#[tokio::test]
async fn a_bridge_whose_redis_path_freezes_takes_in_again_after_the_heal() {
    let env = TestEnv::new().await;
    let proxy = Proxy::start(port_of(&env.redis_url)).await;
    // The test's own appends and checks go straight to Redis (keys under its prefix).
    let stream = "user";
    let proxied = format!("redis://127.0.0.1:{}", proxy.port);
    let config = replaced(&env.bridge_config("b1", &[stream], ""), &env.redis_url, &proxied);
    for i in 1..=10 {
        let id = format!("before-{i}");
        env.xadd_event(stream, &id, &format!(r#"{{"auditId":"{id}","actor":"admin"}}"#)).await;
    }
    let bridge = Handoff::run(&config);
    let address = bridge.telemetry_address().await;
    eventually("10 inbox rows", || async { (env.inbox_count("PENDING").await == 10).then_some(()) }).await;
    await_ready(&address, true).await;

    proxy.freeze();
    for i in 1..=10 {
        let id = format!("during-{i}");
        env.xadd_event(stream, &id, &format!(r#"{{"auditId":"{id}","actor":"admin"}}"#)).await;
    }
    let body = await_ready(&address, false).await;
    assert!(body.contains("redis unreachable"), "{body}");
    assert_eq!(get(&address, "/healthz").0, 200, "waiting out an outage is alive");

    proxy.heal();
    eventually("20 inbox rows", || async { (env.inbox_count("PENDING").await == 20).then_some(()) }).await;
    eventually("every entry acknowledged", || async { env.group_caught_up(stream).await.then_some(()) }).await;
    await_ready(&address, true).await;
}

/// A relay's MariaDB path freezes with rows waiting, then heals: the statements left
/// unanswered fail within `database.reply_timeout` (the driver has no deadline of its own; the
/// pool's watched path closes the connection), readiness says so, nothing turns DEAD, and
/// every row is delivered after the heal.
#[tokio::test]
async fn a_relay_whose_mariadb_path_freezes_delivers_again_after_the_heal() {
    let env = DbEnv::new(Dialect::Mariadb).await;
    let url = env.database_url().to_owned();
    let proxy = Proxy::start(port_of(&url)).await;
    let proxied = url.replacen(&format!(":{}/", port_of(&url)), &format!(":{}/", proxy.port), 1);
    let config = fast(&replaced(&env.config(""), &url, &proxied));
    let relay = Handoff::run(&config);
    let address = relay.telemetry_address().await;
    env.insert_events("before", "user", 50).await;
    env.await_delivered(50).await;

    proxy.freeze();
    env.insert_events("during", "user", 50).await;
    let body = await_ready(&address, false).await;
    assert!(body.contains("database"), "{body}");
    assert_eq!(get(&address, "/healthz").0, 200, "waiting out an outage is alive");

    proxy.heal();
    env.await_delivered(100).await;
    await_ready(&address, true).await;
    assert_eq!(env.count("DEAD").await, 0);
}

/// A worker's database path freezes inside its handler transaction (effect written, PROCESSED
/// not yet): the statement left unanswered fails within `database.reply_timeout` instead of
/// waiting for ever, readiness says so; the server ends the cut-off session within twice that
/// (so its row locks do not outlive it), and after the heal the event is applied exactly once.
async fn a_worker_whose_path_freezes_inside_its_transaction_applies_the_event_once_after_the_heal(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    env.exec(
        "INSERT INTO consumer_inbox (consumer, event_id, event_type, owner, payload, headers, content_hash, stream, stream_entry_id)
         VALUES ('admin', 'f-1', 'auth.mfa_policy_changed', 'auth', '{\"actor\": \"admin\"}', '{}', 'hash', 's', '0-1')",
    )
    .await;
    let url = env.database_url().to_owned();
    let proxy = Proxy::start(port_of(&url)).await;
    let proxied = url.replacen(&format!(":{}/", port_of(&url)), &format!(":{}/", proxy.port), 1);
    let config = fast(&replaced(&format!("{}{}", env.base_config(), env.worker_section("")), &url, &proxied));
    let worker = Handoff::run_paused(&config, "worker_in_handler");
    worker.await_paused().await;
    let address = worker.telemetry_address().await;
    proxy.freeze();
    worker.resume();
    await_ready(&address, false).await;
    assert_eq!(env.inbox_count("PROCESSED").await, 0);

    proxy.heal();
    eventually("the event applied", || async { (env.inbox_count("PROCESSED").await == 1).then_some(()) }).await;
    assert_eq!(env.scalar("SELECT COUNT(*) FROM audit_logs").await, 1);
    assert_eq!(env.inbox_count("DEAD").await, 0);
    await_ready(&address, true).await;
}

crate::on_both_dialects!(a_worker_whose_path_freezes_inside_its_transaction_applies_the_event_once_after_the_heal);

/// A relay's NATS path freezes with rows waiting, then heals for new connections: publishes
/// fail within the timeout, readiness says so, no attempt is counted, and every row is
/// published after the heal (the client's pings notice the dead connection and it reconnects).
#[tokio::test]
async fn a_relay_whose_nats_path_freezes_delivers_again_after_the_heal() {
    let chain = common::brokers::Chain::nats_via_proxy().await;
    let env = &chain.env;
    let relay = Handoff::run(&chain.relay_config("", ""));
    let address = relay.telemetry_address().await;
    env.insert_events("before", "user", 20).await;
    env.await_delivered(20).await;

    chain.proxy().freeze();
    env.insert_events("during", "user", 20).await;
    let body = await_ready(&address, false).await;
    assert!(body.contains("nats unreachable"), "{body}");
    assert_eq!(get(&address, "/healthz").0, 200, "waiting out an outage is alive");

    chain.proxy().heal();
    env.await_delivered(40).await;
    await_ready(&address, true).await;
    assert_no_attempt_counted(env).await;
    let ids = chain.stream_event_ids().await;
    assert!((1..=20).all(|i| ids.contains(&format!("during-{i}"))), "every row reached the stream");
}

/// A bridge's NATS path freezes with messages arriving: readiness fails while frozen, and after
/// the heal every message is taken in once and acknowledged.
#[tokio::test]
async fn a_bridge_whose_nats_path_freezes_takes_in_again_after_the_heal() {
    let chain = common::brokers::Chain::nats_via_proxy().await;
    chain.publish("before", 10, &[]).await;
    let bridge = Handoff::run(&chain.bridge_config("b1", "", ""));
    let address = bridge.telemetry_address().await;
    eventually("10 taken in", || async { (chain.taken_in().await == 10).then_some(()) }).await;

    chain.proxy().freeze();
    chain.publish("during", 10, &[]).await;
    let body = await_ready(&address, false).await;
    assert!(body.contains("nats unreachable"), "{body}");

    chain.proxy().heal();
    eventually("20 taken in", || async { (chain.taken_in().await == 20).then_some(()) }).await;
    chain.await_acknowledged().await;
    chain.assert_taken_in_once(20).await;
    await_ready(&address, true).await;
}
