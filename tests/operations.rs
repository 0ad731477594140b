//! Operating an incident without SQL: pause and resume, on both dialects. Every replica reads the
//! pauses from the component's own database, so the scenarios run two replicas, restart across
//! a pause, and watch the replicas' own metrics and probes.

use crate::common;

use common::db_env::{DbEnv, Dialect};
use common::eventually;
use common::http::{get, sample};
use common::process::{Handoff, Launch, run_to_end};
use fred::prelude::*;

const POLL: &str = "[pause]\npoll_interval = \"100ms\"\n";

/// `handoff_paused` and `handoff_paused_seconds` of `component name` as one replica exports them.
async fn paused_metrics(handoff: &Handoff, component: &str, name: &str) -> (Option<f64>, Option<f64>) {
    let address = handoff.telemetry_address().await;
    let (_, metrics) = get(&address, "/metrics");
    let labels = format!("{{component=\"{component}\",name=\"{name}\"}}");
    (sample(&metrics, &format!("handoff_paused{labels}")), sample(&metrics, &format!("handoff_paused_seconds{labels}")))
}

/// Waits until every replica has read the pauses again, twice, after now: each of them exports
/// a `handoff_paused_seconds` that grew by more than two poll intervals (100 ms) since this call.
/// A replica that did not honour the pause would have claimed within one of its 50 ms polls.
async fn two_more_reads(replicas: &[&Handoff], component: &str, name: &str) {
    let mut from = Vec::new();
    for replica in replicas {
        from.push(paused_metrics(replica, component, name).await.1.expect("paused seconds exported"));
    }
    for (replica, from) in replicas.iter().zip(from) {
        eventually("the replica to read the pauses twice more", || async {
            (paused_metrics(replica, component, name).await.1.is_some_and(|s| s > from + 0.25)).then_some(())
        })
        .await;
    }
}

/// Pausing a relay stops appends on both replicas within one poll interval of theirs; status
/// and the probes say so; resume delivers what waited, nothing lost and nothing twice.
async fn a_pause_stops_both_relay_replicas_until_resumed(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    let config = format!("{}{POLL}", env.config(""));
    let (ok, out) = run_to_end(&config, &["pause", "--relay", "nope"]);
    assert!(!ok && out.contains("no relay named `nope`") && out.contains("configured: relay"), "{out}");

    env.insert_events("a", "user", 100).await;
    let replicas = [Handoff::run(&config), Handoff::run(&config)];
    env.await_delivered(100).await;
    // One replica may deliver all 100 before the other has read the pauses once (its gauge is
    // exported from its first read): await each one's "not paused".
    for replica in &replicas {
        eventually("the replica to export that it is not paused", || async {
            (paused_metrics(replica, "relay", "relay").await.0 == Some(0.0)).then_some(())
        })
        .await;
    }

    let (ok, out) = run_to_end(&config, &["pause", "--relay", "relay", "--reason", "broker migration"]);
    assert!(ok && out.contains("paused: relay relay (broker migration)"), "{out}");
    for replica in &replicas {
        eventually("the replica to export the pause", || async {
            (paused_metrics(replica, "relay", "relay").await.0 == Some(1.0)).then_some(())
        })
        .await;
        let address = replica.telemetry_address().await;
        eventually("/readyz to say paused, with 200", || async {
            (get(&address, "/readyz") == (200, "ready, paused: relay relay (broker migration)\n".to_owned()))
                .then_some(())
        })
        .await;
    }
    env.insert_events("b", "user", 50).await;
    two_more_reads(&[&replicas[0], &replicas[1]], "relay", "relay").await;
    assert_eq!(env.count("PENDING").await, 50, "nothing claimed while paused");
    assert_eq!(env.stream_event_ids(&env.stream("user")).await.len(), 100);
    let (ok, out) = run_to_end(&config, &["status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{ok} {out}"));
    let relay = &status[0];
    assert_eq!((relay["component"].as_str(), relay["state"].as_str()), (Some("relay relay"), Some("paused")), "{out}");
    assert_eq!(relay["paused"]["reason"], "broker migration");
    assert!(relay["paused"]["paused_by"].as_str().is_some_and(|by| by.starts_with("cli")), "{out}");

    // A second pause (a retried command) keeps the first one's start.
    let before = paused_metrics(&replicas[0], "relay", "relay").await.1.unwrap();
    let (ok, out) = run_to_end(&config, &["pause", "--relay", "relay", "--reason", "broker migration", "--json"]);
    let again: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{ok} {out}"));
    assert!(again["pause"]["paused_for_seconds"].as_f64().unwrap() >= before, "{out}");

    let (ok, out) = run_to_end(&config, &["resume", "--relay", "relay"]);
    assert!(ok && out.contains("resumed: relay relay"), "{out}");
    env.await_delivered(150).await;
    let mut ids = env.stream_event_ids(&env.stream("user")).await;
    assert_eq!(ids.len(), 150, "each event appended once");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 150);
    for replica in &replicas {
        eventually("the replica to export the resume", || async {
            (paused_metrics(replica, "relay", "relay").await == (Some(0.0), Some(0.0))).then_some(())
        })
        .await;
    }
    let (ok, out) = run_to_end(&config, &["resume", "--relay", "relay"]);
    assert!(ok && out.contains("was not paused"), "resuming twice is harmless: {out}");
}

