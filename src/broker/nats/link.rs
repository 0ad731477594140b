//! The relay's own connections for publishing: a batch's messages are written as one buffer on
//! one connection and their PubAcks read back on the inbox that connection subscribed to (see
//! `publish` for why not through async-nats's client, whose per-message command channel and
//! header maps cost more than everything else the relay does).
//!
//! Connections are made on demand, one per batch in flight, and kept while they work: any
//! failure closes the connection (and the idle ones to the same server) and the batch's
//! unanswered messages are an outage (published again later, their `Nats-Msg-Id` lets the
//! stream drop a repeat). A connection that sat idle and turns out to be closed (the server
//! drops a client that left its pings unanswered) is replaced and the batch sent once more.
//! Everything else — stream settings, loss checks, health, reconnect events, the bridge — stays
//! with async-nats; links only publish, with the same servers, TLS and credentials.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::BytesMut;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::setup::Auth;
use super::wire::{self, MAX_READ, Op, clip, forbidden_subject};

/// Idle links kept (about one per claim loop).
const MAX_IDLE: usize = 8;
/// How long an idle link is trusted: a server pings a quiet client every two minutes by default
/// and drops it after two unanswered pings; a link idle longer is closed rather than tried.
const MAX_IDLE_FOR: Duration = Duration::from_secs(60);

/// A server links may connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Server {
    host: String,
    port: u16,
}

impl Server {
    fn parse(url: &str) -> Option<Self> {
        let (host, port) = crate::tls::host_port(url)?;
        Some(Self { host, port: port.unwrap_or(4222) })
    }
}

pub(super) struct Links {
    configured: Vec<Server>,
    /// The servers the cluster last announced (`connect_urls`), tried after the configured ones.
    announced: Mutex<Vec<Server>>,
    /// Where the next connection starts trying: the last server that worked (at first one
    /// chosen at random, so that relays spread over a cluster). A server, not a place in the
    /// list: a cluster announces its servers in no fixed order.
    preferred: Mutex<Server>,
    /// Set when the configuration asks for TLS.
    tls: Option<tokio_rustls::TlsConnector>,
    /// For a server that requires TLS unasked; made once.
    system_tls: OnceLock<Result<tokio_rustls::TlsConnector, String>>,
    auth: Auth,
    /// How long one server may take to connect, so that a batch's time reaches a second one.
    attempt: Duration,
    idle: Mutex<Vec<Link>>,
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

pub(super) struct Link {
    io: Box<dyn Io>,
    /// Bytes read but not yet parsed.
    read: BytesMut,
    pub server: Server,
    /// The subject this link's PubAcks come back under (`<inbox>.<batch>.<place>`).
    pub inbox: String,
    /// The batch this link is on: an answer to an earlier one is not taken for this one's.
    pub batch: u64,
    /// The largest message (headers and body) the server takes.
    pub max_payload: usize,
    /// The servers an `INFO` sent during an exchange announced, to learn after it.
    pub announced: Option<Vec<String>>,
    idle_since: Instant,
}

/// Why a link could not publish; its batch is an outage, never the rows' fault.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum LinkError {
    #[error("`{0}` is not nats://host:port or tls://host:port")]
    Url(String),
    #[error("nats: connecting to {at}: {detail}")]
    Connect { at: String, detail: String },
    #[error("nats: TLS to {at}: {detail}")]
    Tls { at: String, detail: String },
    #[error("nats: signing the server's nonce failed")]
    Sign,
    #[error("nats: {0}")]
    Refused(String),
    #[error("nats connection: {0}")]
    Io(String),
    #[error("nats closed the connection")]
    Closed,
    #[error("nats sent what handoff cannot read: {0}")]
    Protocol(String),
    #[error("nats: no PubAck within {0:?}")]
    NoAnswer(Duration),
}

