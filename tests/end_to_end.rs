//! The seed's scenario end to end: an owner inserts outbox rows; relay → stream → bridge →
//! inbox → worker → audit_logs holds exactly one row per event, while the relay and the bridge
//! are killed and restarted along the way. On Postgres and on MariaDB.

use crate::common;

use common::db_env::{DbEnv, Dialect};
use common::eventually;
use common::process::Handoff;

const ROUNDS: usize = 4;
const PER_ROUND: usize = 500;

async fn every_committed_event_becomes_exactly_one_audit_log_through_kills(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    let relay_config = env.config("batch_size = 100");
    let bridge_config = env.bridge_config(
        "b1",
        &["user"],
        "batch_size = 50\n[bridge.validate]\nevent_types = [\"user.*\"]\npayload_id_field = \"auditId\"",
    );
    let worker_config = format!("{}{}", env.base_config(), env.worker_section("batch_size = 100"));
    let _worker = Handoff::run(&worker_config);
    let mut bridge = Handoff::run(&bridge_config);
    let mut relay = Handoff::run(&relay_config);

    for round in 0..ROUNDS {
        env.insert_events(&format!("r{round}"), "user", PER_ROUND).await;
        let floor = (round * PER_ROUND + PER_ROUND / 5) as i64;
        eventually("the relay to make progress", || async { (env.count("DELIVERED").await >= floor).then_some(()) })
            .await;
        relay.kill();
        relay = Handoff::run(&relay_config);
        let taken = env.scalar("SELECT COUNT(*) FROM consumer_inbox").await;
        eventually("the bridge to make progress", || async {
            (env.scalar("SELECT COUNT(*) FROM consumer_inbox").await > taken).then_some(())
        })
        .await;
        bridge.kill();
        bridge = Handoff::run(&bridge_config);
    }

    let total = (ROUNDS * PER_ROUND) as i64;
    eventually("every event in audit_logs", || async {
        (env.scalar("SELECT COUNT(*) FROM audit_logs").await == total).then_some(())
    })
    .await;
    // A relay killed between XADD and settle leaves its rows in flight until their lease lapses;
    // the chain may finish from the entries it appended before the outbox is settled.
    eventually("every outbox row settled", || async { (env.count("DELIVERED").await == total).then_some(()) }).await;
    assert_eq!(env.inbox_count("PROCESSED").await, total);
    assert_eq!(env.scalar("SELECT COUNT(*) FROM consumer_inbox_poison").await, 0);
    let missing = env
        .scalar("SELECT COUNT(*) FROM audit_outbox o WHERE NOT EXISTS (SELECT 1 FROM audit_logs a WHERE a.audit_id = o.event_id)")
        .await;
    assert_eq!(missing, 0, "no committed event was lost");
}

crate::on_both_dialects!(every_committed_event_becomes_exactly_one_audit_log_through_kills);
