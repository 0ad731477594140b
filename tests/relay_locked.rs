//! `claim = "locked"`: a transaction locks the batch, appends it and settles it before it
//! commits. What it must keep of the leased claim's guarantees, under kills and hangs; the
//! scenarios under `on_both_brokers!` run on Redis and on NATS JetStream.

use crate::common;

use std::collections::HashSet;

use common::brokers::{Broker, Chain, on_both_brokers};
use common::process::Handoff;
use common::{TestEnv, eventually};

on_both_brokers!(
    two_locked_replicas_deliver_each_row_once_and_write_it_once,
    a_relay_killed_mid_transaction_leaves_its_rows_untouched_and_another_delivers_them,
);

/// Rows no transaction holds a lock on (a locked batch's rows are skipped).
async fn unlocked(env: &TestEnv) -> i64 {
    env.scalar_i64("SELECT count(*) FROM (SELECT id FROM audit_outbox FOR UPDATE SKIP LOCKED) AS free").await
}

/// Rows exactly as the owner service inserted them: pending, never claimed, no attempt.
async fn untouched(env: &TestEnv) -> i64 {
    env.scalar_i64(
        "SELECT count(*) FROM audit_outbox
         WHERE status = 'PENDING' AND claimed_by IS NULL AND attempts = 0 AND expired_claims = 0",
    )
    .await
}

/// Starts `relay` and waits until its loops claim in locked transactions (after a leased turn).
async fn locked_relay(relay: Handoff) -> Handoff {
    relay.await_log("claiming in locked transactions").await;
    relay
}

async fn two_locked_replicas_deliver_each_row_once_and_write_it_once(chain: Chain) {
    let env = &chain.env;
    let config = chain.relay_config("claim = \"locked\"\nbatch_size = 100\nlease = \"30s\"", "");
    let a = locked_relay(Handoff::run(&config)).await;
    let b = locked_relay(Handoff::run(&config)).await;
    for chunk in 0..4 {
        env.insert_events(&format!("r{chunk}"), "user", 1000).await;
    }
    env.await_delivered(4000).await;
    let ids = chain.stream_event_ids().await;
    assert_eq!(ids.len(), 4000, "no duplicates without a crash");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 4000);
    let settled = env
        .scalar_i64("SELECT count(*) FROM audit_outbox WHERE stream_entry_id IS NOT NULL AND claimed_by IS NOT NULL")
        .await;
    assert_eq!(settled, 4000, "every row names its entry and its relay");
    // A locked claim never writes IN_FLIGHT: the token a leased claim bumps stayed where it was.
    assert_eq!(env.scalar_i64("SELECT count(*) FROM audit_outbox WHERE claim_token <> 0").await, 0);
    let claimants = env.scalar_i64("SELECT count(DISTINCT split_part(claimed_by, '#', 1)) FROM audit_outbox").await;
    assert_eq!(claimants, 2, "both replicas took part");
    drop((a, b));
}

async fn a_relay_killed_mid_transaction_leaves_its_rows_untouched_and_another_delivers_them(chain: Chain) {
    let env = &chain.env;
    let config = chain.relay_config("claim = \"locked\"\nlease = \"30s\"", "");
    let mut victim = locked_relay(Handoff::run_paused(&config, "after_append")).await;
    env.insert_events("k", "user", 20).await;
    victim.await_paused().await;
    // Appended and still held: the transaction has locked every row and changed none.
    assert_eq!(untouched(env).await, 20);
    assert_eq!(unlocked(env).await, 0, "the open transaction holds the rows");
    victim.kill();
    eventually("the server to roll the killed relay's transaction back", || async {
        (unlocked(env).await == 20).then_some(())
    })
    .await;
    assert_eq!(untouched(env).await, 20, "the rows came back exactly as they were");

    let _next = Handoff::run(&config);
    env.await_delivered(20).await;
    let ids = chain.stream_event_ids().await;
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 20, "every event reached the stream");
    // Appended by the killed relay and again by the next: Redis keeps both without
    // `[relay.dedupe]`; JetStream drops the second within its duplicate window.
    let expected = match chain.broker {
        Broker::Redis(_) | Broker::Kafka => 40,
        Broker::Nats(_) => 20,
    };
    assert_eq!(ids.len(), expected);
}