/// A pause written before the process starts holds from its first turn (it survives restarts):
/// the bridge reads nothing and the worker applies nothing until each is resumed, the worker's
/// pause ending by itself (`--for`).
async fn paused_bridge_and_worker_hold_across_a_restart(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    let config = format!("{}{}{POLL}", env.bridge_config("b1", &["user"], ""), env.worker_section(""));
    // The schema exists before the first run: the tests' environment applied the migrations.
    let (ok, out) = run_to_end(&config, &["pause", "--bridge", "bridge", "--reason", "inbox maintenance"]);
    assert!(ok, "{out}");
    let (ok, out) = run_to_end(&config, &["pause", "--worker", "worker"]);
    assert!(ok, "{out}");
    for n in 0..20 {
        env.xadd_event("user", &format!("e-{n}"), "{\"actor\":\"a\"}").await;
    }
    let handoff = Handoff::run(&config);
    let address = handoff.telemetry_address().await;
    eventually("/readyz to name both pauses", || async {
        let (status, body) = get(&address, "/readyz");
        let both = body.contains(&format!("bridge bridge {} (inbox maintenance)", env.stream("user")))
            && body.contains("worker worker");
        (status == 200 && both).then_some(())
    })
    .await;
    two_more_reads(&[&handoff], "bridge", "bridge").await;
    assert_eq!(env.inbox_count("PENDING").await + env.inbox_count("PROCESSED").await, 0, "the bridge read nothing");

    let (ok, out) = run_to_end(&config, &["resume", "--bridge", "bridge"]);
    assert!(ok, "{out}");
    eventually("every entry taken over", || async { (env.inbox_count("PENDING").await == 20).then_some(()) }).await;
    two_more_reads(&[&handoff], "worker", "worker").await;
    assert_eq!(env.inbox_count("PROCESSED").await, 0, "the paused worker applied nothing");

    let (ok, out) = run_to_end(&config, &["pause", "--worker", "worker", "--for", "300ms"]);
    assert!(ok && out.contains("ends by itself"), "{out}");
    eventually("the pause to expire and every event to be applied", || async {
        (env.inbox_count("PROCESSED").await == 20).then_some(())
    })
    .await;
    assert_eq!(env.scalar("SELECT COUNT(*) FROM audit_logs").await, 20);
}

crate::on_both_dialects!(
    a_pause_stops_both_relay_replicas_until_resumed,
    paused_bridge_and_worker_hold_across_a_restart
);

/// A bridge and worker that took `n` events over and applied them (audit_logs holds `n`).
async fn applied_chain(env: &DbEnv, n: usize) -> (String, Handoff) {
    let config = format!("{}{}{POLL}", env.bridge_config("b1", &["user"], ""), env.worker_section(""));
    for i in 0..n {
        env.xadd_event("user", &format!("e-{i}"), "{\"actor\":\"a\"}").await;
    }
    let handoff = Handoff::run(&config);
    eventually("every event applied", || async {
        (env.scalar("SELECT COUNT(*) FROM audit_logs").await == n as i64).then_some(())
    })
    .await;
    (config, handoff)
}