impl Links {
    /// Links to `urls` (`nats://` or `tls://`, comma-separated in the config); `timeout` is
    /// the time a batch has.
    pub(super) fn new<'a>(
        urls: impl Iterator<Item = &'a str>,
        tls: Option<Arc<rustls::ClientConfig>>,
        auth: Auth,
        timeout: Duration,
    ) -> Result<Self, LinkError> {
        let configured: Vec<Server> = urls
            .map(|url| Server::parse(url).ok_or_else(|| LinkError::Url(url.to_owned())))
            .collect::<Result<_, _>>()?;
        if configured.is_empty() {
            return Err(LinkError::Url(String::new()));
        }
        Ok(Self {
            preferred: Mutex::new(configured[rand::random_range(0..configured.len())].clone()),
            configured,
            announced: Mutex::new(Vec::new()),
            tls: tls.map(tokio_rustls::TlsConnector::from),
            system_tls: OnceLock::new(),
            auth,
            attempt: timeout / 2,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// An idle link young enough to trust, or `None` when a new one must be made.
    pub(super) fn take_idle(&self) -> Option<Link> {
        let mut idle = self.idle.lock().expect("links lock");
        idle.retain(|link| link.idle_since.elapsed() < MAX_IDLE_FOR);
        idle.pop()
    }

    /// Keeps `link` for the next batch (it answered everything it was sent).
    pub(super) fn put_idle(&self, mut link: Link) {
        if let Some(announced) = link.announced.take() {
            self.learn(&announced);
        }
        link.idle_since = Instant::now();
        let mut idle = self.idle.lock().expect("links lock");
        if idle.len() < MAX_IDLE {
            idle.push(link);
        }
    }

    /// After a failure on a link to `server`: its idle links are closed, and the next
    /// connection starts from another server.
    pub(super) fn forget(&self, server: &Server) {
        self.idle.lock().expect("links lock").retain(|link| link.server != *server);
        let mut preferred = self.preferred.lock().expect("links lock");
        if *preferred == *server {
            *preferred = self.after(server);
        }
    }

    /// The server tried after `server`.
    fn after(&self, server: &Server) -> Server {
        let servers = self.servers();
        let at = servers.iter().position(|s| s == server).map_or(0, |at| at + 1);
        servers[at % servers.len()].clone()
    }

    fn servers(&self) -> Vec<Server> {
        let mut servers = self.configured.clone();
        for server in self.announced.lock().expect("links lock").iter() {
            if !servers.contains(server) {
                servers.push(server.clone());
            }
        }
        servers
    }

    /// A new link: each server tried once, from the last one that worked, each but the last
    /// for at most half the batch's time (the caller bounds the whole); one being tried when
    /// that time ran out is not the first next time.
    pub(super) async fn connect(&self) -> Result<Link, LinkError> {
        let servers = self.servers();
        let preferred = self.preferred.lock().expect("links lock").clone();
        let start = servers.iter().position(|s| *s == preferred).unwrap_or(0);
        let mut last = LinkError::Closed;
        for i in 0..servers.len() {
            let server = &servers[(start + i) % servers.len()];
            *self.preferred.lock().expect("links lock") = servers[(start + i + 1) % servers.len()].clone();
            let attempt = if i + 1 == servers.len() { Duration::MAX } else { self.attempt };
            match tokio::time::timeout(attempt, self.connect_to(server)).await {
                Ok(Ok((link, announced))) => {
                    *self.preferred.lock().expect("links lock") = server.clone();
                    self.learn(&announced);
                    return Ok(link);
                }
                Ok(Err(e)) => last = e,
                Err(_) => {
                    let detail = format!("no answer within {attempt:?}");
                    last = LinkError::Connect { at: format!("{}:{}", server.host, server.port), detail };
                }
            }
        }
        Err(last)
    }

    /// The servers a cluster announced (`host:port`) become those tried after the configured
    /// ones, in place of those it announced before (a pod that went away is not tried for
    /// ever). A server alone announces none: nothing changes.
    fn learn(&self, announced: &[String]) {
        if announced.is_empty() {
            return;
        }
        let servers = announced.iter().filter_map(|url| Server::parse(&format!("nats://{url}")));
        *self.announced.lock().expect("links lock") = servers.collect();
    }

    /// Connects, upgrades to TLS, authenticates and subscribes to the link's inbox (CONNECT,
    /// SUB, then PING: the PONG says both were taken); with the servers the one reached
    /// announced.
    async fn connect_to(&self, server: &Server) -> Result<(Link, Vec<String>), LinkError> {
        let at = format!("{}:{}", server.host, server.port);
        let failed = |e: std::io::Error| LinkError::Connect { at: at.clone(), detail: e.to_string() };
        let tcp = TcpStream::connect((server.host.as_str(), server.port)).await.map_err(failed)?;
        tcp.set_nodelay(true).map_err(failed)?;
        let mut link = Link {
            io: Box::new(tcp),
            read: BytesMut::with_capacity(16 * 1024),
            server: server.clone(),
            inbox: String::new(),
            batch: 0,
            max_payload: 0,
            announced: None,
            idle_since: Instant::now(),
        };
        let info = match link.next_op().await? {
            Op::Info(info) => info,
            _ => return Err(LinkError::Protocol("the server did not start with INFO".into())),
        };
        let info: async_nats::ServerInfo =
            serde_json::from_slice(&info).map_err(|e| LinkError::Protocol(clip(&format!("its INFO: {e}"))))?;
        // A server that requires TLS gets it whatever the URL said, verified against the
        // system's roots, as async-nats does.
        let tls = match (&self.tls, info.tls_required) {
            (Some(tls), _) => Some(tls.clone()),
            (None, true) => {
                let system = self.system_tls.get_or_init(system_tls).clone();
                Some(system.map_err(|detail| LinkError::Tls { at: at.clone(), detail })?)
            }
            (None, false) => None,
        };
        if let Some(tls) = &tls {
            if !link.read.is_empty() {
                return Err(LinkError::Protocol("bytes before the TLS handshake".into()));
            }
            let name = ServerName::try_from(server.host.clone())
                .map_err(|e| LinkError::Tls { at: at.clone(), detail: e.to_string() })?;
            let plain = link.io;
            let secured =
                tls.connect(name, plain).await.map_err(|e| LinkError::Tls { at: at.clone(), detail: e.to_string() })?;
            link.io = Box::new(secured);
        }
        let mut connect = self.auth.fields(&info.nonce).map_err(|_| LinkError::Sign)?;
        for (key, value) in [
            ("verbose", false.into()),
            ("pedantic", false.into()),
            ("tls_required", tls.is_some().into()),
            ("lang", "rust".into()),
            ("version", env!("CARGO_PKG_VERSION").into()),
            ("name", "handoff".into()),
            ("protocol", 1.into()),
            ("echo", false.into()),
            ("headers", true.into()),
            ("no_responders", true.into()),
        ] {
            connect.insert(key.into(), value);
        }
        let inbox = format!("_INBOX.{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>());
        let hello = format!("CONNECT {}\r\nSUB {inbox}.> 1\r\nPING\r\n", serde_json::Value::Object(connect));
        link.write(hello.as_bytes()).await?;
        loop {
            match link.next_op().await? {
                Op::Pong => break,
                Op::Err(e) => return Err(LinkError::Refused(clip(&e))),
                Op::Ping => link.write(b"PONG\r\n").await?,
                _ => {}
            }
        }
        link.inbox = inbox;
        link.max_payload = info.max_payload;
        Ok((link, info.connect_urls))
    }
}

/// TLS verified against the system's roots, for a server that requires it unasked.
fn system_tls() -> Result<tokio_rustls::TlsConnector, String> {
    let config = crate::tls::client_config(
        "nats.tls",
        crate::tls::TlsMode::VerifyFull,
        &crate::tls::config::TlsConfig::default(),
    );
    config.map(|c| Arc::new(c).into()).map_err(|e| e.to_string())
}

/// What came back for a batch.
pub(super) enum Reply<'a> {
    /// The answer to the message at `place`.
    Answer { place: usize, status: Option<u16>, payload: &'a [u8] },
    /// The server would not let this connection publish one message to `subject` (its
    /// permissions): no PubAck will come for it; the connection stays.
    Forbidden { subject: &'a str, said: String },
}

/// Why an exchange failed, and whether any answer had come by then (after one, the server
/// certainly took part of the batch: it is not sent again on another link).
pub(super) struct Failure {
    pub answered: bool,
    pub why: LinkError,
}

impl Link {
    /// Sends `messages` (encoded for this link's current batch) and hands each reply to
    /// `settle`, which says how many messages it settled, until `expected` are.
    pub(super) async fn exchange(
        &mut self,
        messages: &[u8],
        expected: usize,
        mut settle: impl FnMut(Reply<'_>) -> usize,
    ) -> Result<(), Failure> {
        self.write(messages).await.map_err(|why| Failure { answered: false, why })?;
        let mut settled = 0;
        while settled < expected {
            let failed = |why| Failure { answered: settled > 0, why };
            match self.next_op().await.map_err(failed)? {
                Op::Answer { to: Some((batch, place)), status, payload } if batch == self.batch => {
                    settled += settle(Reply::Answer { place, status, payload: &payload });
                }
                Op::Ping => self.write(b"PONG\r\n").await.map_err(failed)?,
                // One refusal per message refused; one that names no message of the batch (a
                // subject the server quoted otherwise) cannot be matched: the batch fails.
                Op::Err(e) => {
                    match forbidden_subject(&e).map(|subject| settle(Reply::Forbidden { subject, said: clip(&e) })) {
                        Some(1..) => settled += 1,
                        _ => return Err(failed(LinkError::Refused(clip(&e)))),
                    }
                }
                Op::Info(info) => {
                    let info = serde_json::from_slice::<async_nats::ServerInfo>(&info);
                    if let Some(urls) = info.ok().map(|i| i.connect_urls).filter(|urls| !urls.is_empty()) {
                        self.announced = Some(urls);
                    }
                }
                Op::Answer { .. } | Op::Pong | Op::Ok => {}
            }
        }
        Ok(())
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), LinkError> {
        self.io.write_all(bytes).await.map_err(|e| LinkError::Io(e.to_string()))?;
        self.io.flush().await.map_err(|e| LinkError::Io(e.to_string()))
    }

    /// The next operation, reading as much as it needs.
    async fn next_op(&mut self) -> Result<Op, LinkError> {
        loop {
            if let Some(op) = wire::parse(&mut self.read).map_err(|e| LinkError::Protocol(e.0))? {
                return Ok(op);
            }
            if self.read.len() > MAX_READ {
                return Err(LinkError::Protocol(format!("an operation over {MAX_READ} bytes")));
            }
            if self.read.capacity() - self.read.len() < 4096 {
                self.read.reserve(16 * 1024);
            }
            let n = self.io.read_buf(&mut self.read).await.map_err(|e| LinkError::Io(e.to_string()))?;
            if n == 0 {
                return Err(LinkError::Closed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(io: tokio::io::DuplexStream, batch: u64) -> Link {
        let server = Server { host: "127.0.0.1".into(), port: 4222 };
        let (inbox, read, idle_since) = ("_INBOX.t".into(), BytesMut::new(), Instant::now());
        Link { io: Box::new(io), read, server, inbox, batch, max_payload: 1 << 20, announced: None, idle_since }
    }

    #[tokio::test]
    async fn an_answer_to_an_earlier_batch_is_not_taken_for_this_ones() {
        let (ours, mut theirs) = tokio::io::duplex(4096);
        let mut link = link(ours, 2);
        theirs.write_all(b"MSG _INBOX.t.1.0 1 5\r\nstale\r\nMSG _INBOX.t.2.0 1 5\r\nfresh\r\n").await.unwrap();
        let mut seen = Vec::new();
        let settle = |reply: Reply<'_>| match reply {
            Reply::Answer { place, payload, .. } => {
                seen.push((place, payload.to_vec()));
                1
            }
            Reply::Forbidden { .. } => 0,
        };
        link.exchange(b"", 1, settle).await.ok().expect("answered");
        assert_eq!(seen, vec![(0, b"fresh".to_vec())]);
    }

    #[tokio::test]
    async fn a_failed_server_is_not_tried_first_and_a_cluster_announcement_replaces_the_last() {
        let auth = Auth::None;
        let links =
            Links::new(["nats://a:4222", "nats://b:4222"].into_iter(), None, auth, Duration::from_secs(2)).unwrap();
        let (a, b) = (Server::parse("nats://a:4222").unwrap(), Server::parse("nats://b:4222").unwrap());
        *links.preferred.lock().unwrap() = a.clone();
        links.forget(&a);
        assert_eq!(*links.preferred.lock().unwrap(), b);
        links.learn(&["c:4222".into(), "d:4222".into()]);
        links.learn(&["d:4222".into()]);
        links.learn(&[]);
        let hosts: Vec<String> = links.servers().into_iter().map(|s| s.host).collect();
        assert_eq!(hosts, ["a", "b", "d"], "configured, then the latest announcement");
        links.forget(&Server::parse("nats://d:4222").unwrap());
        assert_eq!(*links.preferred.lock().unwrap(), b, "only the preferred server moves it");
    }
}
