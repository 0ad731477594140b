//! The Redis client behind the broker seam: standalone, sentinel or cluster, chosen by the URL
//! scheme; the relay's appends go over connections of its own (`plain`, `link`), the rest
//! through fred.

use fred::prelude::*;
use fred::types::config::{TlsConfig, TlsConnector, TlsHostMapping};
use fred::types::{ClusterHash, CustomCommand};

use super::build::build;
use super::{link, shards};
use crate::broker::redis::config::RedisConfig;
use crate::broker::seam::{
    AppendOptions, AppendOutcome, Entry, EntryId, EventStream, ServerId, StreamState, Unavailable,
};
use crate::tls::TlsMode;

#[derive(Clone)]
pub struct RedisStream {
    pub(super) client: Client,
    /// Cluster mode: a client per primary for the data path (see `shards`).
    pub(super) shards: Option<std::sync::Arc<shards::Shards>>,
    pub(super) command_timeout: std::time::Duration,
    /// SHA of the loaded append script; cleared when Redis forgets it (restart, failover).
    pub(super) script_sha: std::sync::Arc<tokio::sync::Mutex<Option<String>>>,
    /// The relay's own connections for plain appends.
    pub(super) links: std::sync::Arc<link::Links>,
}

/// A durability gate the server cannot honour (a configuration error).
#[derive(Debug, thiserror::Error)]
#[error("relay `{relay}` durability.aof needs WAITAOF (Redis 7.2 or later); this server reports {major}.{minor}")]
pub(crate) struct GateError {
    pub relay: String,
    pub major: u32,
    pub minor: u32,
}

/// Why connecting failed: a bad URL or credentials (fatal), or an unreachable server.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("redis.url is invalid: {0}")]
    Config(String),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error("redis rejected the credentials: {0}")]
    Auth(String),
    #[error("redis is unreachable: {0}")]
    Unreachable(String),
}

impl RedisStream {
    /// Builds a client that reconnects by itself with exponential backoff, forever. Waits up to
    /// `command_timeout` for the first connection: bad URLs and credentials fail at once, an
    /// unreachable server is returned as `Unreachable` along with the client, which keeps trying.
    pub async fn connect(config: &RedisConfig) -> Result<(Self, Option<ConnectError>), ConnectError> {
        let url = config.url.as_ref().map(|u| u.expose()).unwrap_or("redis://127.0.0.1:6379");
        let mode = config.tls_mode();
        // fred would build its own TLS settings for a `rediss` scheme; handoff's (CA file, client
        // certificate, mode) replace them, so it parses the plain scheme.
        let plain_url = if mode == TlsMode::Disable { url.to_owned() } else { plain_scheme(url) };
        let mut redis_config =
            Config::from_url(&plain_url).map_err(|e| ConnectError::Config(e.details().to_owned()))?;
        let mut tls = None;
        if mode != TlsMode::Disable {
            let client = crate::tls::client_config("redis.tls", mode, &config.tls)?;
            let client = std::sync::Arc::new(client);
            tls = Some(client.clone());
            // Cluster nodes and a sentinel's primary are announced by IP address: they are
            // verified against the host name the URL names.
            redis_config.tls = Some(TlsConfig {
                connector: TlsConnector::Rustls(client.into()),
                hostnames: TlsHostMapping::DefaultHost,
            });
        }
        let links = std::sync::Arc::new(link::Links::new(&redis_config, tls, config.command_timeout));
        redis_config.fail_fast = false;
        let shards = shards::Shards::new(&redis_config, config.command_timeout).map(std::sync::Arc::new);
        let client =
            build(redis_config, config.command_timeout).map_err(|e| ConnectError::Config(e.details().to_owned()))?;
        client.connect();
        let first = tokio::time::timeout(config.command_timeout, client.wait_for_connect()).await;
        let warning = match first {
            Ok(Ok(())) => None,
            Ok(Err(e)) if *e.kind() == ErrorKind::Auth => return Err(ConnectError::Auth(e.details().to_owned())),
            Ok(Err(e)) => Some(ConnectError::Unreachable(e.details().to_owned())),
            Err(_) => Some(ConnectError::Unreachable("no connection within redis.command_timeout".into())),
        };
        if let Some(shards) = &shards {
            // Connect to every primary now, so the first batches do not find their shard's
            // client still connecting (commands to it fail fast).
            shards.seed(&client);
            shards.primaries().await;
        }
        let stream =
            Self { client, shards, command_timeout: config.command_timeout, script_sha: Default::default(), links };
        Ok((stream, warning))
    }

    /// The server's version (`redis_version` of `INFO server`: Valkey reports the Redis version
    /// it is compatible with), e.g. `(7, 2)`.
    pub(crate) async fn version(&self) -> Result<(u32, u32), Unavailable> {
        let info = CustomCommand::new_static("INFO", ClusterHash::Random, false);
        let reply: String =
            self.client.custom(info, vec!["server"]).await.map_err(|e| Unavailable(e.details().to_owned()))?;
        let version = reply.lines().find_map(|l| l.strip_prefix("redis_version:")).unwrap_or_default().trim();
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        Ok((parts.next().unwrap_or(0), parts.next().unwrap_or(0)))
    }

