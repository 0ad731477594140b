//! The handoff binary as a child process, for tests that kill, stop or signal it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use super::eventually;

pub struct Handoff {
    child: Child,
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
}

/// Options for one process.
#[derive(Default)]
pub struct Launch<'a> {
    pub env: Vec<(&'a str, String)>,
    pub args: Vec<&'a str>,
    /// Another build of handoff (the release binary); default: the tests' build.
    pub binary: Option<String>,
}

impl Handoff {
    /// `handoff run` with `config` written to a temp file.
    pub fn run(config: &str) -> Self {
        Self::launch(config, Launch::default())
    }

    /// `handoff run`, parked at `point` (see `src/fault.rs`) until the resume file appears.
    pub fn run_paused(config: &str, point: &str) -> Self {
        if !cfg!(feature = "fault-injection") {
            panic!("fault points need --features fault-injection (scripts/test sets it)");
        }
        Self::launch_in(tempfile::tempdir().unwrap(), config, Self::pause_at(point, None))
    }

    /// Options that park a fault-injection build at `point` (marker and resume files go in the
    /// process's temporary directory).
    pub fn pause_at(point: &str, binary: Option<String>) -> Launch<'static> {
        Launch { env: vec![("HANDOFF_FAULT_PAUSE", point.to_owned())], args: vec!["run"], binary }
    }

    pub fn launch(config: &str, launch: Launch) -> Self {
        Self::launch_in(tempfile::tempdir().unwrap(), config, launch)
    }

    fn launch_in(dir: tempfile::TempDir, config: &str, mut launch: Launch) -> Self {
        let set = |env: &[(&str, String)], key: &str| env.iter().any(|(k, _)| *k == key);
        if set(&launch.env, "HANDOFF_FAULT_PAUSE") {
            for (key, file) in [("HANDOFF_FAULT_MARKER", "marker"), ("HANDOFF_FAULT_RESUME", "resume")] {
                if !set(&launch.env, key) {
                    launch.env.push((key, dir.path().join(file).display().to_string()));
                }
            }
        }
        let config_path = dir.path().join("handoff.toml");
        std::fs::write(&config_path, config).unwrap();
        let log = dir.path().join("handoff.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let args = if launch.args.is_empty() { vec!["run"] } else { launch.args };
        let mut command = Command::new(launch.binary.as_deref().unwrap_or(env!("CARGO_BIN_EXE_handoff")));
        command
            .args(&args)
            .arg("--config")
            .arg(&config_path)
            .env("RUST_LOG", std::env::var("HANDOFF_TEST_LOG").unwrap_or_else(|_| "info,handoff=debug".into()))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file);
        for (key, value) in launch.env {
            command.env(key, value);
        }
        let child = command.spawn().expect("spawn handoff");
        Self { child, dir, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until a fault point parked a batch.
    pub async fn await_paused(&self) {
        let marker = self.dir.path().join("marker");
        eventually("the relay to park at its fault point", || async { marker.exists().then_some(()) }).await;
    }

    /// Waits until `n` batches are parked at the fault point (each parks on its own).
    pub async fn await_parked(&self, n: usize) {
        let marker = self.dir.path().join("marker");
        eventually(&format!("{n} batches parked at the fault point"), || async {
            let lines = std::fs::read_to_string(&marker).unwrap_or_default().lines().count();
            (lines >= n).then_some(())
        })
        .await;
    }

    /// Lets batches parked at the fault point go on.
    pub fn resume(&self) {
        std::fs::write(self.dir.path().join("resume"), "go").unwrap();
    }

    /// Waits until the log contains `text`.
    pub async fn await_log(&self, text: &str) {
        eventually(&format!("log line containing {text:?}"), || async { self.logs().contains(text).then_some(()) })
            .await;
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self.pid().to_string()).status().unwrap();
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Whether the process is still running (it has not exited or aborted).
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits for the process to exit by itself (after a signal) and returns its status.
    pub async fn await_exit(&mut self) -> ExitStatus {
        let deadline = tokio::time::Instant::now() + super::WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(tokio::time::Instant::now() < deadline, "handoff did not exit");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The address the telemetry listener bound (from the log), for `listen = "127.0.0.1:0"`.
    pub async fn telemetry_address(&self) -> String {
        self.bound_address("telemetry").await
    }

    /// The admin listener's address (`[admin] listen = "127.0.0.1:0"`), from the log.
    pub async fn admin_address(&self) -> String {
        self.bound_address("admin").await
    }

    /// The address the `listener` listener bound to, from its log line.
    async fn bound_address(&self, listener: &str) -> String {
        let find = || {
            self.logs()
                .lines()
                .find(|l| l.contains(&format!("{listener} listener bound")))
                .and_then(|l| l.split("address=").nth(1))
                .map(|a| a.split_whitespace().next().unwrap_or_default().to_owned())
        };
        let deadline = tokio::time::Instant::now() + super::WAIT;
        loop {
            if let Some(address) = find() {
                return address;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {listener} listener address in the log:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("handoff.toml")
    }
}

impl Drop for Handoff {
    fn drop(&mut self) {
        // A failing test shows what the process said: what it said above debug level (what led
        // there), then its last lines (the test's own output is kept by the runner only for
        // failures).
        if std::thread::panicking() {
            let logs = self.logs();
            let said: Vec<&str> = logs.lines().filter(|l| !l.contains(" DEBUG ")).collect();
            let said = &said[said.len().saturating_sub(150)..];
            eprintln!("--- handoff {} (last {} lines above debug) ---", self.pid(), said.len());
            for line in said {
                eprintln!("{line}");
            }
            let tail: Vec<&str> = logs.lines().rev().take(40).collect();
            eprintln!("--- handoff {} (last {} lines) ---", self.pid(), tail.len());
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
        // SIGCONT first: a stopped process cannot act on SIGKILL's cleanup promptly.
        let _ = Command::new("kill").arg("-CONT").arg(self.pid().to_string()).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `handoff <args> --config <file with config>` to completion; returns (success, stdout+stderr).
pub fn run_to_end(config: &str, args: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("handoff.toml");
    std::fs::write(&path, config).unwrap();
    run_with_path(&path, args)
}

pub fn run_with_path(path: &Path, args: &[&str]) -> (bool, String) {
    run_with_env(path, args, &[])
}

/// Like [`run_with_path`] with extra environment variables.
pub fn run_with_env(path: &Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_handoff"))
        .args(args)
        .arg("--config")
        .arg(path)
        .envs(env.iter().copied())
        .output()
        .expect("run handoff");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

pub fn grace() -> Duration {
    Duration::from_secs(5)
}
