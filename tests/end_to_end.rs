//! The seed's scenario end to end: an owner inserts outbox rows; relay → stream → bridge →
//! inbox → worker → audit_logs holds exactly one row per event, while the relay and the bridge
//! are killed and restarted along the way. On Postgres and on MariaDB; and on Postgres with the
//! bridge applying the seed's batch handler at take-over (the consumer-side process killed).

use crate::common;

use common::db_env::{DbEnv, Dialect};
use common::eventually;
use common::process::Handoff;

const ROUNDS: usize = 4;
const PER_ROUND: usize = 500;

/// The seed's handler written once for a batch (what config/demo.toml ships).
const BATCH_AUDIT_HANDLER: &str = "INSERT INTO audit_logs (audit_id, source, action, actor, detail) SELECT e.id, e.owner, e.type, e.payload ->> 'actor', e.payload FROM unnest(:event_ids::text[], :owners::text[], :event_types::text[], :payloads::jsonb[]) AS e(id, owner, type, payload) ON CONFLICT (audit_id) DO NOTHING";

/// Who applies the handler.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Applier {
    /// A worker process of its own, the handler per event.
    Worker,
    /// The bridge, at take-over, the handler per batch (the worker in the bridge's process
    /// sees only what the bridge leaves it).
    Bridge,
}

async fn every_committed_event_becomes_exactly_one_audit_log_through_kills(dialect: Dialect) {
    scenario(dialect, Applier::Worker).await
}

mod applied_at_takeover {
    #[tokio::test]
    async fn postgres() {
        super::scenario(super::Dialect::Postgres, super::Applier::Bridge).await
    }
}

async fn scenario(dialect: Dialect, applier: Applier) {
    let env = DbEnv::new(dialect).await;
    let relay_config = env.config("batch_size = 100");
    let validate = "[bridge.validate]\nevent_types = [\"user.*\"]\npayload_id_field = \"auditId\"";
    let (bridge_config, _worker) = match applier {
        Applier::Worker => {
            let worker_config = format!("{}{}", env.base_config(), env.worker_section("batch_size = 100"));
            (
                env.bridge_config("b1", &["user"], &format!("batch_size = 50\n{validate}")),
                Some(Handoff::run(&worker_config)),
            )
        }
        Applier::Bridge => {
            let bridge =
                env.bridge_config("b1", &["user"], &format!("batch_size = 50\napply = \"worker\"\n{validate}"));
            (format!("{bridge}{}", common::worker_section_with("batch_size = 100", BATCH_AUDIT_HANDLER)), None)
        }
    };
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
    if applier == Applier::Bridge {
        let by_bridge = env.scalar("SELECT COUNT(*) FROM consumer_inbox WHERE processed_at = received_at").await;
        assert_eq!(by_bridge, total, "every event applied at take-over, none by the worker");
    }
}

crate::on_both_dialects!(every_committed_event_becomes_exactly_one_audit_log_through_kills);
