//! The binary started the way the container image starts it: the Dockerfile's ENTRYPOINT and
//! CMD, the image's config file, secrets and the listen address from the environment. SIGTERM
//! (what Kubernetes sends PID 1) drains and exits 0 within the configured grace period.
//!
//! Uses the release binary when `HANDOFF_RELEASE_BIN` names it (scripts/test passes the image's), else
//! the test build of the same source.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::TestEnv;

/// ENTRYPOINT + CMD of the Dockerfile, as exec-form JSON arrays.
fn image_command() -> Vec<String> {
    let dockerfile = include_str!("../Dockerfile");
    let array = |directive: &str| -> Vec<String> {
        let line = dockerfile.lines().find(|l| l.starts_with(directive)).unwrap_or_else(|| panic!("no {directive}"));
        serde_json::from_str(line[directive.len()..].trim()).expect("exec-form JSON array")
    };
    let mut command = array("ENTRYPOINT");
    command.extend(array("CMD"));
    command
}

#[tokio::test]
async fn the_image_entrypoint_runs_relays_and_drains_on_sigterm() {
    let env = TestEnv::new().await;
    env.insert_events("img", "user", 20).await;
    let dir = tempfile::tempdir().unwrap();
    // The image's config file, "mounted" where the image expects it (the path in CMD).
    let command = image_command();
    let config_at = command.iter().position(|a| a == "--config").map(|i| command[i + 1].clone()).unwrap();
    assert_eq!(config_at, "/etc/handoff/handoff.toml");
    let mounted = dir.path().join("handoff.toml");
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/config/container.toml"), &mounted).unwrap();

    let binary = std::env::var("HANDOFF_RELEASE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_handoff").to_owned());
    assert!(command[0].ends_with("/handoff"));
    let args: Vec<String> =
        command[1..].iter().map(|a| if *a == config_at { mounted.display().to_string() } else { a.clone() }).collect();
    let log = dir.path().join("log");
    let mut child = Command::new(&binary)
        .args(&args)
        .env("HANDOFF_DATABASE__URL", &env.database_url)
        .env("HANDOFF_REDIS__URL", &env.redis_url)
        .env("HANDOFF_TELEMETRY__LISTEN", "127.0.0.1:0")
        // Kubernetes service links would add these; they must not disturb the config.
        .env("HANDOFF_PORT", "tcp://10.0.0.7:9464")
        .env("HANDOFF_SERVICE_HOST", "10.0.0.7")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start handoff");

    // The image's relay streams to `audit:{aggregate_type}`; wait for our rows to be delivered.
    env.await_delivered(20).await;
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(logs().lines().all(|l| l.starts_with('{')), "JSON logs in the container: {}", logs());
    assert!(!logs().contains(&env.database_url), "the database URL is never logged");

    let asked = Instant::now();
    let kill = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(asked.elapsed() < common::WAIT, "handoff did not exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "exit {status:?}: {}", logs());
    // config/container.toml sets grace_period = "20s".
    assert!(asked.elapsed() < Duration::from_secs(20), "drained within the grace period");
    assert!(logs().contains("drained; exiting"));
    let _: i64 = fred::prelude::KeysInterface::del(&env.redis, "audit:user").await.unwrap_or(0);
}

/// The shipped binary has no fault hooks: `HANDOFF_FAULT_PAUSE` parks nothing, batches flow.
#[tokio::test]
async fn the_release_binary_ignores_fault_injection_variables() {
    let binary = std::env::var("HANDOFF_RELEASE_BIN")
        .expect("HANDOFF_RELEASE_BIN must name the release binary (scripts/test sets it to the image's)");
    let bytes = std::fs::read(&binary).unwrap();
    assert!(
        !bytes.windows(b"HANDOFF_FAULT".len()).any(|w| w == b"HANDOFF_FAULT"),
        "the release binary reads no HANDOFF_FAULT_* variable"
    );
    let env = TestEnv::new().await;
    env.insert_events("free", "user", 20).await;
    let relay = common::process::Handoff::launch(
        &env.config(""),
        common::process::Handoff::pause_at("before_append", Some(binary)),
    );
    env.await_delivered(20).await;
    assert!(!relay.dir.path().join("marker").exists(), "no batch was parked");
}