/// `inbox reprocess` puts PROCESSED rows back to PENDING and the worker applies them again: the
/// effects a buggy handler lost come back. It refuses to run without a filter, counts without
/// changing anything on `--dry-run`, and stops at `--limit`.
async fn reprocess_runs_the_handlers_again_on_the_chosen_rows(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    let (config, _handoff) = applied_chain(&env, 20).await;
    // The "bug": the handler's effects are gone.
    env.exec("DELETE FROM audit_logs").await;

    let (ok, out) = run_to_end(&config, &["inbox", "reprocess", "--worker", "worker"]);
    assert!(!ok && out.contains("choose the rows"), "no filter, no reprocess: {out}");
    let (ok, out) = run_to_end(&config, &["inbox", "reprocess", "--worker", "worker", "--since", "1h", "--dry-run"]);
    assert!(ok && out.contains("would reprocess 20 row(s)"), "{out}");
    assert_eq!(
        env.scalar("SELECT COALESCE(SUM(redrives), 0) FROM consumer_inbox").await,
        0,
        "a dry run changes nothing"
    );

    let (ok, out) = run_to_end(&config, &["inbox", "reprocess", "--worker", "worker", "--since", "1h", "--limit", "5"]);
    assert!(ok && out.contains("reprocessed 5 row(s) (15 more match"), "{out}");
    eventually("the five to be applied again", || async {
        (env.scalar("SELECT COUNT(*) FROM audit_logs").await == 5).then_some(())
    })
    .await;
    let (ok, out) = run_to_end(
        &config,
        &[
            "inbox",
            "reprocess",
            "--worker",
            "worker",
            "--event-type",
            "user.*",
            "--until",
            "2099-01-01T00:00:00Z",
            "--json",
        ],
    );
    let report: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{ok} {out}"));
    assert_eq!((report["matching"].as_i64(), report["reprocessed"].as_i64()), (Some(20), Some(20)), "{out}");
    eventually("every event applied again", || async {
        (env.inbox_count("PROCESSED").await == 20 && env.scalar("SELECT COUNT(*) FROM audit_logs").await == 20)
            .then_some(())
    })
    .await;
    assert_eq!(env.scalar("SELECT SUM(redrives) FROM consumer_inbox").await, 25, "each reprocess counted on its row");
    let (ok, out) = run_to_end(&config, &["inbox", "reprocess", "--worker", "nope", "--all"]);
    assert!(!ok && out.contains("no worker named `nope`"), "{out}");
}

/// `bridge rewind --to 1h` moves the group back over every entry: each is delivered again and
/// recognised by the inbox as a duplicate, so audit_logs is unchanged; a move forward is refused.
async fn rewind_delivers_again_and_dedupe_keeps_the_effects_once(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    let (config, handoff) = applied_chain(&env, 30).await;
    let stream = env.stream("user");
    let (ok, out) = run_to_end(&config, &["bridge", "rewind", "--bridge", "bridge", "--to", "99999999999999-0"]);
    assert!(!ok && out.contains("rewind only moves back"), "{out}");
    let (ok, out) = run_to_end(&config, &["bridge", "rewind", "--bridge", "bridge", "--to", "1h", "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{ok} {out}"));
    let moved = &doc["streams"][0];
    assert_eq!(moved["stream"], stream.as_str());
    let ms = |id: &serde_json::Value| id.as_str().and_then(|i| i.split('-').next()?.parse::<u64>().ok()).unwrap();
    assert!(ms(&moved["from"]) > ms(&moved["to"]) + 3_500_000, "moved back by an hour: {out}");

    let address = handoff.telemetry_address().await;
    let duplicates = format!("handoff_bridge_duplicates_total{{bridge=\"bridge\",stream=\"{stream}\"}}");
    eventually("every entry delivered again, as a duplicate", || async {
        (sample(&get(&address, "/metrics").1, &duplicates) == Some(30.0)).then_some(())
    })
    .await;
    eventually("the group to catch up again", || async {
        common::group_caught_up(env.redis(), &stream, "admin").await.then_some(())
    })
    .await;
    assert_eq!(env.scalar("SELECT COUNT(*) FROM audit_logs").await, 30, "effects once");
    assert_eq!(env.inbox_count("PROCESSED").await, 30);
}

