//! Postgres, Redis, nats-server and Kafka instances of the chaos run's own, on spare ports, to stop and
//! restart without touching the machine's shared ones.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A free port below the ephemeral range (32768 and up on Linux): a server restarted on its port
/// after a crash must find it free, and while it is down any outgoing connection may take a port
/// of that range. (Kafka's nine ports come from the same range: `Kafka::start`.)
fn spare_port() -> u16 {
    loop {
        let port = 20000 + rand::random::<u16>() % 12000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

async fn await_port(port: u16) -> anyhow::Result<()> {
    for _ in 0..600 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("nothing listens on port {port}")
}

/// Runs a command as the `postgres` user when we are root (initdb and postgres refuse root).
fn as_postgres(program: &Path, args: &[&str]) -> Command {
    let root = std::env::var("USER").map(|u| u == "root").unwrap_or(false) || unsafe_uid_is_root();
    if root {
        let mut line = format!("'{}'", program.display());
        for a in args {
            line.push_str(&format!(" '{a}'"));
        }
        let mut command = Command::new("su");
        command.args(["postgres", "-s", "/bin/sh", "-c", &line]);
        command
    } else {
        let mut command = Command::new(program);
        command.args(args);
        command
    }
}

fn unsafe_uid_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

pub struct Postgres {
    pub port: u16,
    bin: PathBuf,
    data: PathBuf,
}

impl Postgres {
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .max()
            .ok_or_else(|| anyhow::anyhow!("no /usr/lib/postgresql/*/bin (run scripts/services)"))?;
        let data = dir.join("pg");
        std::fs::create_dir_all(&data)?;
        let _ = Command::new("chown").args(["-R", "postgres"]).arg(dir).status();
        let initdb = bin.join("initdb");
        let status = as_postgres(&initdb, &["-D", &data.display().to_string(), "-U", "postgres", "-A", "trust"])
            .stdout(Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "initdb failed");
        let pg = Self { port: spare_port(), bin, data };
        pg.up().await?;
        Ok(pg)
    }

    pub fn url(&self, port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    }

    async fn up(&self) -> anyhow::Result<()> {
        let options =
            format!("-p {} -c listen_addresses=127.0.0.1 -k /tmp -c max_connections=200 -c fsync=on", self.port);
        let log = self.data.join("server.log").display().to_string();
        let status = as_postgres(
            &self.bin.join("pg_ctl"),
            &["-D", &self.data.display().to_string(), "-l", &log, "-o", &options, "start"],
        )
        .stdout(Stdio::null())
        .status()?;
        anyhow::ensure!(status.success(), "pg_ctl start failed");
        await_port(self.port).await
    }

    /// An immediate stop is a crash: recovery replays the WAL; committed rows survive.
    pub async fn crash_and_restart(&self) -> anyhow::Result<()> {
        let _ =
            as_postgres(&self.bin.join("pg_ctl"), &["-D", &self.data.display().to_string(), "-m", "immediate", "stop"])
                .stdout(Stdio::null())
                .status()?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.up().await
    }

    pub fn stop(&self) {
        let _ = as_postgres(&self.bin.join("pg_ctl"), &["-D", &self.data.display().to_string(), "-m", "fast", "stop"])
            .stdout(Stdio::null())
            .status();
    }
}

pub struct Redis {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Redis {
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        let dir = dir.join("redis");
        std::fs::create_dir_all(&dir)?;
        let mut redis = Self { port: spare_port(), dir, child: None };
        redis.up().await?;
        Ok(redis)
    }

    /// AOF with fsync on every write: a killed Redis comes back with every acknowledged entry,
    /// as a production deployment that promises no loss must be configured.
    async fn up(&mut self) -> anyhow::Result<()> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        await_port(self.port).await?;
        self.await_serving().await
    }

    /// A restarted Redis accepts connections while it replays its AOF and answers `LOADING`
    /// until it is done; the run's own checks wait for a plain PONG.
    async fn await_serving(&self) -> anyhow::Result<()> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        for _ in 0..600 {
            if let Ok(mut socket) = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await {
                let mut reply = [0u8; 64];
                if socket.write_all(b"PING\r\n").await.is_ok()
                    && let Ok(n) = socket.read(&mut reply).await
                    && reply[..n].starts_with(b"+PONG")
                {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("redis on port {} never finished loading", self.port)
    }

    /// Every key gone at once (streams with their consumer groups, dedupe markers), as after a
    /// failover to an empty replica, an eviction or an operator's FLUSHALL; writes it had
    /// acknowledged are lost.
    pub async fn lose_everything(&self) -> anyhow::Result<()> {
        let status = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "flushall"])
            .stdout(Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "redis-cli flushall failed");
        Ok(())
    }

    pub async fn crash_and_restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.up().await
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A nats-server with JetStream of the run's own (never the machine's on 4222), its store under
/// the run's directory: a crash and restart keeps what it stored (a killed process leaves its
/// writes in the page cache).
pub struct Nats {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Nats {
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        let dir = dir.join("nats");
        std::fs::create_dir_all(&dir)?;
        let mut nats = Self { port: spare_port(), dir, child: None };
        nats.up().await?;
        Ok(nats)
    }

