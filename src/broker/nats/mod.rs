//! NATS JetStream behind the broker seams: the owner side here (`[[relay]] broker = "nats"`),
//! the consumer side in `group` (`[[bridge]] broker = "nats"`). An entry is a message on the
//! subject the relay's template gives (the seam's "stream"), its payload field the body and its
//! other fields headers (`message`: the mapping and what a PubAck means); published with
//! `Nats-Msg-Id` = event id, so the stream's duplicate window drops a repeat and its PubAck says
//! so (`duplicate`): handoff's `Duplicate`. The PubAck's stream sequence is the entry id. A
//! batch's publishes are all sent before any acknowledgement is awaited (many in flight, never a
//! round trip per entry) on one of the relay's own connections (`link`), their PubAcks gathered
//! on its inbox (`publish`); the entries of an ordered run are published one after the other,
//! each after the previous one's PubAck, and stop at the first failure (the rest `Skipped`), so
//! a run lands in order or its tail comes back for the next batch.

pub(crate) mod config;
pub(crate) mod group;
mod link;
mod message;
mod publish;
mod setup;
mod unreadable;
mod wire;

/// A header block checked and split as the bridge does after a reconnect (the fuzz target).
#[cfg(fuzzing)]
pub(crate) fn check_headers(raw: &[u8]) {
    let _ = (unreadable::header_problem(raw), unreadable::lenient_fields(raw));
}

/// Operations from a NATS server (or whoever answers on a plain `nats://` connection), taken as
/// a publishing link takes them (the fuzz target).
#[cfg(fuzzing)]
pub(crate) fn server_ops(data: &[u8]) {
    wire::parse_all(data)
}

use std::sync::Arc;
use std::time::Duration;

use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream::stream::RawMessageErrorKind;
use bytes::Bytes;
use tokio::sync::Notify;

use setup::NatsSetupError;

use crate::broker::nats::config::NatsConfig;
use crate::broker::seam::{
    AppendOptions, AppendOutcome, Entry, EntryId, EventStream, ServerId, StreamState, Unavailable,
};

/// The settings of a JetStream stream that handoff relies on (`handoff check` reads them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StreamSettings {
    pub subjects: Vec<String>,
    pub duplicate_window: Duration,
    pub replicas: usize,
    /// Messages are removed by limits (age, count, size) whether or not anyone read them.
    pub limits_drop_unread: bool,
    /// The largest message the stream stores (`max_msg_size`), if it sets one.
    pub max_message_bytes: Option<usize>,
}

/// A JetStream stream the relay publishes into.
#[derive(Clone)]
pub struct NatsStream {
    client: async_nats::Client,
    jetstream: async_nats::jetstream::Context,
    /// The JetStream stream whose subjects the relay publishes to (loss checks read its state).
    stream: String,
    /// The entry field that becomes the message body; every other field is a header.
    body_field: Bytes,
    reconnects: Arc<Notify>,
    /// The relay's own publishing connections.
    links: Arc<link::Links>,
    /// How long a call may wait for the server.
    timeout: Duration,
}

