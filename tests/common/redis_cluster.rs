//! A Redis Cluster of the test's own, on spare ports: three primaries, with or without a
//! replica each.

use std::process::{Command, Stdio};

use super::eventually;
use super::redis_server::{Server, redis_cli, spare_port, start_on_spare_port};

/// (port, is a primary, own id, its primary's id or `-`, slot ranges)
type Node = (u16, bool, String, String, Vec<(u16, u16)>);

pub struct RedisCluster {
    pub ports: Vec<u16>,
    children: Vec<Option<Server>>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Three primaries, no replicas.
    pub async fn start() -> Self {
        Self::start_with(0).await
    }

    /// Three primaries with `replicas` replicas each; a primary that stops answering is
    /// replaced by its replica after about `cluster-node-timeout` (1.5 s here). Full coverage
    /// is not required, as docs/explanation/delivery.md advises for handoff.
    pub async fn start_with(replicas: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // The cluster bus listens on port + 10000: ports whose bus port is free too, and no
        // node's port another's bus port.
        let (mut ports, mut children) = (Vec::new(), Vec::new());
        while ports.len() < 3 * (1 + replicas) {
            let pick = || loop {
                let port = cluster_port();
                if !ports.iter().any(|&p: &u16| p == port || p == port + 10000 || p + 10000 == port) {
                    return port;
                }
            };
            let spawn = |port: u16| {
                Command::new("redis-server")
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                    .args(["--cluster-enabled", "yes", "--cluster-config-file", &format!("nodes-{port}.conf")])
                    .args(["--cluster-node-timeout", "1500"])
                    // Healthy shards keep serving while a failed one waits for its replica; with
                    // Redis's default (yes) the whole cluster answers CLUSTERDOWN meanwhile.
                    .args(["--cluster-require-full-coverage", "no"])
                    .arg("--dir")
                    .arg(dir.path())
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("redis-server")
            };
            let (port, child) = start_on_spare_port("cluster node to answer", pick, spawn).await;
            ports.push(port);
            children.push(Some(child));
        }
        let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli");
        assert!(status.success(), "redis-cli --cluster create");
        let cluster = Self { ports, children, _dir: dir };
        // Every node knows every other and sees all slots served, before clients ask.
        let known = format!("cluster_known_nodes:{}", cluster.ports.len());
        for port in &cluster.ports {
            let (port, known) = (*port, known.clone());
            eventually("the cluster to report ok on every node", || {
                let known = known.clone();
                async move {
                    let info = redis_cli(port, &["cluster", "info"]);
                    (info.contains("cluster_state:ok")
                        && info.contains("cluster_slots_ok:16384")
                        && info.contains(&known))
                    .then_some(())
                }
            })
            .await;
        }
        let expected = 3 * replicas;
        let view = &cluster;
        eventually("every replica attached to its primary", || async move {
            (view.replicas().len() == expected).then_some(())
        })
        .await;
        for port in cluster.replicas() {
            eventually("every replica's link to its primary", || async move {
                redis_cli(port, &["info", "replication"]).contains("master_link_status:up").then_some(())
            })
            .await;
        }
        cluster
    }

    /// `redis-cluster://` URL naming every node.
    pub fn url(&self) -> String {
        let others: Vec<String> = self.ports[1..].iter().map(|p| format!("node=127.0.0.1:{p}")).collect();
        format!("redis-cluster://127.0.0.1:{}?{}", self.ports[0], others.join("&"))
    }

    /// `CLUSTER NODES` as seen by a node that is up: (port, is a primary, own id, its primary's
    /// id or `-`, slot ranges).
    fn nodes(&self) -> Vec<Node> {
        let alive = self.ports.iter().zip(&self.children).find(|(_, c)| c.is_some()).map(|(p, _)| *p).unwrap();
        redis_cli(alive, &["cluster", "nodes"])
            .lines()
            .filter_map(|line| {
                let parts: Vec<&str> = line.split_whitespace().collect();
                let port: u16 = parts.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
                let primary = parts.get(2)?.contains("master") && !parts[2].contains("fail");
                let slots = parts
                    .get(8..)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|range| {
                        let (a, b) = range.split_once('-').unwrap_or((range, range));
                        Some((a.parse().ok()?, b.parse().ok()?))
                    })
                    .collect();
                Some((port, primary, parts[0].to_owned(), parts[3].to_owned(), slots))
            })
            .collect()
    }

    /// The port of the primary serving `key` now.
    pub fn primary_of(&self, key: &str) -> u16 {
        let slot = fred::util::redis_keyslot(key.as_bytes());
        self.nodes()
            .into_iter()
            .find(|(_, primary, _, _, slots)| *primary && slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .map(|(port, ..)| port)
            .expect("a primary serves every slot")
    }

    /// Ports of the nodes that are replicas now.
    pub fn replicas(&self) -> Vec<u16> {
        self.nodes().into_iter().filter(|(_, primary, ..)| !primary).map(|(port, ..)| port).collect()
    }

    /// The port of the replica of the primary on `port`.
    pub fn replica_of(&self, port: u16) -> u16 {
        let nodes = self.nodes();
        let id = &nodes.iter().find(|n| n.0 == port).expect("a node of this cluster").2;
        nodes.iter().find(|n| &n.3 == id).map(|n| n.0).expect("the primary has a replica")
    }

    /// Kills the node on `port` (a crash, not a shutdown).
    pub fn kill(&mut self, port: u16) {
        let at = self.ports.iter().position(|p| *p == port).expect("a node of this cluster");
        self.children[at].take();
    }
}

/// A spare port whose cluster-bus port (+10000) is free too.
pub fn cluster_port() -> u16 {
    loop {
        let port = spare_port();
        if port < 55000 && std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
}