    async fn up(&mut self) -> anyhow::Result<()> {
        let binary = if Path::new("/usr/sbin/nats-server").exists() { "/usr/sbin/nats-server" } else { "nats-server" };
        let child = Command::new(binary)
            .args(["-js", "-a", "127.0.0.1", "-p", &self.port.to_string(), "-sd"])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        await_port(self.port).await?;
        for _ in 0..600 {
            if async_nats::connect(format!("nats://127.0.0.1:{}", self.port)).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("nats-server on port {} never answered", self.port)
    }

    /// The stream deleted and created again empty (its consumers gone with it): an operator's
    /// mistake or a lost store. Messages it had acknowledged are lost; the relays must notice
    /// and re-drive.
    pub async fn lose_everything(&self, stream: &str, subjects: &str) -> anyhow::Result<()> {
        let client = async_nats::connect(format!("nats://127.0.0.1:{}", self.port)).await?;
        let jetstream = async_nats::jetstream::new(client);
        jetstream.delete_stream(stream).await.map_err(|e| anyhow::anyhow!("deleting {stream}: {e}"))?;
        jetstream
            .create_stream(async_nats::jetstream::stream::Config {
                name: stream.into(),
                subjects: vec![subjects.into()],
                duplicate_window: Duration::from_secs(3600),
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow::anyhow!("creating {stream}: {e}"))?;
        Ok(())
    }

    pub async fn crash_and_restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.up().await
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A three-node KRaft cluster of the run's own (`scripts/services kafka-cluster`), every topic on
/// all three nodes with `min.insync.replicas = 2`: a crash kills one node with SIGKILL and starts
/// it again on its data, so its partitions' leadership moves while the relays produce.
///
/// Each node also has a listener for handoff's clients, advertised at a proxy of the run's
/// (`proxies`): a client learns every node's address from the cluster, so only addresses the
/// nodes advertise can put a proxy on its path. The nodes reach each other directly.
pub struct Kafka {
    /// The nodes' own listeners (the run's admin calls, which no cut should reach).
    pub bootstrap: String,
    /// The proxies' addresses, for handoff.
    pub client_bootstrap: String,
    pub proxies: Vec<crate::proxy::Proxy>,
    dir: PathBuf,
    services: PathBuf,
    running: bool,
}

impl Kafka {
    pub async fn start(dir: &Path, services: &Path) -> anyhow::Result<Self> {
        let dir = dir.join("kafka");
        std::fs::create_dir_all(&dir)?;
        let services = std::fs::canonicalize(services)?;
        // Nine consecutive spare ports (each node's broker, controller and client listener):
        // another base if any is taken.
        for _ in 0..10 {
            let base = 20000 + rand::random::<u16>() % 12000;
            let mut proxies = Vec::new();
            for node in 1..=3u16 {
                proxies.push(crate::proxy::Proxy::start(base + 5 + node).await?);
            }
            let ports: Vec<String> = proxies.iter().map(|p| p.port.to_string()).collect();
            let args = ["kafka-cluster".to_owned(), dir.display().to_string(), base.to_string(), ports.join(",")];
            let script = services.clone();
            let out = tokio::task::spawn_blocking(move || Command::new(&script).args(&args).output()).await??;
            if out.status.success() {
                let stdout = String::from_utf8_lossy(&out.stdout);
                let bootstrap = stdout.lines().last().unwrap_or_default().trim().to_owned();
                let client_bootstrap = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
                return Ok(Self { bootstrap, client_bootstrap, proxies, dir, services, running: true });
            }
            eprintln!("chaos: kafka cluster on base port {base}: {}", String::from_utf8_lossy(&out.stderr));
        }
        anyhow::bail!("no Kafka cluster could start")
    }

    fn services(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = Command::new(&self.services).args(args).output()?;
        anyhow::ensure!(
            out.status.success(),
            "scripts/services {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// One node, chosen at random, killed with SIGKILL and started again on its data (its
    /// writes survive in the page cache; the others hold every acknowledged one anyway).
    pub async fn crash_and_restart(&mut self) -> anyhow::Result<u32> {
        let node = rand::random_range(1..=3u32);
        let dir = self.dir.display().to_string();
        self.services(&["kafka-node", &dir, &node.to_string(), "stop"])?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (script, dir) = (self.services.clone(), dir.clone());
        // Starting waits for the node to answer (seconds of JVM start): off the runtime.
        let out = tokio::task::spawn_blocking(move || {
            Command::new(script).args(["kafka-node", &dir, &node.to_string(), "start"]).output()
        })
        .await??;
        anyhow::ensure!(out.status.success(), "kafka-node {node} start: {}", String::from_utf8_lossy(&out.stderr));
        Ok(node)
    }

    pub fn stop(&mut self) {
        if std::mem::take(&mut self.running) {
            let _ = self.services(&["kafka-cluster-stop", &self.dir.display().to_string()]);
        }
    }
}

impl Drop for Kafka {
    fn drop(&mut self) {
        self.stop();
    }
}