impl NatsStream {
    /// Connects to `config`'s server (in the background: an unreachable server is waited out);
    /// `body_field` is the entry field carried as the message body.
    pub async fn connect(config: &NatsConfig, body_field: &str) -> Result<Self, NatsSetupError> {
        let (stream, timeout) = (config.stream.as_str(), config.timeout);
        let servers = config
            .urls()
            .map(|url| url.parse::<async_nats::ServerAddr>().map_err(|e| NatsSetupError::Url(format!("`{url}`: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let reconnects = Arc::new(Notify::new());
        let notify = reconnects.clone();
        let (tls, auth) = (setup::tls(config)?, setup::auth(config)?);
        let client = setup::options(&auth, tls.as_ref())
            .connection_timeout(timeout)
            .request_timeout(Some(timeout))
            // The client drops a connection once two pings go unanswered: a silent network
            // failure (no RST, no FIN) is noticed within about 1.5 × timeout instead of the
            // default's three minutes, and the client reconnects.
            .ping_interval((timeout / 2).max(std::time::Duration::from_millis(250)))
            .retry_on_initial_connect()
            .event_callback(move |event| {
                let notify = notify.clone();
                async move {
                    // Said once per change (the client retries quietly in between), never with
                    // the server's address credentials: async-nats's events carry none.
                    match event {
                        async_nats::Event::Connected => {
                            tracing::info!("nats connected");
                            notify.notify_waiters();
                        }
                        async_nats::Event::Disconnected => tracing::warn!("nats connection lost; reconnecting"),
                        _ => {}
                    }
                }
            })
            .connect(servers.as_slice())
            .await
            .map_err(|e| NatsSetupError::Url(e.to_string()))?;
        let mut jetstream = async_nats::jetstream::new(client.clone());
        jetstream.set_timeout(timeout);
        let links =
            link::Links::new(config.urls(), tls, auth, timeout).map_err(|e| NatsSetupError::Url(e.to_string()))?;
        Ok(Self {
            links: Arc::new(links),
            client,
            jetstream,
            stream: stream.to_owned(),
            body_field: Bytes::copy_from_slice(body_field.as_bytes()),
            reconnects,
            timeout,
        })
    }

    /// Publishes `entries`, all in flight together: their outcomes, in order.
    async fn publish(&self, entries: &[&Entry]) -> Vec<AppendOutcome> {
        publish::publish(&self.links, &self.body_field, entries, self.timeout).await
    }

    /// The settings of the JetStream stream, `None` if it does not exist.
    pub(crate) async fn settings(&self) -> Result<Option<StreamSettings>, Unavailable> {
        use async_nats::jetstream::stream::{DiscardPolicy, RetentionPolicy};
        let Some(mut stream) = self.stream_handle().await? else { return Ok(None) };
        let info = stream.info().await.map_err(|e| Unavailable(format!("JetStream stream {}: {e}", self.stream)))?;
        let c = &info.config;
        let limited = c.max_messages > 0 || c.max_bytes > 0 || !c.max_age.is_zero() || c.max_messages_per_subject > 0;
        Ok(Some(StreamSettings {
            subjects: c.subjects.clone(),
            duplicate_window: c.duplicate_window,
            replicas: c.num_replicas.max(1),
            limits_drop_unread: c.retention == RetentionPolicy::Limits && c.discard == DiscardPolicy::Old && limited,
            max_message_bytes: usize::try_from(c.max_message_size).ok().filter(|&n| n > 0),
        }))
    }

    /// The same connection, sending `field` as the message body (a relay's payload field, which
    /// `[relay.envelope]` may rename; `None`: every field a header, the body empty).
    pub(crate) fn with_body_field(&self, field: Option<&str>) -> Self {
        Self { body_field: Bytes::copy_from_slice(field.unwrap_or_default().as_bytes()), ..self.clone() }
    }

    /// Waits up to the configured timeout for the background connection (one-shot commands
    /// `check` and `migrate` want an answer, not an outage to wait out).
    pub(crate) async fn connected(&self) -> bool {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            if self.client.connection_state() == async_nats::connection::State::Connected {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Creates the JetStream stream if it does not exist: file storage, `replicas` copies,
    /// `subjects`, and `duplicate_window`. An existing stream is left as it is (`check` says
    /// what it lacks). True if it was created.
    pub(crate) async fn create_if_absent(
        &self,
        subjects: Vec<String>,
        duplicate_window: Duration,
        replicas: usize,
    ) -> Result<bool, Unavailable> {
        if self.stream_handle().await?.is_some() {
            return Ok(false);
        }
        let config = async_nats::jetstream::stream::Config {
            name: self.stream.clone(),
            subjects,
            storage: async_nats::jetstream::stream::StorageType::File,
            num_replicas: replicas,
            duplicate_window,
            ..Default::default()
        };
        self.jetstream
            .create_stream(config)
            .await
            .map_err(|e| Unavailable(format!("creating JetStream stream {}: {e}", self.stream)))?;
        Ok(true)
    }

    /// The version the connected server announced (empty before the first connection).
    pub(crate) fn server_version(&self) -> String {
        self.client.server_info().version
    }

    /// Why the connected server is too old for this client (built for the JetStream API of
    /// nats-server 2.9, the one Debian ships), if it is.
    pub(crate) fn version_problem(&self) -> Option<String> {
        let version = self.server_version();
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        (!version.is_empty() && (major, minor) < (2, 9)).then(|| {
            format!("nats: server version {version} is older than 2.9, the JetStream API handoff's client speaks")
        })
    }

    /// A bridge's durable pull consumer of this stream.
    pub(crate) fn group(&self, settings: group::GroupSettings) -> group::NatsGroup {
        group::NatsGroup::new(self.client.clone(), self.jetstream.clone(), &self.stream, settings, self.timeout)
    }

    /// What the durable consumer of `group` on `subject` holds, read without creating anything:
    /// `None` while the stream or the consumer does not exist (a bridge creates it at start).
    pub(crate) async fn consumer_info(
        &self,
        group: &str,
        subject: &str,
    ) -> Result<Option<crate::broker::group::GroupInfo>, Unavailable> {
        use async_nats::jetstream::context::ConsumerInfoErrorKind;
        let Some(stream) = self.stream_handle().await? else { return Ok(None) };
        let durable = group::durable_name(group, subject);
        match stream.consumer_info(&durable).await {
            Ok(info) => Ok(Some(crate::broker::group::GroupInfo {
                pending: info.num_ack_pending as u64,
                lag: Some(info.num_pending),
            })),
            Err(e) if matches!(e.kind(), ConsumerInfoErrorKind::NotFound | ConsumerInfoErrorKind::StreamNotFound) => {
                Ok(None)
            }
            Err(e) if matches!(e.kind(), ConsumerInfoErrorKind::JetStream(j) if j.error_code() == async_nats::jetstream::ErrorCode::CONSUMER_NOT_FOUND) => {
                Ok(None)
            }
            Err(e) => Err(Unavailable(format!("JetStream consumer {durable}: {e}"))),
        }
    }

    /// The JetStream stream's name.
    pub(crate) fn stream_name(&self) -> &str {
        &self.stream
    }

    async fn stream_handle(&self) -> Result<Option<async_nats::jetstream::stream::Stream>, Unavailable> {
        use async_nats::jetstream::context::GetStreamErrorKind;
        match self.jetstream.get_stream(&self.stream).await {
            Ok(stream) => Ok(Some(stream)),
            // 10059: stream not found.
            Err(e) if matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND) => {
                Ok(None)
            }
            Err(e) => Err(Unavailable(format!("JetStream stream {}: {e}", self.stream))),
        }
    }
}

impl EventStream for NatsStream {
    /// Every message outside runs sent, then every PubAck awaited; a run's, each after the
    /// previous one's PubAck.
    async fn append(&self, entries: &[Entry], _options: &AppendOptions) -> Vec<AppendOutcome> {
        crate::broker::seam::append_in_runs(entries, |batch| async move { self.publish(&batch).await }).await
    }

    async fn ping(&self) -> Result<(), Unavailable> {
        if self.client.connection_state() != async_nats::connection::State::Connected {
            return Err(Unavailable("NATS: not connected".into()));
        }
        match tokio::time::timeout(self.timeout, self.client.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Unavailable(format!("NATS: {e}"))),
            Err(_) => Err(Unavailable(format!("NATS: no answer within {:?}", self.timeout))),
        }
    }

    /// The server the client is connected to, with the id it took at start-up: a restart (or
    /// a reconnect to another server of the cluster) shows as a new id.
    async fn servers(&self) -> Result<Vec<ServerId>, Unavailable> {
        let info = self.client.server_info();
        if info.server_id.is_empty() {
            return Err(Unavailable("NATS: not connected".into()));
        }
        Ok(vec![ServerId { server: format!("{}:{}", info.host, info.port), run_id: info.server_id }])
    }

    /// The JetStream stream's state, whichever of its subjects `_subject` is: entry ids are its
    /// sequences (`EntryId(seq, 0)`, as the relay's stored `"<seq>"` parses), so "ever added" is its last sequence and "first entry" its
    /// first; a stream deleted and recreated starts again from 1.
    async fn stream_state(&self, _subject: &str) -> Result<StreamState, Unavailable> {
        let Some(mut stream) = self.stream_handle().await? else { return Ok(StreamState::default()) };
        let info = stream.info().await.map_err(|e| Unavailable(format!("JetStream stream {}: {e}", self.stream)))?;
        let state = &info.state;
        Ok(StreamState {
            exists: true,
            length: Some(state.messages),
            entries_added: Some(state.last_sequence),
            max_deleted: None,
            first_entry: (state.messages > 0).then_some(EntryId(state.first_sequence, 0)),
            last_entry: Some(EntryId(state.last_sequence, 0)),
            incarnation: None,
            partition_ends: Vec::new(),
        })
    }

    /// Whether each sequence still holds a message of `subject`.
    async fn entries_exist(&self, subject: &str, entry_ids: &[String]) -> Result<Vec<bool>, Unavailable> {
        let entries: Vec<(String, Option<String>)> = entry_ids.iter().map(|id| (id.clone(), None)).collect();
        self.entries_of_events(subject, &entries).await
    }

    /// A sequence holds the event only if its message is on `subject` and carries the event's id
    /// as `Nats-Msg-Id`: a server killed before its store had the last PubAck'd messages comes
    /// back without them and gives their sequences to the next messages published.
    async fn entries_of_events(
        &self,
        subject: &str,
        entries: &[(String, Option<String>)],
    ) -> Result<Vec<bool>, Unavailable> {
        let Some(stream) = self.stream_handle().await? else { return Ok(vec![false; entries.len()]) };
        let mut found = Vec::with_capacity(entries.len());
        for (id, event_id) in entries {
            let Ok(sequence) = id.parse::<u64>() else {
                found.push(false);
                continue;
            };
            match stream.get_raw_message(sequence).await {
                Ok(message) => {
                    let ours = event_id.as_deref().is_none_or(|event_id| {
                        message.headers.get(NATS_MESSAGE_ID).is_some_and(|v| v.as_str() == event_id)
                    });
                    found.push(message.subject.as_str() == subject && ours)
                }
                Err(e) if matches!(e.kind(), RawMessageErrorKind::NoMessageFound) => found.push(false),
                Err(e) => return Err(Unavailable(format!("JetStream stream {}: {e}", self.stream))),
            }
        }
        Ok(found)
    }

    async fn reconnected(&self) {
        self.reconnects.notified().await
    }
}
