//! The chain's behaviour written once and run on both brokers (`redis::…` and `nats::…`): each
//! scenario takes a [`Chain`] on Redis Streams or on NATS JetStream and asserts the same
//! guarantees — one effect per event through the whole chain, a relay killed between append and
//! settle leaving one entry per event, a bridge killed after its commit and before its
//! acknowledgement recognising the redelivered entries, malformed entries poisoned alone, two
//! bridge instances sharing a group through a kill, an inbox outage through restarts that
//! acknowledges nothing and counts no delivery; and per-key order: a row committed late is not
//! overtaken, a DEAD event is parked (`on_failure = "park"`) or holds its key (`"hold"`); and a
//! broker outage that burns no attempt. Each runs on a broker server of its own. The consumer
//! side's scenarios run in both of the bridge's modes as well (`taken_in::…`: rows left PENDING
//! for a worker; `applied::…`: the handler applied at take-over, one effect per event).

use crate::common;

use common::brokers::{Chain, in_both_modes_on_both_brokers, in_both_modes_on_kafka, on_both_brokers, on_kafka};
use common::http::{get, sample};
use common::process::Handoff;
use common::proxy::Proxy;
use common::{TestEnv, eventually};
use tokio_postgres::NoTls;

in_both_modes_on_both_brokers!(
    the_chain_applies_each_event_once,
    a_bridge_killed_after_its_commit_before_its_ack_recognises_the_entries_again,
    a_malformed_entry_goes_to_poison_with_its_reason_and_its_neighbours_go_on,
    a_poison_entry_is_also_written_to_the_dead_letter_stream,
    two_instances_share_the_group_and_one_killed_mid_batch_leaves_its_entries_to_the_other,
    through_an_inbox_outage_and_restarts_nothing_is_acknowledged_and_no_delivery_counts,
    two_takeover_loops_share_the_group_and_a_kill_mid_batch_loses_nothing,
);

// On Kafka: the chain, a bridge killed between its commit and its ack, poison with its dead
// letters, two instances of one group. Not there: the outage scenarios stop the broker (the
// shared one never stops; the relay's own Kafka outage test is in kafka_relay.rs), and
// Kafka keeps no dedupe window (the relay's kill test there states what it keeps instead).
in_both_modes_on_kafka!(
    the_chain_applies_each_event_once,
    a_bridge_killed_after_its_commit_before_its_ack_recognises_the_entries_again,
    a_malformed_entry_goes_to_poison_with_its_reason_and_its_neighbours_go_on,
    a_poison_entry_is_also_written_to_the_dead_letter_stream,
    two_instances_share_the_group_and_one_killed_mid_batch_leaves_its_entries_to_the_other,
);

on_kafka!(
    an_envelope_of_its_own_travels_from_the_outbox_to_the_inbox,
    cloudevents_in_binary_mode_name_each_attribute_and_a_bridge_takes_them_in,
    cloudevents_in_structured_mode_are_one_json_event_per_message,
);

on_both_brokers!(
    a_relay_killed_between_append_and_settle_leaves_one_entry_per_event,
    a_row_committed_later_with_a_lower_id_is_not_overtaken,
    park_sets_a_dead_event_aside_and_lets_the_next_ones_go,
    hold_keeps_a_key_behind_its_dead_event,
    a_broker_outage_burns_no_attempts_and_delivery_resumes,
    an_envelope_of_its_own_travels_from_the_outbox_to_the_inbox,
    cloudevents_in_binary_mode_name_each_attribute_and_a_bridge_takes_them_in,
    cloudevents_in_structured_mode_are_one_json_event_per_message,
);

