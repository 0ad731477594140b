//! Servers of the test's own that speak TLS only, on spare ports, with the certificates of a
//! [`Pki`]: Postgres (hostssl only; `certuser` must present a client certificate), MariaDB
//! (`require_secure_transport`; `certuser` REQUIRE X509), Redis standalone and a three-node
//! Redis Cluster. Each starts in a second or two and is stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::eventually;
use super::pki::Pki;
use super::redis_cluster::cluster_port;
use super::redis_server::spare_port;

async fn await_port(port: u16) {
    eventually(&format!("a server on port {port}"), || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok().map(drop)
    })
    .await;
}

fn run(command: &mut Command, what: &str) {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(output.status.success(), "{what}: {}", String::from_utf8_lossy(&output.stderr));
}

/// As the `postgres` user when we are root (initdb and postgres refuse root).
fn as_postgres(program: &Path, args: &[&str]) -> Command {
    if unsafe_is_root() {
        let line: Vec<String> = std::iter::once(program.display().to_string())
            .chain(args.iter().map(|a| a.to_string()))
            .map(|a| format!("'{a}'"))
            .collect();
        let mut command = Command::new("su");
        command.args(["postgres", "-s", "/bin/sh", "-c", &line.join(" ")]);
        command
    } else {
        let mut command = Command::new(program);
        command.args(args);
        command
    }
}

fn unsafe_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

pub struct TlsPostgres {
    pub port: u16,
    bin: PathBuf,
    data: PathBuf,
    _dir: tempfile::TempDir,
}

impl TlsPostgres {
    pub async fn start(pki: &Pki) -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("Postgres server binaries (scripts/services installs them)")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .max()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("pg");
        std::fs::create_dir_all(&data).unwrap();
        if unsafe_is_root() {
            run(Command::new("chown").args(["-R", "postgres"]).arg(dir.path()), "chown");
        }
        let data_arg = data.display().to_string();
        run(&mut as_postgres(&bin.join("initdb"), &["-D", &data_arg, "-U", "postgres", "-A", "trust"]), "initdb");
        for (from, to) in [(&pki.server_cert, "server.crt"), (&pki.server_key, "server.key"), (&pki.ca, "ca.crt")] {
            std::fs::copy(from, data.join(to)).unwrap();
        }
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\n\
             hostssl all certuser 127.0.0.1/32 cert\n\
             hostssl all all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        let port = spare_port();
        let conf = format!(
            "\nlisten_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{data_arg}'\n\
             ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\nssl_ca_file = 'ca.crt'\n\
             fsync = off\nmax_connections = 100\n"
        );
        let mut file = std::fs::OpenOptions::new().append(true).open(data.join("postgresql.conf")).unwrap();
        std::io::Write::write_all(&mut file, conf.as_bytes()).unwrap();
        if unsafe_is_root() {
            run(Command::new("chown").args(["-R", "postgres"]).arg(&data), "chown");
        }
        run(Command::new("chmod").arg("600").arg(data.join("server.key")), "chmod");
        let log = data.join("server.log").display().to_string();
        run(&mut as_postgres(&bin.join("pg_ctl"), &["-D", &data_arg, "-l", &log, "-w", "start"]), "pg_ctl start");
        await_port(port).await;
        for sql in ["CREATE ROLE certuser LOGIN SUPERUSER", "CREATE DATABASE handoff"] {
            run(
                Command::new("psql").args(["-h", &data_arg, "-p", &port.to_string(), "-U", "postgres", "-qc", sql]),
                "psql",
            );
        }
        Self { port, bin, data, _dir: dir }
    }

    /// A URL to the `handoff` database by `host` (TLS settings go in `[database.tls]`).
    pub fn url(&self, user: &str, host: &str) -> String {
        format!("postgres://{user}@{host}:{}/handoff", self.port)
    }
}

