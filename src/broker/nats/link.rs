//! The relay's own connections for publishing: a batch's messages are written as one buffer on
//! one connection and their PubAcks read back on the inbox that connection subscribed to (see
//! `publish` for why not through async-nats's client, whose per-message command channel and
//! header maps cost more than everything else the relay does).
//!
//! Connections are made on demand, one per batch in flight, and kept while they work: any
//! failure closes the connection and the batch's unanswered messages are an outage (published
//! again later, their `Nats-Msg-Id` lets the stream drop a repeat). A connection that sat idle
//! and turns out to be closed (the server drops a client that left its pings unanswered) is
//! replaced and the batch sent once more. Everything else — stream settings, loss checks,
//! health, reconnect events, the bridge — stays with async-nats; links only publish, with the
//! same servers, TLS and credentials.

use std::sync::Mutex;

use bytes::{Buf, Bytes, BytesMut};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Idle links kept (about one per claim loop).
const MAX_IDLE: usize = 8;
/// The longest control line (`INFO` with a cluster's URLs is the longest a server sends).
const MAX_LINE: usize = 1 << 20;
/// The most a batch's answers may hold before the exchange is given up as a protocol error.
const MAX_READ: usize = 64 << 20;

/// How a link proves who it is, each secret read from its file once. Never printed.
pub(super) enum Auth {
    None,
    Token(String),
    User {
        user: String,
        password: String,
    },
    /// An NKey seed: the server's nonce is signed with it.
    Nkey(std::sync::Arc<nkeys::KeyPair>),
    /// A `.creds` file: its user JWT, and its seed to sign the nonce.
    Credentials {
        jwt: String,
        key: std::sync::Arc<nkeys::KeyPair>,
    },
}

impl Auth {
    /// The user JWT and NKey seed of a `.creds` file (as `nsc` writes it: each between a
    /// `-----BEGIN …-----` and an `------END …------` line), or what is missing.
    pub(super) fn credentials(text: &str) -> Result<Self, String> {
        let mut blocks = Vec::new();
        let mut lines = text.lines().map(str::trim);
        while let Some(line) = lines.next() {
            if line.starts_with("---") && line.contains("BEGIN") {
                blocks.push(lines.next().unwrap_or_default());
            }
        }
        let (Some(jwt), Some(seed)) = (blocks.first().filter(|b| !b.is_empty()), blocks.get(1)) else {
            return Err("no user JWT and NKey seed blocks".into());
        };
        let key = nkeys::KeyPair::from_seed(seed).map_err(|_| "its NKey seed is not one".to_owned())?;
        Ok(Auth::Credentials { jwt: (*jwt).to_owned(), key: std::sync::Arc::new(key) })
    }

    /// The CONNECT fields that authenticate, the nonce signed where a key is used.
    fn fields(&self, nonce: &str) -> Result<serde_json::Map<String, serde_json::Value>, LinkError> {
        let mut fields = serde_json::Map::new();
        let sign = |key: &nkeys::KeyPair| {
            key.sign(nonce.as_bytes()).map(|s| crate::base64::encode_url(&s)).map_err(|_| LinkError::Sign)
        };
        match self {
            Auth::None => {}
            Auth::Token(token) => {
                fields.insert("auth_token".into(), token.clone().into());
            }
            Auth::User { user, password } => {
                fields.insert("user".into(), user.clone().into());
                fields.insert("pass".into(), password.clone().into());
            }
            Auth::Nkey(key) => {
                fields.insert("nkey".into(), key.public_key().into());
                fields.insert("sig".into(), sign(key)?.into());
            }
            Auth::Credentials { jwt, key } => {
                fields.insert("jwt".into(), jwt.clone().into());
                fields.insert("sig".into(), sign(key)?.into());
            }
        }
        Ok(fields)
    }
}

/// A server links may connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Server {
    host: String,
    port: u16,
}

pub(super) struct Links {
    /// The configured servers, then those the cluster announced (`connect_urls`).
    servers: Mutex<Vec<Server>>,
    /// Where the next connection starts trying: the last server that worked.
    current: Mutex<usize>,
    /// Set when the configuration asks for TLS.
    tls: Option<tokio_rustls::TlsConnector>,
    auth: Auth,
    /// async-nats's client, only for unique inbox names.
    client: async_nats::Client,
    idle: Mutex<Vec<Link>>,
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

pub(super) struct Link {
    io: Box<dyn Io>,
    /// Bytes read but not yet parsed.
    read: BytesMut,
    /// The subject this link's PubAcks come back under (`<inbox>.<place>`).
    pub inbox: String,
    /// The largest message (headers and body) the server takes.
    pub max_payload: usize,
}

/// Why a link could not publish; its batch is an outage, never the rows' fault.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum LinkError {
    #[error("nats: `{0}` is not nats://host:port or tls://host:port")]
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
}

