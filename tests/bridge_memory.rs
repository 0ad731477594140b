//! A bridge's memory is bounded by its configuration, not by what is in the stream: fed 200
//! entries of 4 MiB, its peak RSS stays within 64 MiB + 3 × `batch_bytes`, and it gives the
//! memory back afterwards.

use crate::common;

use common::process::{Handoff, Launch};
use common::redis_server::RedisServer;
use common::{TestEnv, eventually};
use fred::prelude::*;

const ENTRY: usize = 4 << 20;
const ENTRIES: usize = 200;
const BATCH_BYTES: usize = 8 << 20;
const MIB: usize = 1 << 20;

/// `VmRSS` and `VmHWM` (peak) of a process, in bytes.
fn memory(pid: u32) -> (usize, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |name: &str| -> usize {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 1024
    };
    (kib("VmRSS:"), kib("VmHWM:"))
}

#[tokio::test]
async fn large_entries_keep_the_bridge_within_its_memory_bound_and_it_gives_the_memory_back() {
    // Its own Redis: 800 MiB of entries.
    let redis = RedisServer::start().await;
    let env = TestEnv::with_redis(&redis.url()).await;
    let extra = format!("batch_bytes = {BATCH_BYTES}\n[bridge.validate]\npayload_max_bytes = {}\n", ENTRY + MIB);
    // The release build when there is one (scripts/test builds it): a debug build parses a
    // 4 MiB payload many times slower, which changes nothing about memory but the test's time.
    let launch = Launch { binary: std::env::var("HANDOFF_RELEASE_BIN").ok(), ..Launch::default() };
    let bridge = Handoff::launch(&env.bridge_config("b1", &["user"], &extra), launch);
    bridge.await_log("bridge started").await;
    let (idle, _) = memory(bridge.pid());

    let blob = "x".repeat(ENTRY - 100);
    for i in 1..=ENTRIES {
        let id = format!("big-{i}");
        let payload = format!(r#"{{"auditId":"{id}","actor":"admin","blob":"{blob}"}}"#);
        env.xadd_event("user", &id, &payload).await;
    }
    eventually("every large event taken over", || async {
        (env.inbox_count("PENDING").await == ENTRIES as i64).then_some(())
    })
    .await;
    let (_, peak) = memory(bridge.pid());
    eprintln!("bridge memory: idle {} MiB, peak {} MiB", idle / MIB, peak / MIB);
    let bound = 64 * MIB + 3 * BATCH_BYTES;
    assert!(peak <= bound, "peak RSS {} MiB over the bound {} MiB", peak / MIB, bound / MIB);
    eventually("the memory given back", || async {
        let (now, _) = memory(bridge.pid());
        (now <= idle + 16 * MIB).then_some(())
    })
    .await;
    // Leave nothing large behind in the shared database.
    env.db.batch_execute("TRUNCATE consumer_inbox").await.unwrap();
    let _: () = env.redis.flushall(false).await.unwrap();
}
