//! A Sentinel setup of the test's own: one primary, two replicas, three sentinels watching
//! `mymaster` (a primary that stops answering for 1 s is failed over).

use std::process::{Command, Stdio};

use super::eventually;
use super::redis_server::{RedisServer, Server, redis_cli, spare_port, start_on_spare_port};

pub struct RedisSentinel {
    pub primary: RedisServer,
    pub replicas: Vec<RedisServer>,
    pub sentinel_ports: Vec<u16>,
    sentinels: Vec<Server>,
    _dir: tempfile::TempDir,
}

impl RedisSentinel {
    pub async fn start() -> Self {
        let primary = RedisServer::start().await;
        let replicas = vec![RedisServer::replica_of(primary.port).await, RedisServer::replica_of(primary.port).await];
        let dir = tempfile::tempdir().unwrap();
        let (mut sentinel_ports, mut sentinels) = (Vec::new(), Vec::new());
        while sentinels.len() < 3 {
            let spawn = |port: u16| {
                let path = dir.path().join(format!("sentinel-{port}.conf"));
                std::fs::write(
                    &path,
                    format!(
                        "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor mymaster 127.0.0.1 {} 2\n\
                         sentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\n",
                        dir.path().display(),
                        primary.port
                    ),
                )
                .unwrap();
                Command::new("redis-server")
                    .arg(&path)
                    .arg("--sentinel")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-server --sentinel")
            };
            let (port, child) = start_on_spare_port("a sentinel to answer", spare_port, spawn).await;
            sentinel_ports.push(port);
            sentinels.push(child);
        }
        let setup = Self { primary, replicas, sentinel_ports, sentinels, _dir: dir };
        // Every sentinel sees the primary, both replicas and the other two sentinels.
        for port in setup.sentinel_ports.clone() {
            eventually("the sentinels to know the whole setup", || async move {
                let master = redis_cli(port, &["sentinel", "master", "mymaster"]);
                let lines: Vec<&str> = master.lines().collect();
                let field = |name: &str| lines.iter().position(|l| *l == name).and_then(|i| lines.get(i + 1)).copied();
                (field("num-slaves") == Some("2") && field("num-other-sentinels") == Some("2")).then_some(())
            })
            .await;
        }
        setup
    }

    /// `redis-sentinel://` URL naming every sentinel.
    pub fn url(&self) -> String {
        let others: Vec<String> = self.sentinel_ports[1..].iter().map(|p| format!("node=127.0.0.1:{p}")).collect();
        format!(
            "redis-sentinel://127.0.0.1:{}/0?sentinelServiceName=mymaster&{}",
            self.sentinel_ports[0],
            others.join("&")
        )
    }

    /// The port the sentinels name as the primary now.
    pub fn primary_port(&self) -> u16 {
        let reply = redis_cli(self.sentinel_ports[0], &["sentinel", "get-master-addr-by-name", "mymaster"]);
        reply.lines().nth(1).and_then(|p| p.trim().parse().ok()).unwrap_or(0)
    }
}
