//! A nats-server with JetStream of the test's own on a spare port (never the machine's on
//! 4222), its store in a directory of its own, to kill and restart with that store.

use std::process::{Child, Command, Stdio};

use super::redis_server::{Server, spare_port, start_on_spare_port};

pub struct NatsServer {
    pub port: u16,
    child: Option<Server>,
    store: tempfile::TempDir,
    extra: Vec<String>,
}

/// Creates stream `AUDIT` on `audit.>` (file storage, a one-hour duplicate window) through
/// `client`, as an operator (or `handoff migrate`) would.
pub async fn create_audit_stream(client: async_nats::Client) {
    async_nats::jetstream::new(client)
        .create_stream(async_nats::jetstream::stream::Config {
            name: "AUDIT".into(),
            subjects: vec!["audit.>".into()],
            storage: async_nats::jetstream::stream::StorageType::File,
            duplicate_window: std::time::Duration::from_secs(3600),
            ..Default::default()
        })
        .await
        .unwrap();
}

impl NatsServer {
    /// This server's stream `AUDIT` (see [`create_audit_stream`]).
    pub async fn create_audit_stream(&self) {
        create_audit_stream(async_nats::connect(self.url()).await.unwrap()).await
    }

    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// With extra `nats-server` arguments (`--tls …`, `--auth <token>`).
    pub async fn start_with(extra: &[&str]) -> Self {
        let store = tempfile::tempdir().unwrap();
        let extra = extra.iter().map(|s| s.to_string()).collect();
        let mut server = Self { port: 0, child: None, store, extra };
        let (port, child) =
            start_on_spare_port("own nats-server to answer", spare_port, |port| server.spawn(port)).await;
        (server.port, server.child) = (port, Some(child));
        server
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (a crash, not a clean shutdown); its store stays.
    pub fn stop(&mut self) {
        self.child.take();
    }

    /// Starts again on the same port with the same store, once it answers.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let port = self.port;
        let (_, child) = start_on_spare_port("own nats-server to answer again", || port, |port| self.spawn(port)).await;
        self.child = Some(child);
    }

    fn spawn(&self, port: u16) -> Child {
        let binary = if std::path::Path::new("/usr/sbin/nats-server").exists() {
            "/usr/sbin/nats-server"
        } else {
            "nats-server"
        };
        Command::new(binary)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "--server_name", &format!("handoff-test-{port}")])
            .arg("-sd")
            .arg(self.store.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server must be installed (scripts/services installs it)")
    }
}
