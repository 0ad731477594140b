//! Redis Cluster: one connection per primary, so a shard that goes down stalls its own streams
//! and no others.
//!
//! fred's cluster client is one router task: while it reconnects to a node that is gone (until
//! the cluster promotes a replica and the node leaves the slot map), commands for *every* node
//! wait behind it. handoff keeps that client for work that may wait (housekeeping, loss checks,
//! operator commands) and sends appends, reads and acknowledgements through a standalone client
//! per primary, routed by a slot map it refreshes from any node still up. Commands to a node
//! whose connection is down fail at once (`fail_fast`): their rows are released, their entries
//! stay pending, and the other shards go on.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::cluster::ClusterRouting;
use fred::types::config::{Server, ServerConfig};
use fred::types::{ClusterHash, CustomCommand, Value};

/// The slot map is asked for again at most this often (failures ask for it in bursts).
const REFRESH_AT_MOST_EVERY: Duration = Duration::from_millis(200);

pub(super) struct Shards {
    /// Connection settings (credentials, TLS, timeouts) for a standalone client to one node.
    template: Config,
    command_timeout: Duration,
    state: Mutex<State>,
    /// Serialises refreshes (one CLUSTER SLOTS at a time).
    refreshing: tokio::sync::Mutex<Option<Instant>>,
}

struct State {
    routing: ClusterRouting,
    clients: HashMap<Server, Client>,
}

/// The slot a stream key hashes to (routing of its appends, and of its node's gate).
pub(super) fn slot(key: &str) -> u16 {
    fred::util::redis_keyslot(key.as_bytes())
}

impl Shards {
    /// For a cluster config; `None` for a standalone or sentinel one.
    pub(super) fn new(config: &Config, command_timeout: Duration) -> Option<Self> {
        if !matches!(config.server, ServerConfig::Clustered { .. }) {
            return None;
        }
        let state = State { routing: ClusterRouting::new(), clients: HashMap::new() };
        Some(Self {
            template: config.clone(),
            command_timeout,
            state: Mutex::new(state),
            refreshing: tokio::sync::Mutex::new(None),
        })
    }

    /// Takes the slot map the cluster client found at start, if it has one.
    pub(super) fn seed(&self, cluster: &Client) {
        if let Some(routing) = cluster.cached_cluster_state() {
            self.state.lock().expect("shards lock").routing = routing;
        }
    }

    /// The primary serving `slot` and a client connected to it (created on first use, and then
    /// given up to the command timeout to connect: commands to it fail fast when it is not).
    pub(super) async fn for_slot(&self, slot: u16) -> Option<(Server, Client)> {
        let server = {
            let state = self.state.lock().expect("shards lock");
            let server = state.routing.get_server(slot)?.clone();
            if let Some(client) = state.clients.get(&server) {
                return Some((server, client.clone()));
            }
            server
        };
        let client = self.standalone(&server).ok()?;
        let _ = tokio::time::timeout(self.command_timeout, client.wait_for_connect()).await;
        let mut state = self.state.lock().expect("shards lock");
        let client = state.clients.entry(server.clone()).or_insert(client).clone();
        Some((server, client))
    }

    /// A client for every primary in the slot map (created on first use).
    pub(super) async fn primaries(&self) -> Vec<Client> {
        let slots: Vec<u16> = self.state.lock().expect("shards lock").routing.unique_hash_slots();
        let clients = slots.into_iter().map(|slot| self.for_slot(slot));
        futures_util::future::join_all(clients).await.into_iter().flatten().map(|(_, client)| client).collect()
    }

    /// A client of its own to the primary serving `key` (for reads that block).
    pub(super) fn dedicated_for(&self, key: &str) -> Option<Client> {
        self.standalone(&self.server_of(key)?).ok()
    }

    /// The primary serving `key` by the current slot map.
    pub(super) fn server_of(&self, key: &str) -> Option<Server> {
        let slot = slot(key);
        self.state.lock().expect("shards lock").routing.get_server(slot).cloned()
    }

    /// Asks a node that answers for the slot map (after a failure: a primary may have moved).
    /// Clients of nodes that no longer serve slots are closed.
    pub(super) async fn refresh(&self, cluster: &Client) {
        let mut last = self.refreshing.lock().await;
        if last.is_some_and(|at| at.elapsed() < REFRESH_AT_MOST_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        let connected: Vec<(Server, Client)> = {
            let state = self.state.lock().expect("shards lock");
            state.clients.iter().filter(|(_, c)| c.is_connected()).map(|(s, c)| (s.clone(), c.clone())).collect()
        };
        let mut routing = None;
        for (server, client) in connected {
            let command = CustomCommand::new_static("CLUSTER", ClusterHash::Random, false);
            let ask = client.custom::<Value, _>(command, vec!["SLOTS"]);
            if let Ok(Ok(reply)) = tokio::time::timeout(self.command_timeout, ask).await
                && let Ok(map) = ClusterRouting::from_cluster_slots(reply, server.host.clone())
                && !map.slots().is_empty()
            {
                routing = Some(map);
                break;
            }
        }
        // No shard client answers yet: the cluster client's own map, if it has one.
        let Some(routing) = routing.or_else(|| cluster.cached_cluster_state()) else { return };
        let primaries = routing.unique_primary_nodes();
        let mut state = self.state.lock().expect("shards lock");
        state.routing = routing;
        let gone: Vec<Server> = state.clients.keys().filter(|s| !primaries.contains(s)).cloned().collect();
        for server in gone {
            if let Some(client) = state.clients.remove(&server) {
                tokio::spawn(async move {
                    let _ = client.quit().await;
                });
            }
        }
    }

    /// The name a node's certificate is verified against with TLS: the host name the URL
    /// names, as the cluster client does (nodes are announced by IP address).
    pub(super) fn tls_name(&self, _server: &Server) -> Option<String> {
        match &self.template.server {
            ServerConfig::Clustered { hosts, .. } if self.template.tls.is_some() => {
                hosts.first().map(|first| first.host.to_string())
            }
            _ => None,
        }
    }

    /// A standalone client to `server`, connecting in the background and reconnecting by itself.
    fn standalone(&self, server: &Server) -> Result<Client, Error> {
        let mut config = self.template.clone();
        let mut server = server.clone();
        if let Some(name) = self.tls_name(&server) {
            server.tls_server_name = Some(name.into());
        }
        config.server = ServerConfig::Centralized { server };
        let client = super::build::build(config, self.command_timeout)?;
        client.connect();
        Ok(client)
    }
}