impl Links {
    /// Links to `urls` (`nats://` or `tls://`, comma-separated in the config).
    pub(super) fn new<'a>(
        urls: impl Iterator<Item = &'a str>,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
        auth: Auth,
        client: async_nats::Client,
    ) -> Result<Self, LinkError> {
        let servers = urls
            .map(|url| match crate::tls::host_port(url) {
                Some((host, port)) => Ok(Server { host, port: port.unwrap_or(4222) }),
                None => Err(LinkError::Url(url.to_owned())),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            servers: Mutex::new(servers),
            current: Mutex::new(0),
            tls: tls.map(tokio_rustls::TlsConnector::from),
            auth,
            client,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// An idle link, or `None` when a new one must be made.
    pub(super) fn take_idle(&self) -> Option<Link> {
        self.idle.lock().expect("links lock").pop()
    }

    /// Keeps `link` for the next batch (it answered everything it was sent).
    pub(super) fn put_idle(&self, link: Link) {
        let mut idle = self.idle.lock().expect("links lock");
        if idle.len() < MAX_IDLE {
            idle.push(link);
        }
    }

    /// A new link: each server tried once, from the last one that worked. The caller bounds
    /// the time it may take; a server that was being tried when that time ran out (one that
    /// swallows packets) is not the first tried the next time.
    pub(super) async fn connect(&self) -> Result<Link, LinkError> {
        let servers = self.servers.lock().expect("links lock").clone();
        let start = *self.current.lock().expect("links lock");
        let mut last = None;
        for i in 0..servers.len() {
            let at = (start + i) % servers.len();
            *self.current.lock().expect("links lock") = (at + 1) % servers.len();
            match self.connect_to(&servers[at]).await {
                Ok((link, announced)) => {
                    *self.current.lock().expect("links lock") = at;
                    self.learn(&announced);
                    return Ok(link);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| LinkError::Url(String::new())))
    }

    /// Adds the servers a cluster announced (`host:port`) to those tried.
    fn learn(&self, announced: &[String]) {
        let mut servers = self.servers.lock().expect("links lock");
        for url in announced {
            if let Some((host, Some(port))) = crate::tls::host_port(&format!("nats://{url}")) {
                let server = Server { host, port };
                if !servers.contains(&server) {
                    servers.push(server);
                }
            }
        }
    }

    /// Connects, upgrades to TLS, authenticates (CONNECT, then PING answered by PONG) and
    /// subscribes to the link's inbox; with the servers the one reached announced.
    async fn connect_to(&self, server: &Server) -> Result<(Link, Vec<String>), LinkError> {
        let at = format!("{}:{}", server.host, server.port);
        let failed = |e: std::io::Error| LinkError::Connect { at: at.clone(), detail: e.to_string() };
        let tcp = TcpStream::connect((server.host.as_str(), server.port)).await.map_err(failed)?;
        tcp.set_nodelay(true).map_err(failed)?;
        let mut link =
            Link { io: Box::new(tcp), read: BytesMut::with_capacity(16 * 1024), inbox: String::new(), max_payload: 0 };
        let info = match link.next_op().await? {
            Op::Info(info) => info,
            _ => return Err(LinkError::Protocol("the server did not start with INFO".into())),
        };
        let info: async_nats::ServerInfo =
            serde_json::from_slice(&info).map_err(|e| LinkError::Protocol(format!("its INFO: {e}")))?;
        // A server that requires TLS gets it whatever the URL said, verified against the
        // system's roots, as async-nats does.
        let required = match (&self.tls, info.tls_required) {
            (Some(tls), _) => Some(tls.clone()),
            (None, true) => Some(default_tls().map_err(|detail| LinkError::Tls { at: at.clone(), detail })?),
            (None, false) => None,
        };
        if let Some(tls) = &required {
            let name = ServerName::try_from(server.host.clone())
                .map_err(|e| LinkError::Tls { at: at.clone(), detail: e.to_string() })?;
            let Link { io, read, .. } = link;
            if !read.is_empty() {
                return Err(LinkError::Protocol("bytes before the TLS handshake".into()));
            }
            let tls =
                tls.connect(name, io).await.map_err(|e| LinkError::Tls { at: at.clone(), detail: e.to_string() })?;
            link = Link { io: Box::new(tls), read, inbox: String::new(), max_payload: 0 };
        }
        let mut connect = self.auth.fields(&info.nonce)?;
        for (key, value) in [
            ("verbose", false.into()),
            ("pedantic", false.into()),
            ("tls_required", required.is_some().into()),
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
        let inbox = self.client.new_inbox();
        let hello = format!("CONNECT {}\r\nPING\r\nSUB {inbox}.* 1\r\n", serde_json::Value::Object(connect));
        link.io.write_all(hello.as_bytes()).await.map_err(|e| LinkError::Io(e.to_string()))?;
        link.io.flush().await.map_err(|e| LinkError::Io(e.to_string()))?;
        loop {
            match link.next_op().await? {
                Op::Pong => break,
                Op::Err(e) => return Err(LinkError::Refused(e)),
                Op::Ping => link.pong().await?,
                _ => {}
            }
        }
        link.inbox = inbox;
        link.max_payload = info.max_payload;
        Ok((link, info.connect_urls))
    }
}

/// TLS verified against the system's roots, for a server that requires it unasked.
fn default_tls() -> Result<tokio_rustls::TlsConnector, String> {
    let config = crate::tls::client_config(
        "nats.tls",
        crate::tls::TlsMode::VerifyFull,
        &crate::tls::config::TlsConfig::default(),
    );
    config.map(|c| std::sync::Arc::new(c).into()).map_err(|e| e.to_string())
}

/// What the server sent, as far as publishing needs.
enum Op {
    Info(Bytes),
    /// A message on the link's inbox: the place its subject names, the status of its header
    /// block (503: no responders), its payload.
    Answer {
        place: Option<usize>,
        status: Option<u16>,
        payload: Bytes,
    },
    Ping,
    Pong,
    Ok,
    Err(String),
}

/// Why an exchange failed, and whether any answer had come by then (after one, the server
/// certainly took part of the batch: it is not sent again on another link).
pub(super) struct Failure {
    pub answered: bool,
    pub why: LinkError,
}

impl Link {
    /// Sends `messages` (encoded) and hands each answer to `answer` (place, status, payload)
    /// until `expected` have come.
    pub(super) async fn exchange(
        &mut self,
        messages: &[u8],
        expected: usize,
        mut answer: impl FnMut(usize, Option<u16>, &[u8]) -> bool,
    ) -> Result<(), Failure> {
        let io = |answered: bool| move |e: std::io::Error| Failure { answered, why: LinkError::Io(e.to_string()) };
        self.io.write_all(messages).await.map_err(io(false))?;
        self.io.flush().await.map_err(io(false))?;
        let mut answered = 0;
        while answered < expected {
            let failed = |why| Failure { answered: answered > 0, why };
            match self.next_op().await.map_err(failed)? {
                Op::Answer { place: Some(place), status, payload } => {
                    if answer(place, status, &payload) {
                        answered += 1;
                    }
                }
                Op::Ping => self.pong().await.map_err(failed)?,
                // A publish the server refused (a permission it lacks): no PubAck will come.
                Op::Err(e) => return Err(failed(LinkError::Refused(e))),
                Op::Answer { place: None, .. } | Op::Info(_) | Op::Pong | Op::Ok => {}
            }
        }
        Ok(())
    }

    async fn pong(&mut self) -> Result<(), LinkError> {
        self.io.write_all(b"PONG\r\n").await.map_err(|e| LinkError::Io(e.to_string()))
    }

    /// The next operation, reading as much as it needs.
    async fn next_op(&mut self) -> Result<Op, LinkError> {
        loop {
            if let Some(op) = parse(&mut self.read)? {
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

/// One operation from the front of `read`, `None` until all of it has arrived.
fn parse(read: &mut BytesMut) -> Result<Option<Op>, LinkError> {
    let Some(end) = read.windows(2).position(|w| w == b"\r\n") else {
        return if read.len() > MAX_LINE {
            Err(LinkError::Protocol(format!("a line over {MAX_LINE} bytes")))
        } else {
            Ok(None)
        };
    };
    let line = std::str::from_utf8(&read[..end]).map_err(|_| LinkError::Protocol("a line that is not UTF-8".into()))?;
    let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
    let simple = match verb.to_ascii_uppercase().as_str() {
        "PING" => Some(Op::Ping),
        "PONG" => Some(Op::Pong),
        "+OK" => Some(Op::Ok),
        "-ERR" => Some(Op::Err(rest.trim().trim_matches('\'').to_owned())),
        "INFO" => Some(Op::Info(Bytes::copy_from_slice(rest.as_bytes()))),
        "MSG" | "HMSG" => None,
        _ => return Err(LinkError::Protocol(format!("an unknown operation `{}`", line.escape_debug()))),
    };
    if let Some(op) = simple {
        read.advance(end + 2);
        return Ok(Some(op));
    }
    // MSG <subject> <sid> [reply] <size> | HMSG <subject> <sid> [reply] <header size> <size>
    let with_headers = verb.eq_ignore_ascii_case("HMSG");
    let parts: Vec<&str> = rest.split_ascii_whitespace().collect();
    let number = |s: Option<&&str>| s.and_then(|s| s.parse::<usize>().ok());
    let (subject, header_len, total) = match (with_headers, parts.len()) {
        (false, 3 | 4) => (parts[0], 0, number(parts.last())),
        (true, 4 | 5) => (parts[0], number(parts.get(parts.len() - 2)).unwrap_or(usize::MAX), number(parts.last())),
        _ => return Err(LinkError::Protocol(format!("a message line `{}`", line.escape_debug()))),
    };
    let Some(total) = total.filter(|&t| header_len <= t && t <= MAX_READ) else {
        return Err(LinkError::Protocol(format!("a message line `{}`", line.escape_debug())));
    };
    if read.len() < end + 2 + total + 2 {
        return Ok(None);
    }
    let place = subject.rsplit('.').next().and_then(|p| p.parse::<usize>().ok());
    read.advance(end + 2);
    let message = read.split_to(total).freeze();
    read.advance(2);
    let status = with_headers.then(|| status(&message[..header_len])).flatten();
    Ok(Some(Op::Answer { place, status, payload: message.slice(header_len..) }))
}

/// Operations taken off the front of `data` until the rest is incomplete or refused (the fuzz
/// target).
#[cfg(fuzzing)]
pub(super) fn parse_all(data: &[u8]) {
    let mut read = BytesMut::from(data);
    while let Ok(Some(_)) = parse(&mut read) {}
}

/// The status code of a header block (`NATS/1.0 503`), if it has one.
fn status(headers: &[u8]) -> Option<u16> {
    let first = headers.split(|&b| b == b'\r').next()?;
    let code = std::str::from_utf8(first).ok()?.strip_prefix("NATS/1.0")?.split_ascii_whitespace().next()?;
    code.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(input: &[u8]) -> Vec<Op> {
        let mut read = BytesMut::from(input);
        let mut ops = Vec::new();
        while let Some(op) = parse(&mut read).unwrap() {
            ops.push(op);
        }
        assert!(read.is_empty(), "left: {read:?}");
        ops
    }

    #[test]
    fn answers_carry_their_place_status_and_payload_and_a_partial_one_waits() {
        let input = b"PING\r\nMSG _INBOX.a.7 1 10\r\n{\"seq\":42}\r\nHMSG _INBOX.a.2 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n+OK\r\n";
        let got = ops(input);
        assert!(matches!(got[0], Op::Ping));
        assert!(
            matches!(&got[1], Op::Answer { place: Some(7), status: None, payload } if &payload[..] == b"{\"seq\":42}")
        );
        assert!(matches!(&got[2], Op::Answer { place: Some(2), status: Some(503), payload } if payload.is_empty()));
        assert!(matches!(got[3], Op::Ok));
        let mut partial = BytesMut::from(&b"MSG _INBOX.a.7 1 10\r\n{\"seq\":"[..]);
        assert!(parse(&mut partial).unwrap().is_none(), "the payload has not all come");
    }

    #[test]
    fn a_bad_line_is_a_protocol_error_naming_it() {
        for bad in [&b"WHAT\r\n"[..], b"MSG a 1\r\n", b"HMSG a 1 9 4\r\n"] {
            let error = parse(&mut BytesMut::from(bad)).err().expect("refused");
            assert!(matches!(error, LinkError::Protocol(_)), "{error}");
        }
    }

    #[test]
    fn a_credentials_file_gives_its_jwt_and_seed_and_a_broken_one_says_so() {
        let seed = nkeys::KeyPair::new_user().seed().unwrap();
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\neyJ0eXAi.payload.sig\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
        );
        let Ok(Auth::Credentials { jwt, key }) = Auth::credentials(&creds) else { panic!("parsed") };
        assert_eq!(jwt, "eyJ0eXAi.payload.sig");
        let fields = Auth::Credentials { jwt, key }.fields("nonce").unwrap();
        assert_eq!(fields["jwt"], "eyJ0eXAi.payload.sig");
        assert!(fields["sig"].as_str().is_some_and(|s| !s.contains(['=', '+', '/'])), "URL-safe, unpadded");
        assert!(Auth::credentials("-----BEGIN NATS USER JWT-----\nabc\n").is_err());
        assert!(Auth::credentials(&creds.replace(&seed, "SUnotaseed")).is_err());
    }
}