#[tokio::test]
async fn a_hung_relay_loses_its_locks_to_the_server_side_idle_timeout() {
    let env = TestEnv::new().await;
    // The lease is the idle-in-transaction timeout of a locked batch.
    let config = env.config("claim = \"locked\"\nlease = \"2s\"");
    let hung = locked_relay(Handoff::run_paused(&config, "after_append")).await;
    env.insert_events("h", "user", 10).await;
    hung.await_paused().await;
    assert_eq!(untouched(&env).await, 10, "a locked turn took the batch");
    // The relay stays parked inside its transaction; the server ends the session after the
    // lease and the rows are free again, untouched.
    eventually("the server to end the idle transaction", || async { (unlocked(&env).await == 10).then_some(()) }).await;
    assert_eq!(untouched(&env).await, 10);
    let _other = Handoff::run(&config);
    env.await_delivered(10).await;
    // Woken, the hung relay finds its transaction gone: it commits nothing.
    hung.resume();
    hung.await_log("the locked batch did not commit").await;
    assert_eq!(env.count("DELIVERED").await, 10);
}

#[tokio::test]
async fn a_row_that_keeps_killing_a_locked_relay_still_turns_dead() {
    let env = TestEnv::new().await;
    let config = env.config("claim = \"locked\"\nmax_expired_claims = 2");
    // Killed inside a locked transaction: no trace of the claim survives.
    let mut first = locked_relay(Handoff::run_paused(&config, "before_append")).await;
    env.insert_events("c", "user", 1).await;
    first.await_paused().await;
    first.kill();
    eventually("the rollback", || async { (unlocked(&env).await == 1).then_some(()) }).await;
    assert_eq!(untouched(&env).await, 1);
    // A restarted relay claims leased first: the next kills leave expired leases behind.
    env.kill_claimants_until_dead(&config, 2).await;
}

#[tokio::test]
async fn the_rows_a_killed_leased_relay_held_come_back_one_after_another_not_one_per_lease() {
    let env = TestEnv::new().await;
    env.insert_events("held", "user", 20).await;
    let mut leased = Handoff::run_paused(&env.config("claim = \"leased\"\nlease = \"6s\""), "before_append");
    leased.await_paused().await;
    assert_eq!(env.scalar_i64("SELECT count(*) FROM audit_outbox WHERE status = 'IN_FLIGHT'").await, 20);
    leased.kill();
    // The locked relay reclaims lease-expired rows only in leased turns, one row per turn; a
    // turn that reclaimed is followed by another at once. (Were it one per lease, the 20 rows
    // would take 20 × 6 s, longer than any wait here.)
    let _locked = locked_relay(Handoff::run(&env.config("claim = \"locked\"\nlease = \"6s\""))).await;
    env.await_delivered(20).await;
    let counted = env.scalar_i64("SELECT count(*) FROM audit_outbox WHERE expired_claims = 1").await;
    assert_eq!(counted, 20, "each row's expired lease was counted once");
}

/// A locked claim starts reading the due index a second before the previous claim's first row,
/// not from the start. A row whose transaction began well before the rows the relay delivered
/// but committed after them has an older `next_attempt_at` than the bound (its transaction's
/// start): a claim that reads from the start finds it, and it is delivered.
#[tokio::test]
async fn a_row_committed_after_later_rows_were_delivered_is_still_delivered() {
    let env = TestEnv::new().await;
    // A lease longer than the test: the leased turn a locked relay takes once per lease (which
    // reads the whole index) does not come round to find the row.
    let config = env.config("claim = \"locked\"\nbatch_size = 50\nlease = \"10m\"");
    let _relay = locked_relay(Handoff::run(&config)).await;
    let (late, late_due) = env
        .late_row(
            "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
             VALUES ('late', 'user', 'agg-late', 'user.changed', '{}')
             RETURNING extract(epoch FROM next_attempt_at)::float8",
        )
        .await;
    env.insert_events("early", "user", 500).await;
    env.await_delivered(500).await;
    let first_early = env.earliest("audit_outbox", "next_attempt_at").await;
    assert!(late_due < first_early - 1.0, "the late row lies before where a bounded claim starts");
    late.batch_execute("COMMIT").await.unwrap();
    env.await_delivered(501).await;
    assert!(env.stream_event_ids(&env.stream("user")).await.contains(&"late".to_owned()));
}