crate::on_both_dialects!(
    reprocess_runs_the_handlers_again_on_the_chosen_rows,
    rewind_delivers_again_and_dedupe_keeps_the_effects_once
);

/// A replay of 10,000 delivered rows into a backfill stream, killed part-way and resumed, leaves
/// every event in the stream (no gap) and at most one page twice; a fresh consumer reading the
/// backfill stream ends with each event applied once. A range retention deleted is refused.
async fn a_replay_killed_midway_resumes_and_a_fresh_consumer_gets_every_event_once(dialect: Dialect) {
    const EVENTS: usize = 10_000;
    const PAGE: usize = 200;
    let env = DbEnv::new(dialect).await;
    env.insert_events("r", "user", EVENTS).await;
    let config = env.config("batch_size = 500");
    {
        let _relay = Handoff::run(&config);
        env.await_delivered(EVENTS as i64).await;
    }
    let backfill = env.stream("backfill");
    let args = ["replay", "--relay", "relay", "--to-stream", backfill.as_str(), "--batch", "200"];
    let (ok, out) = run_to_end(&config, &[&args[..], &["--dry-run"]].concat());
    assert!(ok && out.contains(&format!("would replay {EVENTS} row(s) of relay relay to {backfill}")), "{out}");
    let retained = env.config("[relay.retention]\ndelivered_after = \"1h\"");
    let (ok, out) = run_to_end(&retained, &[&args[..], &["--since", "2h", "--dry-run"]].concat());
    assert!(!ok && out.contains("about 1h of the range are gone"), "{out}");

    let launch = Launch { args: [&args[..], &["--rate", "2000"]].concat(), ..Launch::default() };
    let mut replay = Handoff::launch(&config, launch);
    eventually("a third of the rows replayed", || async {
        let length: u64 = env.redis().xlen(backfill.as_str()).await.unwrap();
        (length >= 3000).then_some(())
    })
    .await;
    replay.kill();
    let (ok, out) = run_to_end(&config, &[&args[..], &["--rate", "0"]].concat());
    assert!(ok && out.contains("resuming after id"), "{out}");

    let entries = env.stream_entries(&backfill).await;
    let mut ids: Vec<&str> = entries.iter().map(|(_, f)| f["event_id"].as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), EVENTS, "no event missing");
    let extra = entries.len() - EVENTS;
    assert!(extra <= PAGE, "at most the page in flight twice: {extra} extra entries");
    assert!(entries.iter().all(|(_, f)| f["replay"].starts_with("replay-relay-")), "every entry says it is a replay");
    let (ok, out) = run_to_end(&config, &args);
    assert!(ok && out.contains("finished already"), "{out}");

    // A new consumer reads the backfill stream from its start.
    let consumer = format!("{}{}{POLL}", env.bridge_config("fresh", &["backfill"], ""), env.worker_section(""));
    let handoff = Handoff::run(&consumer);
    eventually("every event applied", || async { (env.inbox_count("PROCESSED").await == EVENTS as i64).then_some(()) })
        .await;
    let address = handoff.telemetry_address().await;
    let duplicates = format!("handoff_bridge_duplicates_total{{bridge=\"bridge\",stream=\"{backfill}\"}}");
    eventually("the repeated page recognised as duplicates", || async {
        (sample(&get(&address, "/metrics").1, &duplicates) == Some(extra as f64)).then_some(())
    })
    .await;
    assert_eq!(env.scalar("SELECT COUNT(*) FROM audit_logs").await, EVENTS as i64, "each event applied once");
    assert_eq!(env.scalar("SELECT COUNT(*) FROM consumer_inbox").await, EVENTS as i64);
}

crate::on_both_dialects!(a_replay_killed_midway_resumes_and_a_fresh_consumer_gets_every_event_once);

/// A database without `handoff_pauses` (a schema that predates it) holds no pause: the relay
/// delivers, and says once why pauses cannot reach it.
async fn without_the_pauses_table_components_run_and_say_so(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    env.exec("DROP TABLE handoff_pauses").await;
    env.insert_events("n", "user", 10).await;
    let relay = Handoff::run(&format!("{}{POLL}", env.config("")));
    env.await_delivered(10).await;
    relay.await_log("handoff_pauses cannot be read").await;
}

crate::on_both_dialects!(without_the_pauses_table_components_run_and_say_so);
