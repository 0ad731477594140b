//! A three-node Redis Cluster of the test's own, on spare ports.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::eventually;
use super::redis_server::spare_port;

pub struct RedisCluster {
    pub ports: Vec<u16>,
    children: Vec<Child>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ports: Vec<u16> = (0..3).map(|_| spare_port()).collect();
        let children = ports
            .iter()
            .map(|port| {
                Command::new("redis-server")
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                    .args(["--cluster-enabled", "yes", "--cluster-config-file", &format!("nodes-{port}.conf")])
                    .arg("--dir")
                    .arg(dir.path())
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("redis-server")
            })
            .collect();
        for port in &ports {
            let port = *port;
            eventually("cluster node to answer", || async move {
                std::net::TcpStream::connect(("127.0.0.1", port)).ok().map(drop)
            })
            .await;
        }
        let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli");
        assert!(status.success(), "redis-cli --cluster create");
        let cluster = Self { ports, children, _dir: dir };
        for port in &cluster.ports {
            let port = *port;
            eventually("the cluster to report ok on every node", || async move {
                let out = Command::new("redis-cli").args(["-p", &port.to_string(), "cluster", "info"]).output().ok()?;
                String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok").then_some(())
            })
            .await;
        }
        // Let every node learn the others' slots before clients ask.
        tokio::time::sleep(Duration::from_millis(200)).await;
        cluster
    }

    /// `redis-cluster://` URL naming every node.
    pub fn url(&self) -> String {
        let others: Vec<String> = self.ports[1..].iter().map(|p| format!("node=127.0.0.1:{p}")).collect();
        format!("redis-cluster://127.0.0.1:{}?{}", self.ports[0], others.join("&"))
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
