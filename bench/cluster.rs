//! A Redis Cluster of three primaries of the benchmark's own, for the scale run.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::broker::cli;
use crate::env::time_until;

/// A Redis Cluster of three primaries (no replicas) on spare ports, killed when dropped.
pub struct Cluster {
    pub ports: Vec<u16>,
    children: Vec<Child>,
    dir: std::path::PathBuf,
}

impl Cluster {
    pub async fn start(dir: &std::path::Path) -> anyhow::Result<Self> {
        let dir = dir.join(format!("cluster-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut cluster = Self { ports: Vec::new(), children: Vec::new(), dir: dir.clone() };
        while cluster.ports.len() < 3 {
            // The cluster bus listens on port + 10000: that port must be free too, and no node's
            // port another's bus port.
            let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let taken = cluster.ports.iter().any(|&p| p == port || p == port + 10000 || p + 10000 == port);
            if port >= 55000 || taken || std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_err() {
                continue;
            }
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--cluster-enabled", "yes", "--cluster-config-file", &format!("nodes-{port}.conf")])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            cluster.children.push(child);
            cluster.ports.push(port);
            time_until(Duration::from_secs(10), || async { Ok(cli(port, &["ping"]).contains("PONG")) }).await?;
        }
        let nodes: Vec<String> = cluster.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        anyhow::ensure!(created.success(), "redis-cli --cluster create failed");
        for &port in &cluster.ports {
            time_until(Duration::from_secs(30), || async move {
                let info = cli(port, &["cluster", "info"]);
                Ok(info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3"))
            })
            .await?;
        }
        Ok(cluster)
    }

    pub fn url(&self) -> String {
        let others: Vec<String> = self.ports[1..].iter().map(|p| format!("node=127.0.0.1:{p}")).collect();
        format!("redis-cluster://127.0.0.1:{}?{}", self.ports[0], others.join("&"))
    }

    /// CPU seconds each primary has used so far.
    pub fn cpu_seconds(&self) -> Vec<f64> {
        self.ports
            .iter()
            .map(|&port| {
                cli(port, &["info", "cpu"])
                    .lines()
                    .filter_map(|l| l.strip_prefix("used_cpu_sys:").or_else(|| l.strip_prefix("used_cpu_user:")))
                    .filter_map(|v| v.trim().parse::<f64>().ok())
                    .sum()
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
