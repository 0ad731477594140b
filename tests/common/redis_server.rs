//! A redis-server of the test's own on a spare port, to stop and restart without touching the
//! machine's shared instance.

use std::process::{Child, Command, Stdio};

use super::eventually;

pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl RedisServer {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// With extra `redis-server` arguments (e.g. `--replicaof 127.0.0.1 <port>`).
    pub async fn start_with(extra: &[&str]) -> Self {
        let port = spare_port();
        let extra = extra.iter().map(|s| s.to_string()).collect();
        let mut server = Self { port, child: None, dir: tempfile::tempdir().unwrap(), extra };
        server.restart().await;
        server
    }

    /// A replica of `primary`, once its replication link is up.
    pub async fn replica_of(primary: u16) -> Self {
        let replica = Self::start_with(&["--replicaof", "127.0.0.1", &primary.to_string()]).await;
        let port = replica.port;
        eventually("the replica's link to its primary", || async move {
            (redis_cli(port, &["info", "replication"]).contains("master_link_status:up")).then_some(())
        })
        .await;
        replica
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts (again) on the same port and waits until it answers.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(&self.extra)
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/services installs it)");
        self.child = Some(child);
        let port = self.port;
        eventually("own redis-server to answer", || async move {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok().map(drop)
        })
        .await;
    }

    /// Kills the server (an outage, not a clean shutdown).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `redis-cli -p <port> <args>`'s output.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli").arg("-p").arg(port.to_string()).args(args).output().expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A port the OS just handed out and released; good enough for a test server.
pub fn spare_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
