//! A redis-server of the test's own on a spare port, to stop and restart without touching the
//! machine's shared instance.

use std::process::{Child, Command, Stdio};

use super::eventually;

pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    pub async fn start() -> Self {
        let port = spare_port();
        let mut server = Self { port, child: None, dir: tempfile::tempdir().unwrap() };
        server.restart().await;
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts (again) on the same port and waits until it answers.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
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

/// A port the OS just handed out and released; good enough for a test server.
pub fn spare_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