fn series(chain: &Chain, name: &str) -> String {
    format!(r#"{name}{{bridge="bridge",stream="{}"}}"#, chain.user_stream())
}

async fn the_chain_applies_each_event_once(chain: Chain) {
    let env = &chain.env;
    env.insert_events("c", "user", 60).await;
    // Applied at take-over by default (the one worker of this inbox, a SQL handler); taken in
    // only, the worker applies every event.
    let consumer = format!(
        "\n[[bridge]]\nname = \"bridge\"\nconsumer = \"admin\"\ninstance = \"b1\"\n{}streams = [{{ key = \"{}\", owner = \"relay\" }}]\nblock = \"200ms\"\n{}{}",
        match chain.broker {
            common::brokers::Broker::Redis(_) => String::new(),
            common::brokers::Broker::Nats(_) => "broker = \"nats\"\n".into(),
            common::brokers::Broker::Kafka => format!("broker = \"kafka\"\ngroup = \"{}\"\n", env.id),
        },
        chain.user_stream(),
        if chain.applying { "" } else { "apply = \"off\"\n" },
        TestEnv::worker_section("")
    );
    let handoff = Handoff::run(&chain.relay_config("batch_size = 25", &consumer));
    env.await_delivered(60).await;
    chain.await_acknowledged().await;
    // The worker applies after the bridge has acknowledged; at take-over, before.
    eventually("every event applied", || async { (env.inbox_count("PROCESSED").await == 60).then_some(()) }).await;
    assert_eq!(env.scalar_i64("SELECT count(*) FROM audit_logs").await, 60);
    let rows = format!("SELECT count(*) FROM consumer_inbox WHERE stream = '{}'", chain.user_stream());
    assert_eq!(env.scalar_i64(&rows).await, 60, "each row names the stream it came from");
    let address = handoff.telemetry_address().await;
    let metrics = get(&address, "/metrics").1;
    let applied = sample(&metrics, &series(&chain, "handoff_bridge_applied_total")).unwrap_or(0.0);
    assert_eq!(applied, if chain.applying { 60.0 } else { 0.0 }, "{metrics}");
    let broker = match chain.broker {
        common::brokers::Broker::Redis(_) => "redis",
        common::brokers::Broker::Nats(_) => "nats",
        common::brokers::Broker::Kafka => "kafka",
    };
    let info = format!(r#"handoff_bridge_info{{bridge="bridge",broker="{broker}",stream="{}"}}"#, chain.user_stream());
    assert_eq!(sample(&metrics, &info), Some(1.0), "the broker label, by join: {metrics}");
    // The lag carries the broker itself: one query compares groups on every broker.
    let lag =
        format!(r#"handoff_bridge_lag_entries{{bridge="bridge",broker="{broker}",stream="{}"}}"#, chain.user_stream());
    let relay = format!(r#"handoff_relay_info{{broker="{broker}",relay="relay"}}"#);
    assert_eq!(sample(&metrics, &relay), Some(1.0), "{metrics}");
    eventually("the lag and pending gauges at 0", || async {
        let body = get(&address, "/metrics").1;
        let gauge = |name| sample(&body, &series(&chain, name));
        (sample(&body, &lag) == Some(0.0) && gauge("handoff_bridge_pending_entries") == Some(0.0)).then_some(())
    })
    .await;
}

async fn a_relay_killed_between_append_and_settle_leaves_one_entry_per_event(chain: Chain) {
    let env = &chain.env;
    env.insert_events("k", "user", 50).await;
    let config = chain.relay_config(&format!("batch_size = 25\n{}", chain.dedupe()), "");
    let mut crashed = Handoff::run_paused(&config, "after_append");
    crashed.await_paused().await;
    crashed.kill();
    assert!(!chain.stream_event_ids().await.is_empty(), "a batch was appended");
    assert_eq!(env.count("DELIVERED").await, 0, "and not settled");

    let _restarted = Handoff::run(&config);
    env.await_delivered(50).await;
    let entries = chain.entries().await;
    assert_eq!(entries.len(), 50, "the batch appended again was recognised: {entries:?}");
    let appended: std::collections::HashMap<String, String> = entries.into_iter().collect();
    assert_eq!(appended.len(), 50, "one entry per event");
    // Each row settled with the entry the first append made (the claim loops may interleave
    // their batches: compared per event, not in order).
    let recorded: std::collections::HashMap<String, String> = env
        .db
        .query("SELECT event_id, stream_entry_id FROM audit_outbox", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(recorded, appended);
}

async fn a_bridge_killed_after_its_commit_before_its_ack_recognises_the_entries_again(chain: Chain) {
    let env = &chain.env;
    chain.publish("k", 30, &[]).await;
    let config = chain.bridge_config("b1", "", "");
    let mut crashed = Handoff::run_paused(&config, "bridge_before_ack");
    crashed.await_paused().await;
    crashed.kill();
    let committed = chain.taken_in().await;
    assert!(committed >= 1, "a batch committed");
    assert!(chain.unacknowledged().await.is_some_and(|n| n as i64 >= committed), "and was not acknowledged");

    let restarted = Handoff::run(&config);
    chain.await_acknowledged().await;
    chain.assert_taken_in_once(30).await;
    let address = restarted.telemetry_address().await;
    let metrics = eventually("the entries delivered again counted as duplicates", || async {
        let body = get(&address, "/metrics").1;
        (sample(&body, &series(&chain, "handoff_bridge_duplicates_total")) == Some(committed as f64)).then_some(body)
    })
    .await;
    let inserted = sample(&metrics, &series(&chain, "handoff_bridge_inserted_total"));
    assert_eq!(inserted, Some((30 - committed) as f64), "the rest taken over as new");
    let counts = env.scalar_i64("SELECT count(*) FROM consumer_inbox_deliveries").await;
    assert_eq!(counts, 0, "the counted redeliveries are forgotten once taken over");
}

async fn a_malformed_entry_goes_to_poison_with_its_reason_and_its_neighbours_go_on(chain: Chain) {
    let env = &chain.env;
    chain.publish("m", 10, &[4]).await;
    let _handoff = Handoff::run(&chain.bridge_config("b1", "", ""));
    chain.await_acknowledged().await;
    chain.assert_taken_in_once(9).await;
    let poison = env.poison().await;
    assert_eq!(poison.len(), 1, "{poison:?}");
    assert_eq!(poison[0].0, "missing_field");
    let fields: serde_json::Value =
        env.db.query_one("SELECT fields FROM consumer_inbox_poison", &[]).await.unwrap().get(0);
    assert_eq!(fields["payload"], r#"{"auditId":"m-4","actor":"ops"}"#, "the entry's fields are kept");
}

async fn a_poison_entry_is_also_written_to_the_dead_letter_stream(chain: Chain) {
    let env = &chain.env;
    chain.publish("d", 6, &[2, 5]).await;
    let extra = format!("dead_letter_stream = \"{}\"", chain.dead_letter_key());
    let _handoff = Handoff::run(&chain.bridge_config("b1", &extra, ""));
    chain.await_acknowledged().await;
    chain.assert_taken_in_once(4).await;
    assert_eq!(env.poison().await.len(), 2);
    // Written before the entries were acknowledged: there once they are.
    let dead = chain.dead_letters().await;
    assert_eq!(dead.len(), 2, "{dead:?}");
    for (reason, source_stream, payload) in &dead {
        assert_eq!((reason.as_str(), source_stream.as_str()), ("missing_field", chain.user_stream().as_str()));
        assert!(payload.contains("\"actor\":\"ops\""), "the entry's fields travel with it: {payload}");
    }
}

async fn two_instances_share_the_group_and_one_killed_mid_batch_leaves_its_entries_to_the_other(chain: Chain) {
    let env = &chain.env;
    chain.publish("t", 40, &[]).await;
    let mut victim = Handoff::run_paused(&chain.bridge_config("b1", "", ""), "bridge_before_commit");
    victim.await_paused().await;
    assert!(chain.unacknowledged().await.is_some_and(|n| n >= 1), "the victim holds entries");
    victim.kill();
    let _survivor = Handoff::run(&chain.bridge_config("b2", "", ""));
    chain.await_acknowledged().await;
    chain.assert_taken_in_once(40).await;
    assert!(env.poison().await.is_empty());
}

/// `concurrency = 2`: two takeover loops in one process, each a consumer of the group, share its
/// entries — each holds a batch of its own, uncommitted, at the same time; killed then, the process
/// started again (the same consumer names) takes each event in once, and is ready.
async fn two_takeover_loops_share_the_group_and_a_kill_mid_batch_loses_nothing(chain: Chain) {
    let env = &chain.env;
    chain.publish("l", 200, &[]).await;
    let config = chain.bridge_config("b1", "concurrency = 2\nbatch_size = 20", "");
    let mut victim = Handoff::run_paused(&config, "bridge_before_commit");
    // Every batch parks at the point: two parked batches are the two loops' (one loop waits for
    // its batch to commit before it takes over another).
    victim.await_parked(2).await;
    if let common::brokers::Broker::Redis(_) = chain.broker {
        // Each under its own name in the group.
        use fred::prelude::*;
        let pending: fred::types::Value = env.redis.xpending(chain.user_stream(), "admin", ()).await.unwrap();
        let listed = format!("{pending:?}");
        assert!(listed.contains("\"b1\"") && listed.contains("\"b1-2\""), "{listed}");
    }
    victim.kill();
    let restarted = Handoff::run(&config);
    chain.await_acknowledged().await;
    chain.assert_taken_in_once(200).await;
    assert!(env.poison().await.is_empty(), "{:?}", env.poison().await);
    let address = restarted.telemetry_address().await;
    eventually("the process ready with both loops running", || async {
        let (status, body) = get(&address, "/readyz");
        (status == 200).then_some(body)
    })
    .await;
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn database_port() -> u16 {
    let base = common::base_database_url();
    base.rsplit_once(':').and_then(|(_, rest)| rest.split('/').next()?.parse().ok()).unwrap_or(5432)
}

async fn through_an_inbox_outage_and_restarts_nothing_is_acknowledged_and_no_delivery_counts(chain: Chain) {
    let env = &chain.env;
    // One entry: every instance below gets that one.
    chain.publish("o", 1, &[]).await;
    let proxy = Proxy::start(database_port()).await;
    let url = env.database_url.replacen(&format!(":{}/", database_port()), &format!(":{}/", proxy.port), 1);
    let config = chain
        .bridge_config("b1", "max_deliveries = 2", "")
        .replace(&env.database_url, &url)
        .replace("pool_size = 4", "pool_size = 4\nconnect_timeout = \"1s\"");
    proxy.switch(dead_port());
    // Three instances in turn get the entry during the outage (a restart reads its own pending
    // entries again on Redis; JetStream delivers it again after ack_wait): more deliveries than
    // max_deliveries, none of which reached the inbox.
    for round in 1..=3 {
        let mut handoff = Handoff::run(&config);
        let address = handoff.telemetry_address().await;
        eventually(&format!("delivery {round} of the entry"), || async {
            (chain.deliveries().await == Some(round)).then_some(())
        })
        .await;
        eventually(&format!("instance {round} to hold the entry it cannot take over"), || async {
            let body = get(&address, "/metrics").1;
            let failed =
                body.lines().any(|l| l.starts_with("handoff_bridge_inbox_unavailable_total{") && !l.ends_with(" 0"));
            failed.then_some(())
        })
        .await;
        assert_eq!(chain.unacknowledged().await, Some(1), "delivered, not acknowledged");
        handoff.kill();
    }
    proxy.switch(database_port());
    let _handoff = Handoff::run(&config);
    chain.await_acknowledged().await;
    chain.assert_taken_in_once(1).await;
    assert!(
        env.poison().await.is_empty(),
        "deliveries during the outage count against nothing: {:?}",
        env.poison().await
    );
}

/// Inserts, in one statement each, events `k<key>-<n>` of aggregate `k<key>`.
pub(crate) async fn insert_keyed(client: &tokio_postgres::Client, rows: &[(usize, usize)], event_type: &str) {
    for (key, n) in rows {
        client
            .execute(
                "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
                 VALUES ($1, 'user', $2, $3, jsonb_build_object('n', $4::int))",
                &[&format!("k{key}-{n}"), &format!("k{key}"), &event_type, &(*n as i32)],
            )
            .await
            .unwrap();
    }
}

/// A relay with per-key ordering, one stream per aggregate id.
fn ordered_config(chain: &Chain, on_failure: &str) -> String {
    let extra = format!(
        "batch_size = 50\nconcurrency = 2\nmax_attempts = 1000\nfields = {{ kind = \"{{event_type}}\" }}\n\
         [relay.backoff]\ninitial = \"50ms\"\nmax = \"200ms\"\nmultiplier = 2.0\njitter = 0.0\n\
         [relay.ordering]\non_failure = \"{on_failure}\"\n"
    );
    chain.relay_config_by("aggregate_id", &extra, "")
}

async fn a_row_committed_later_with_a_lower_id_is_not_overtaken(chain: Chain) {
    let env = &chain.env;
    let relay = Handoff::run(&ordered_config(&chain, "hold"));
    relay.await_log("relay started").await;
    let (late, conn) = tokio_postgres::connect(&env.database_url, NoTls).await.unwrap();
    tokio::spawn(conn);
    late.batch_execute("BEGIN").await.unwrap();
    insert_keyed(&late, &[(1, 1)], "user.changed").await;
    // k1-2 gets the higher id but commits first.
    insert_keyed(&env.db, &[(1, 2)], "user.changed").await;
    let claims = relay.logs().matches("claimed").count();
    eventually("several claims while the first row is uncommitted", || async {
        (relay.logs().matches("claimed").count() >= claims + 5).then_some(())
    })
    .await;
    assert_eq!(env.count("PENDING").await, 1, "k1-2 waits for the transaction holding k1-1");
    assert!(chain.event_ids_in("k1").await.is_empty());
    late.batch_execute("COMMIT").await.unwrap();
    env.await_delivered(2).await;
    assert_eq!(chain.event_ids_in("k1").await, ["k1-1", "k1-2"]);
}

/// Key k1: events 1..5 where event 2 can never become an entry (empty event type → DEAD).
async fn poisoned_key(env: &TestEnv) {
    insert_keyed(&env.db, &[(1, 1)], "user.changed").await;
    insert_keyed(&env.db, &[(1, 2)], "").await;
    insert_keyed(&env.db, &[(1, 3), (1, 4), (1, 5)], "user.changed").await;
}

async fn park_sets_a_dead_event_aside_and_lets_the_next_ones_go(chain: Chain) {
    let env = &chain.env;
    poisoned_key(env).await;
    let _relay = Handoff::run(&ordered_config(&chain, "park"));
    env.await_delivered(4).await;
    // Deliveries and failures of one batch are settled by separate statements, deliveries first.
    eventually("event 2 to turn DEAD", || async { (env.count("DEAD").await == 1).then_some(()) }).await;
    assert_eq!(chain.event_ids_in("k1").await, ["k1-1", "k1-3", "k1-4", "k1-5"]);
}

async fn hold_keeps_a_key_behind_its_dead_event(chain: Chain) {
    let env = &chain.env;
    poisoned_key(env).await;
    let relay = Handoff::run(&ordered_config(&chain, "hold"));
    env.await_delivered(1).await;
    eventually("event 2 to turn DEAD", || async { (env.count("DEAD").await == 1).then_some(()) }).await;
    let claims = relay.logs().matches("claimed").count();
    eventually("several more claims", || async {
        (relay.logs().matches("claimed").count() >= claims + 5).then_some(())
    })
    .await;
    assert_eq!(env.count("PENDING").await, 3, "events 3..5 wait behind the DEAD one");
    assert_eq!(chain.event_ids_in("k1").await, ["k1-1"]);
}

async fn a_broker_outage_burns_no_attempts_and_delivery_resumes(mut chain: Chain) {
    chain.env.insert_events("before", "user", 100).await;
    let relay = Handoff::run(&chain.relay_config("max_attempts = 2", ""));
    chain.env.await_delivered(100).await;

    chain.stop_broker();
    chain.env.insert_events("during", "user", 300).await;
    relay.await_log("stream unavailable; releasing rows").await;
    let env = &chain.env;
    eventually("the claimed rows to be handed back", || async {
        (env.count("PENDING").await == 300 && env.count("IN_FLIGHT").await == 0).then_some(())
    })
    .await;
    assert_eq!(env.count("DEAD").await, 0);
    assert_eq!(env.scalar_i64("SELECT COALESCE(MAX(attempts), 0)::bigint FROM audit_outbox").await, 0);

    chain.restart_broker().await;
    chain.env.await_delivered(400).await;
    assert_eq!(chain.env.count("DEAD").await, 0);
    assert_eq!(chain.env.scalar_i64("SELECT COALESCE(MAX(attempts), 0)::bigint FROM audit_outbox").await, 0);
    let ids = chain.stream_event_ids().await;
    for i in 1..=300 {
        assert!(ids.contains(&format!("during-{i}")), "during-{i} reached the restarted broker");
    }
}

/// `[relay.envelope]` names the entry's fields, `[bridge.envelope]` reads them by those names:
/// the events arrive whole. On NATS the field carrying the payload column (`data`) is the
/// message body, not a header, whatever its name.
async fn an_envelope_of_its_own_travels_from_the_outbox_to_the_inbox(chain: Chain) {
    let env = &chain.env;
    env.insert_events("e", "user", 10).await;
    let relay = chain.relay_config(
        "[relay.envelope]\neventId = \"{event_id}\"\nkind = \"{event_type}\"\nentity = \"{aggregate_id}\"\n\
         data = \"{payload}\"\nsource = \"relay\"\n",
        "",
    );
    let bridge = chain.bridge_config(
        "b1",
        "[bridge.envelope]\nevent_id = \"eventId\"\nevent_type = \"kind\"\naggregate_id = \"entity\"\n\
         aggregate_type = \"\"\npayload = \"data\"\nowner = \"source\"\n",
        "",
    );
    let _relay = Handoff::run(&relay);
    let _bridge = Handoff::run(&bridge);
    env.await_delivered(10).await;
    chain.await_acknowledged().await;
    assert!(env.poison().await.is_empty(), "{:?}", env.poison().await);
    assert_eq!(env.inbox_count("PENDING").await, 10);
    let row = env
        .db
        .query_one(
            "SELECT event_type, aggregate_id, owner, payload->>'auditId' FROM consumer_inbox WHERE event_id = 'e-3'",
            &[],
        )
        .await
        .unwrap();
    let got: (String, String, String, String) = (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(got, ("user.changed".into(), "agg-3".into(), "relay".into(), "e-3".into()));
    if let Some(bodies) = chain.bodies().await {
        assert_eq!(bodies.len(), 10);
        for (body, headers) in bodies {
            assert!(body.contains("\"auditId\""), "the payload is the body: {body:?}");
            assert!(!headers.iter().any(|h| h == "data"), "and not a header: {headers:?}");
        }
    }
}

/// The row's `created_at` as the CloudEvents `time` must carry it (RFC 3339, UTC, microseconds).
async fn created_at(env: &TestEnv, event_id: &str) -> String {
    let sql = format!(
        "SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM audit_outbox WHERE event_id = '{event_id}'"
    );
    env.db.query_one(&sql, &[]).await.unwrap().get(0)
}

async fn cloudevents_in_binary_mode_name_each_attribute_and_a_bridge_takes_them_in(chain: Chain) {
    let env = &chain.env;
    env.insert_events("e", "user", 5).await;
    // An aggregate id a NATS header cannot hold as it is: percent-encoded there, decoded by the
    // bridge.
    let odd = "Zürich \"7\" 100%";
    env.db
        .execute(
            "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('e-odd', 'user', $1, 'user.changed', '{}')",
            &[&odd],
        )
        .await
        .unwrap();
    // CloudEvents' optional `subject` (and `partitionkey`) left out when empty; its required
    // `type` empty: the row is refused.
    insert_cloudevents_edge_rows(env).await;
    // The source is what the bridge checks as the stream's owner (`relay`).
    let relay = chain.relay_config("[relay.cloudevents]\nsource = \"relay\"\n", "");
    let p = if matches!(chain.broker, common::brokers::Broker::Nats(_)) { "ce-" } else { "ce_" };
    let bridge = chain.bridge_config(
        "b1",
        &format!(
            "[bridge.envelope]\nevent_id = \"{p}id\"\nevent_type = \"{p}type\"\naggregate_id = \"{p}subject\"\n\
             aggregate_type = \"\"\nowner = \"{p}source\"\n"
        ),
        "",
    );
    let _relay = Handoff::run(&relay);
    let _bridge = Handoff::run(&bridge);
    env.await_delivered(7).await;
    await_no_type_refused(env).await;
    chain.await_acknowledged().await;
    assert!(env.poison().await.is_empty(), "{:?}", env.poison().await);
    let sql = "SELECT aggregate_id FROM consumer_inbox WHERE event_id = 'e-nosubject'";
    let taken: Option<String> = env.db.query_one(sql, &[]).await.unwrap().get(0);
    assert_eq!(taken, None, "no subject: no aggregate id");
    let sql = "SELECT aggregate_id FROM consumer_inbox WHERE event_id = 'e-odd'";
    let taken: String = env.db.query_one(sql, &[]).await.unwrap().get(0);
    assert_eq!(taken, odd, "the aggregate id as the row had it");
    let row = env
        .db
        .query_one(
            "SELECT event_type, aggregate_id, payload->>'auditId' FROM consumer_inbox WHERE event_id = 'e-3'",
            &[],
        )
        .await
        .unwrap();
    let got: (String, String, String) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(got, ("user.changed".into(), "agg-3".into(), "e-3".into()), "taken in by the bridge");

    let messages = chain.messages().await;
    assert_eq!(messages.len(), 7);
    let (key, headers, _) =
        messages.iter().find(|(_, h, _)| h.get(&format!("{p}id")).is_some_and(|id| id == "e-nosubject")).unwrap();
    let left_out = [format!("{p}subject"), format!("{p}partitionkey")];
    assert!(left_out.iter().all(|name| !headers.contains_key(name)) && key.is_none(), "{key:?} {headers:?}");
    let (_, odd_headers, _) =
        messages.iter().find(|(_, h, _)| h.get(&format!("{p}id")).is_some_and(|id| id == "e-odd")).unwrap();
    let sent = if p == "ce-" { "Z%C3%BCrich%20%227%22%20100%25" } else { odd };
    assert_eq!(odd_headers.get(&format!("{p}subject")).map(String::as_str), Some(sent), "{odd_headers:?}");
    let (key, headers, body) =
        messages.iter().find(|(_, h, _)| h.get(&format!("{p}id")).is_some_and(|id| id == "e-3")).unwrap();
    let time = created_at(env, "e-3").await;
    // On NATS `datacontenttype` is an attribute like the others (its binding).
    let content_type = if p == "ce-" { "ce-datacontenttype" } else { "content-type" };
    for (name, value) in [
        (format!("{p}specversion"), "1.0"),
        (format!("{p}source"), "relay"),
        (format!("{p}type"), "user.changed"),
        (format!("{p}subject"), "agg-3"),
        (format!("{p}partitionkey"), "agg-3"),
        (format!("{p}time"), time.as_str()),
        (content_type.to_owned(), "application/json"),
    ] {
        assert_eq!(headers.get(&name).map(String::as_str), Some(value), "{name} in {headers:?}");
    }
    let payload: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(payload["auditId"], "e-3", "the payload is the body");
    assert!(!headers.contains_key("payload") && !headers.contains_key("aggregate_id"), "{headers:?}");
    if chain.is_kafka() {
        assert_eq!(key.as_deref(), Some("agg-3"), "the key is the partition key, the aggregate id");
    }
}

/// Two rows at CloudEvents' edges: `e-nosubject` with an empty aggregate id (its optional
/// `subject` is left out), `e-notype` with an empty event type (required: the row is refused).
async fn insert_cloudevents_edge_rows(env: &TestEnv) {
    let sql = "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES \
               ('e-nosubject', 'user', '', 'user.changed', '{}'), ('e-notype', 'user', 'agg-x', '', '{}')";
    env.db.execute(sql, &[]).await.unwrap();
}

/// Waits until `e-notype` is DEAD, and checks why.
async fn await_no_type_refused(env: &TestEnv) {
    let sql = "SELECT last_error FROM audit_outbox WHERE event_id = 'e-notype' AND status = 'DEAD'";
    let error: Option<String> = common::eventually("the row without a type refused", || async {
        env.db.query_opt(sql, &[]).await.unwrap().map(|row| row.get(0))
    })
    .await;
    let error = error.unwrap_or_default();
    assert!(error.contains("CloudEvents `type` is required"), "{error}");
}

async fn cloudevents_in_structured_mode_are_one_json_event_per_message(chain: Chain) {
    let env = &chain.env;
    env.insert_events("s", "user", 3).await;
    insert_cloudevents_edge_rows(env).await;
    let relay = chain.relay_config("[relay.cloudevents]\nsource = \"/services/auth\"\nmode = \"structured\"\n", "");
    let _relay = Handoff::run(&relay);
    env.await_delivered(4).await;
    await_no_type_refused(env).await;
    let mut messages = chain.messages().await;
    assert_eq!(messages.len(), 4);
    let at = messages.iter().position(|(_, _, body)| body.contains("\"e-nosubject\"")).unwrap();
    let (key, _, body) = messages.remove(at);
    let event: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(event.get("subject").is_none() && key.is_none(), "no subject, no key: {event}");
    let content_type =
        if matches!(chain.broker, common::brokers::Broker::Nats(_)) { "Content-Type" } else { "content-type" };
    for (key, headers, body) in &messages {
        assert_eq!(headers.get(content_type).map(String::as_str), Some("application/cloudevents+json"), "{headers:?}");
        let event: serde_json::Value = serde_json::from_str(body).unwrap();
        let id = event["id"].as_str().unwrap().to_owned();
        let n = id.strip_prefix("s-").unwrap();
        let expected = serde_json::json!({
            "specversion": "1.0", "id": id, "source": "/services/auth", "type": "user.changed",
            "subject": format!("agg-{n}"), "time": created_at(env, &id).await,
            "datacontenttype": "application/json",
            "data": event["data"].clone(),
        });
        assert_eq!(event, expected);
        assert_eq!(event["data"]["auditId"], id.as_str(), "the payload is `data`");
        if chain.is_kafka() {
            assert_eq!(key.as_deref(), Some(format!("agg-{n}").as_str()));
            assert!(!headers.contains_key("partitionkey"), "the key only: {headers:?}");
        }
    }
}