    /// Relay `relay`'s WAITAOF gate (`aof`) on a server that has no WAITAOF (Redis < 7.2) is
    /// refused, naming the key (the inner error); an unreachable server says nothing either way
    /// (the outer one).
    pub(crate) async fn check_gate(&self, relay: &str, aof: bool) -> Result<Result<(), GateError>, Unavailable> {
        if !aof {
            return Ok(Ok(()));
        }
        let (major, minor) = self.version().await?;
        if (major, minor) < (7, 2) {
            return Ok(Err(GateError { relay: relay.to_owned(), major, minor }));
        }
        Ok(Ok(()))
    }

    /// The underlying client, for components that need more than appends (bridge, trimming).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A new client with its own connection(s), for blocking reads that must not hold up the
    /// shared connection. It reconnects by itself like the original. In cluster mode, a
    /// standalone client to the primary serving `key`, so another shard's failure cannot hold
    /// it up; [`RedisStream::reroute`] replaces it when that primary changes.
    pub(crate) fn dedicated(&self, key: &str) -> Client {
        if let Some(client) = self.shards.as_ref().and_then(|s| s.dedicated_for(key)) {
            return client;
        }
        let client = self.client.clone_new();
        client.connect();
        client
    }

    /// After a failure on `key`'s dedicated client: in cluster mode, refreshes the slot map
    /// and returns a new client when another node now serves `key`.
    pub(crate) async fn reroute(&self, key: &str, current: &Client) -> Option<Client> {
        let shards = self.shards.as_ref()?;
        shards.refresh(&self.client).await;
        let server = shards.server_of(key)?;
        let same = match current.client_config().server {
            fred::types::config::ServerConfig::Centralized { server: s } => {
                s.host == server.host && s.port == server.port
            }
            _ => false,
        };
        if same {
            return None;
        }
        shards.dedicated_for(key)
    }

    /// Whether a cluster primary answers a PING, each asked through its own client: the
    /// cluster client's router waits behind a node that is down (until the cluster promotes its
    /// replica), so asking it would wait for the slowest shard. The first answer settles it.
    async fn a_primary_answers(&self) -> bool {
        let Some(shards) = &self.shards else { return false };
        let clients = shards.primaries().await;
        let pings = clients.into_iter().map(|client| {
            let timeout = self.command_timeout;
            Box::pin(async move {
                match tokio::time::timeout(timeout, client.ping::<String>(None)).await {
                    Ok(Ok(_)) => Ok(()),
                    _ => Err(()),
                }
            })
        });
        let pings: Vec<_> = pings.collect();
        !pings.is_empty() && futures_util::future::select_ok(pings).await.is_ok()
    }
}

impl EventStream for RedisStream {
    async fn append(&self, entries: &[Entry], options: &AppendOptions) -> Vec<AppendOutcome> {
        if options.dedupe.is_some() || entries.iter().any(|e| e.run.is_some()) {
            return self.append_scripted(entries, options).await;
        }
        self.append_plain(entries, options).await
    }

    async fn ping(&self) -> Result<(), Unavailable> {
        if self.shards.is_some() {
            return match self.a_primary_answers().await {
                false => Err(Unavailable("no cluster primary answers".into())),
                true => Ok(()),
            };
        }
        match self.client.ping::<String>(None).await {
            Ok(_) => Ok(()),
            Err(e) => {
                // No answer at all: the connection may be dead without having said so, and a
                // client kept busy by other callers never looks idle enough for its own
                // unresponsive check. Remake it, so the next probe goes out on a fresh one.
                if *e.kind() == ErrorKind::Timeout {
                    let _ = tokio::time::timeout(self.command_timeout, self.client.force_reconnection()).await;
                }
                Err(Unavailable(e.details().to_owned()))
            }
        }
    }

    async fn partly_up(&self) -> bool {
        self.shards.is_some() && self.a_primary_answers().await
    }

    async fn trim_acknowledged(&self, stream: &str) -> Result<u64, Unavailable> {
        self.trim_below_acknowledged(stream).await
    }

    async fn acknowledged_floor(&self, stream: &str) -> Result<Option<EntryId>, Unavailable> {
        self.floor(stream).await.map_err(|e| Unavailable(e.details().to_owned()))
    }

    async fn servers(&self) -> Result<Vec<ServerId>, Unavailable> {
        self.server_ids().await
    }

    async fn stream_state(&self, stream: &str) -> Result<StreamState, Unavailable> {
        self.state_of(stream).await
    }

    async fn entries_exist(&self, stream: &str, entry_ids: &[String]) -> Result<Vec<bool>, Unavailable> {
        self.exist(stream, entry_ids).await
    }

    async fn reconnected(&self) {
        let mut events = self.client.reconnect_rx();
        let _ = events.recv().await;
    }
}

/// `rediss://…` → `redis://…` (likewise `-cluster`, `-sentinel`, and fred's `valkeys`).
fn plain_scheme(url: &str) -> String {
    let url = url.trim_start();
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let plain = scheme.to_ascii_lowercase().replacen("rediss", "redis", 1).replacen("valkeys", "valkey", 1);
            format!("{plain}://{rest}")
        }
        None => url.to_owned(),
    }
}
