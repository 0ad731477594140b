//! The relay's own connections for plain appends: a batch's `XADD`s (and its durability gate)
//! are written as one buffer on one connection and their replies read back in order (see
//! [`super::resp`] for why not through the Redis client's commands).
//!
//! Connections are made on demand, one per append in flight to a node, and kept while they
//! work: any failure closes the connection, and the caller's rows are released. Everything
//! else — where the primaries are (standalone, sentinel, cluster slot map), reconnection
//! events, operator commands — stays with the Redis client; links only carry appends, with the
//! same credentials, database and TLS settings as the client.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::resp::{self, Reply};

/// Idle links kept per node (about one per claim loop).
const MAX_IDLE_PER_NODE: usize = 8;
/// The most a batch's replies may hold before the exchange is given up as a protocol error.
const MAX_REPLY_BYTES: usize = 64 << 20;

/// Where a batch's appends for one node go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Node {
    pub host: String,
    pub port: u16,
    /// The name the node's certificate must carry (the host, unless the Redis client maps it).
    pub tls_name: String,
}

impl Node {
    /// `host:port`, for messages.
    fn at(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

pub(super) struct Links {
    tls: Option<tokio_rustls::TlsConnector>,
    username: Option<String>,
    /// Never logged: links only ever send it.
    password: Option<String>,
    database: Option<u8>,
    connect_timeout: Duration,
    idle: Mutex<HashMap<Node, Vec<Link>>>,
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

struct Link {
    io: Box<dyn Io>,
    /// Bytes read but not yet parsed.
    read: BytesMut,
}

impl Links {
    pub(super) fn new(
        config: &fred::types::config::Config,
        tls: Option<Arc<rustls::ClientConfig>>,
        timeout: Duration,
    ) -> Self {
        Self {
            tls: tls.map(tokio_rustls::TlsConnector::from),
            username: config.username.clone(),
            password: config.password.clone(),
            database: config.database,
            connect_timeout: timeout,
            idle: Mutex::new(HashMap::new()),
        }
    }

    /// Sends `commands` (`count` of them, encoded) to `node` and returns their replies in order;
    /// `Err` when the exchange failed as a whole (no reply can be trusted, the link is closed).
    /// A link that sat idle and turns out to be closed (a server timeout, a proxy dropping idle
    /// connections) is replaced and the batch sent once more on a new one, whole — so a gate's
    /// `WAIT` still follows its own appends on its own connection.
    pub(super) async fn exchange(
        &self,
        node: &Node,
        commands: &[u8],
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<Reply>, LinkError> {
        let run = async {
            if let Some(mut link) = self.take_idle(node) {
                match link.exchange(commands, count).await {
                    Ok(replies) => return Ok((link, replies)),
                    Err(Failure { replied: true, why }) => return Err(why),
                    Err(Failure { replied: false, .. }) => {}
                }
            }
            let mut link = self.connect(node).await?;
            let replies = link.exchange(commands, count).await.map_err(|f| f.why)?;
            Ok((link, replies))
        };
        let (link, replies) =
            tokio::time::timeout(timeout, run).await.map_err(|_| LinkError::NoReply { at: node.at(), timeout })??;
        self.put_idle(node, link);
        Ok(replies)
    }

    fn take_idle(&self, node: &Node) -> Option<Link> {
        self.idle.lock().expect("links lock").get_mut(node).and_then(Vec::pop)
    }

    fn put_idle(&self, node: &Node, link: Link) {
        let mut idle = self.idle.lock().expect("links lock");
        let links = idle.entry(node.clone()).or_default();
        if links.len() < MAX_IDLE_PER_NODE {
            links.push(link);
        }
    }

    /// Drops every idle link to `node` (it stopped being a primary, or failed).
    pub(super) fn forget(&self, node: &Node) {
        self.idle.lock().expect("links lock").remove(node);
    }

    async fn connect(&self, node: &Node) -> Result<Link, LinkError> {
        let at = node.at();
        let connecting = async {
            let failed = |e: std::io::Error| LinkError::Connect { at: at.clone(), detail: e.to_string() };
            let tcp = TcpStream::connect((node.host.as_str(), node.port)).await.map_err(failed)?;
            tcp.set_nodelay(true).map_err(failed)?;
            let io: Box<dyn Io> = match &self.tls {
                None => Box::new(tcp),
                Some(tls) => {
                    let name = ServerName::try_from(node.tls_name.clone()).map_err(|e| LinkError::TlsName {
                        at: at.clone(),
                        name: node.tls_name.clone(),
                        detail: e.to_string(),
                    })?;
                    let tls = tls.connect(name, tcp).await;
                    Box::new(tls.map_err(|e| LinkError::Tls { at: at.clone(), detail: e.to_string() })?)
                }
            };
            Ok::<_, LinkError>(io)
        };
        let io = tokio::time::timeout(self.connect_timeout, connecting)
            .await
            .map_err(|_| LinkError::ConnectTimeout { at: at.clone(), timeout: self.connect_timeout })??;
        let mut link = Link { io, read: BytesMut::with_capacity(16 * 1024) };
        self.hello(&mut link, &at).await?;
        Ok(link)
    }

    /// Authenticates and selects the database, as the Redis client does on each connection.
    async fn hello(&self, link: &mut Link, at: &str) -> Result<(), LinkError> {
        let mut out = BytesMut::new();
        let mut count = 0;
        if let Some(password) = &self.password {
            match &self.username {
                Some(user) => resp::command(&mut out, &[b"AUTH", user.as_bytes(), password.as_bytes()]),
                None => resp::command(&mut out, &[b"AUTH", password.as_bytes()]),
            }
            count += 1;
        }
        if let Some(db) = self.database {
            resp::command(&mut out, &[b"SELECT", db.to_string().as_bytes()]);
            count += 1;
        }
        if count == 0 {
            return Ok(());
        }
        for reply in link.exchange(&out, count).await.map_err(|f| f.why)? {
            if let Reply::Error(reply) = reply {
                return Err(LinkError::Refused { at: at.to_owned(), reply });
            }
        }
        Ok(())
    }
}

/// Why an exchange failed, and whether any reply had come back by then (after one, the
/// server has certainly run part of the batch: it is not sent again).
struct Failure {
    replied: bool,
    why: LinkError,
}

/// Why the relay's own connection to a node failed; its appends are unavailable, not refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum LinkError {
    #[error("connecting to redis at {at}: {detail}")]
    Connect { at: String, detail: String },
    #[error("connecting to redis at {at}: no connection within {timeout:?}")]
    ConnectTimeout { at: String, timeout: Duration },
    #[error("redis at {at}: `{name}` is not a TLS server name: {detail}")]
    TlsName { at: String, name: String, detail: String },
    #[error("TLS to redis at {at}: {detail}")]
    Tls { at: String, detail: String },
    #[error("redis at {at}: {reply}")]
    Refused { at: String, reply: String },
    #[error("redis connection: {0}")]
    Io(String),
    #[error("redis closed the connection")]
    Closed,
    #[error("{0}")]
    Protocol(String),
    #[error("no reply from redis at {at} within {timeout:?}")]
    NoReply { at: String, timeout: Duration },
    #[error("no cluster node serves this slot yet")]
    NoNode,
    #[error("cluster node {0} is not connected")]
    NodeDown(String),
    #[error("not connected to a redis primary")]
    NoPrimary,
}

impl Link {
    async fn exchange(&mut self, commands: &[u8], count: usize) -> Result<Vec<Reply>, Failure> {
        let failed = |replied: bool| move |e: std::io::Error| Failure { replied, why: LinkError::Io(e.to_string()) };
        self.io.write_all(commands).await.map_err(failed(false))?;
        self.io.flush().await.map_err(failed(false))?;
        let mut replies = Vec::with_capacity(count);
        while replies.len() < count {
            match resp::parse(&mut self.read) {
                Ok(Some(reply)) => replies.push(reply),
                Ok(None) => {
                    // Replies to a batch of appends are ids and errors: far less than this. A
                    // server that keeps sending without finishing a reply is not one.
                    if self.read.len() > MAX_REPLY_BYTES {
                        let why = format!("a reply over {MAX_REPLY_BYTES} bytes");
                        return Err(Failure { replied: true, why: LinkError::Protocol(why) });
                    }
                    if self.read.capacity() - self.read.len() < 4096 {
                        self.read.reserve(16 * 1024);
                    }
                    let n = self.io.read_buf(&mut self.read).await.map_err(failed(!replies.is_empty()))?;
                    if n == 0 {
                        return Err(Failure { replied: !replies.is_empty(), why: LinkError::Closed });
                    }
                }
                Err(e) => return Err(Failure { replied: true, why: LinkError::Protocol(e.to_string()) }),
            }
        }
        Ok(replies)
    }
}
