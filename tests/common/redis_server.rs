//! A redis-server of the test's own on a spare port, to stop and restart without touching the
//! machine's shared instance.

use std::process::{Child, Command, Stdio};

use super::eventually;

pub struct RedisServer {
    pub port: u16,
    child: Option<Server>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl RedisServer {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// With extra `redis-server` arguments (e.g. `--replicaof 127.0.0.1 <port>`).
    pub async fn start_with(extra: &[&str]) -> Self {
        let extra = extra.iter().map(|s| s.to_string()).collect();
        let mut server = Self { port: 0, child: None, dir: tempfile::tempdir().unwrap(), extra };
        let (port, child) =
            start_on_spare_port("own redis-server to answer", spare_port, |port| server.spawn(port)).await;
        (server.port, server.child) = (port, Some(child));
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
        let (port, mut server) = (self.port, Server(self.spawn(self.port)));
        let answered = answers_or_exits(&mut server.0, port, "own redis-server to answer").await;
        assert!(answered, "redis-server exited at start on port {port} (taken meanwhile?)");
        self.child = Some(server);
    }

    fn spawn(&self, port: u16) -> Child {
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(&self.extra)
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/services installs it)")
    }

    /// Kills the server (an outage, not a clean shutdown).
    pub fn stop(&mut self) {
        self.child.take();
    }
}

/// A server process of the test's own, killed when dropped: a test, or a setup of several
/// servers, that panics halfway leaves none of them running.
pub struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `redis-cli -p <port> <args>`'s output.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli").arg("-p").arg(port.to_string()).args(args).output().expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts a server with `spawn` on a port `pick` chooses and waits until it answers. A port is
/// only free when it is picked: a server that exits first (something took the port before it
/// bound it) is started again on another, up to ten times.
pub async fn start_on_spare_port(
    what: &str,
    mut pick: impl FnMut() -> u16,
    mut spawn: impl FnMut(u16) -> Child,
) -> (u16, Server) {
    for _ in 0..10 {
        let port = pick();
        let mut server = Server(spawn(port));
        if answers_or_exits(&mut server.0, port, what).await {
            return (port, server);
        }
    }
    panic!("{what}: the server exited at start on ten ports in a row");
}

/// Waits until the server `child` on `port` answers (`true`) or exits first (`false`: it could
/// not bind its port).
async fn answers_or_exits(child: &mut Child, port: u16, what: &str) -> bool {
    eventually(what, || {
        let state = match child.try_wait() {
            Ok(Some(_)) | Err(_) => Some(false),
            Ok(None) => std::net::TcpStream::connect(("127.0.0.1", port)).is_ok().then_some(true),
        };
        async move { state }
    })
    .await
}

/// A free port below the ephemeral range (32768 and up on Linux): a server restarted on its port
/// must find it free, and while it is down any outgoing connection may take a port of that range.
pub fn spare_port() -> u16 {
    loop {
        let port = 20000 + rand::random::<u16>() % 12000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}
