//! Three nats-servers of the test's own clustered with JetStream (spare ports, stores in
//! directories of their own), for R3 streams: a node can be killed (its leader role moves) and
//! started again with its store.

use std::process::{Child, Command, Stdio};

use super::redis_server::{Server, spare_port, start_on_spare_port};

pub struct NatsCluster {
    /// Client ports, one per node.
    pub ports: Vec<u16>,
    routes: Vec<u16>,
    nodes: Vec<Option<Server>>,
    stores: Vec<tempfile::TempDir>,
}

impl NatsCluster {
    pub async fn start() -> Self {
        let ports: Vec<u16> = (0..3).map(|_| spare_port()).collect();
        let routes: Vec<u16> = (0..3).map(|_| spare_port()).collect();
        let stores = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut cluster = Self { ports, routes, nodes: vec![None, None, None], stores };
        for node in 0..3 {
            cluster.start_node(node).await;
        }
        cluster
    }

    /// Every node's client URL, comma-separated (what `[nats] url` takes for a cluster).
    pub fn url(&self) -> String {
        self.ports.iter().map(|p| format!("nats://127.0.0.1:{p}")).collect::<Vec<_>>().join(",")
    }

    /// The client URL of a node that is running.
    pub fn live_url(&self) -> String {
        let node = self.nodes.iter().position(Option::is_some).expect("a node runs");
        format!("nats://127.0.0.1:{}", self.ports[node])
    }

    /// The node named `name` (`n0`, `n1`, `n2`).
    pub fn node_named(name: &str) -> usize {
        name.trim_start_matches('n').parse().expect("a node name")
    }

    /// Kills node `node` (a crash); its store stays.
    pub fn kill(&mut self, node: usize) {
        self.nodes[node].take();
    }

    /// Starts node `node` again with its store, once it answers.
    pub async fn start_node(&mut self, node: usize) {
        let port = self.ports[node];
        let what = format!("nats cluster node {node} to answer");
        let (_, server) = start_on_spare_port(&what, || port, |port| self.spawn(node, port)).await;
        self.nodes[node] = Some(server);
    }

    fn spawn(&self, node: usize, port: u16) -> Child {
        let binary = if std::path::Path::new("/usr/sbin/nats-server").exists() {
            "/usr/sbin/nats-server"
        } else {
            "nats-server"
        };
        let routes: Vec<String> = self.routes.iter().map(|p| format!("nats://127.0.0.1:{p}")).collect();
        Command::new(binary)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "--server_name", &format!("n{node}")])
            .args(["--cluster_name", "handoff-test", "--cluster", &format!("nats://127.0.0.1:{}", self.routes[node])])
            .args(["--routes", &routes.join(",")])
            .arg("-sd")
            .arg(self.stores[node].path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server must be installed (scripts/services installs it)")
    }
}