impl Drop for TlsPostgres {
    fn drop(&mut self) {
        let data = self.data.display().to_string();
        let _ = as_postgres(&self.bin.join("pg_ctl"), &["-D", &data, "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

pub struct TlsMariaDb {
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl TlsMariaDb {
    pub async fn start(pki: &Pki) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let data_arg = format!("--datadir={}", data.display());
        // --no-defaults: nothing of the machine's /etc/mysql settings (user, paths) applies.
        run(
            Command::new("mariadb-install-db")
                .args(["--no-defaults", &data_arg, "--auth-root-authentication-method=normal"])
                .arg(format!("--user={}", whoami())),
            "mariadb-install-db",
        );
        let port = spare_port();
        let socket = dir.path().join("mysqld.sock");
        let child = Command::new("/usr/sbin/mariadbd")
            .arg("--no-defaults")
            .arg(&data_arg)
            .arg(format!("--user={}", whoami()))
            .arg(format!("--port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", dir.path().join("mysqld.pid").display()))
            .arg(format!("--ssl-cert={}", pki.server_cert.display()))
            .arg(format!("--ssl-key={}", pki.server_key.display()))
            .arg(format!("--ssl-ca={}", pki.ca.display()))
            .arg("--require-secure-transport=ON")
            .arg("--skip-log-bin")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd (scripts/services installs it)");
        await_port(port).await;
        // The anonymous accounts install-db creates would match `handoff`@localhost first.
        let sql = "DELETE FROM mysql.global_priv WHERE User = ''; FLUSH PRIVILEGES;
                   CREATE USER 'handoff'@'%'; GRANT ALL ON *.* TO 'handoff'@'%';
                   CREATE USER 'certuser'@'%' REQUIRE X509; GRANT ALL ON *.* TO 'certuser'@'%';
                   CREATE DATABASE handoff;";
        run(
            Command::new("mariadb").arg(format!("--socket={}", socket.display())).args(["-uroot", "-e", sql]),
            "mariadb",
        );
        Self { port, child, _dir: dir }
    }

    pub fn url(&self, user: &str, host: &str) -> String {
        format!("mysql://{user}@{host}:{}/handoff", self.port)
    }
}

impl Drop for TlsMariaDb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn whoami() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn redis_tls_args(pki: &Pki, port: u16, clients: &str) -> Vec<String> {
    [
        "--port",
        "0",
        "--tls-port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--tls-cert-file",
        &pki.server_cert.display().to_string(),
        "--tls-key-file",
        &pki.server_key.display().to_string(),
        "--tls-ca-cert-file",
        &pki.ca.display().to_string(),
        "--tls-auth-clients",
        clients,
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

pub struct TlsRedis {
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl TlsRedis {
    /// `client_certificates`: whether clients must present one (`tls-auth-clients yes`).
    pub async fn start(pki: &Pki, client_certificates: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = spare_port();
        let clients = if client_certificates { "yes" } else { "no" };
        let child = Command::new("redis-server")
            .args(redis_tls_args(pki, port, clients))
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server");
        await_port(port).await;
        Self { port, child, _dir: dir }
    }

    pub fn url(&self, host: &str) -> String {
        format!("rediss://{host}:{}", self.port)
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct TlsRedisCluster {
    pub ports: Vec<u16>,
    children: Vec<Child>,
    _dir: tempfile::TempDir,
}

impl TlsRedisCluster {
    pub async fn start(pki: &Pki) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // The cluster bus listens on port + 10000: pick ports whose bus port is free too.
        let ports: Vec<u16> = (0..3).map(|_| cluster_port()).collect();
        let children: Vec<Child> = ports
            .iter()
            .map(|port| {
                Command::new("redis-server")
                    .args(redis_tls_args(pki, *port, "no"))
                    .args(["--tls-cluster", "yes", "--cluster-enabled", "yes"])
                    .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
                    .arg("--dir")
                    .arg(dir.path())
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("redis-server")
            })
            .collect();
        for port in &ports {
            await_port(*port).await;
        }
        let tls = |c: &mut Command| {
            c.args(["--tls", "--cacert"])
                .arg(&pki.ca)
                .arg("--cert")
                .arg(&pki.server_cert)
                .arg("--key")
                .arg(&pki.server_key);
        };
        let mut create = Command::new("redis-cli");
        tls(&mut create);
        create.args(["--cluster", "create"]);
        create.args(ports.iter().map(|p| format!("127.0.0.1:{p}")));
        create.args(["--cluster-replicas", "0", "--cluster-yes"]);
        run(&mut create, "redis-cli --cluster create");
        for port in &ports {
            let port = *port;
            eventually("the TLS cluster to report ok on every node", || async move {
                let mut info = Command::new("redis-cli");
                tls(&mut info);
                let out = info.args(["-p", &port.to_string(), "cluster", "info"]).output().ok()?;
                String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok").then_some(())
            })
            .await;
        }
        Self { ports, children, _dir: dir }
    }

    /// `rediss-cluster://` naming every node by `host`.
    pub fn url(&self, host: &str) -> String {
        let others: Vec<String> = self.ports[1..].iter().map(|p| format!("node={host}:{p}")).collect();
        format!("rediss-cluster://{host}:{}?{}", self.ports[0], others.join("&"))
    }
}

impl Drop for TlsRedisCluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
