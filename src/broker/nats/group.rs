//! A JetStream durable pull consumer behind the consumer-side broker seam (`[[bridge]] broker =
//! "nats"`). One durable consumer per bridge group and subject, shared by every instance of
//! the bridge (JetStream hands each message to one of them): explicit acks, `ack_wait` = the
//! bridge's `claim_idle` (a message an instance took and did not acknowledge in that time — it
//! died — is delivered again, to whichever instance asks next), and no server-side delivery
//! limit: the limit is handoff's own count of deliveries that reached the inbox database
//! (`max_deliveries`), as on Redis, so an inbox outage burns none and the server never gives a
//! message up on its own.
//!
//! A message becomes an entry: its stream sequence is the entry id, its headers the fields
//! (`Nats-*` headers aside) and its body the payload field. Acknowledgements are double acks (the
//! server confirms each), all of a batch in flight at once.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::context::GetStreamErrorKind;
use bytes::Bytes;
use futures_util::StreamExt;

use super::unreadable;
use crate::broker::group::{ConsumerGroup, GroupError, GroupInfo, GroupResult, Read};
use crate::broker::read::RawEntry;
use crate::event::PoisonRecord;

/// What a bridge's durable consumer is made of.
#[derive(Debug, Clone)]
pub(crate) struct GroupSettings {
    /// The durable consumer's name prefix (the bridge's group).
    pub group: String,
    /// The subject read (the bridge's stream key); may hold wildcards.
    pub subject: String,
    /// This instance's name, for logs (JetStream keeps no per-instance state for a pull consumer).
    pub instance: String,
    /// Where a new durable consumer starts: "0" (the whole stream) or "$" (new messages).
    pub start: String,
    /// The entry field the message body becomes (the envelope's payload).
    pub body_field: String,
    /// `ack_wait`: the bridge's `claim_idle`.
    pub ack_wait: Duration,
    /// Messages delivered and not acknowledged, at most (a few batches).
    pub max_ack_pending: i64,
}

pub(crate) struct NatsGroup {
    client: async_nats::Client,
    jetstream: async_nats::jetstream::Context,
    stream: String,
    settings: GroupSettings,
    durable: String,
    /// How long a call may wait for the server beyond a read's own wait.
    timeout: Duration,
    body_field: Bytes,
    /// The durable consumer once found or created; dropped after a failed read, so the next
    /// read looks it up again (it may have been deleted).
    consumer: tokio::sync::Mutex<Option<PullConsumer>>,
    /// Where to acknowledge each entry read and not yet acknowledged: entry id → reply subject.
    replies: Mutex<HashMap<String, async_nats::Subject>>,
    /// The client's connection count when messages it cannot read were last looked for: a
    /// reconnect since may be one of them ending the connection (`unreadable`).
    connects_seen: AtomicU64,
    /// Unreadable messages handed out: acknowledged by terminating them (they have no reply
    /// subject, as they never arrived).
    unreadable: Mutex<HashSet<String>>,
}

/// The durable consumer's name for `group` and `subject`: JetStream names hold no `.`, `*`, `>`
/// or spaces.
pub(crate) fn durable_name(group: &str, subject: &str) -> String {
    let subject = subject.replace('.', "_").replace('*', "any").replace('>', "rest");
    format!("{group}-{subject}").chars().map(|c| if c.is_ascii_graphic() { c } else { '_' }).collect()
}

fn unavailable(e: impl std::fmt::Display) -> GroupError {
    GroupError::Unavailable(e.to_string())
}

impl NatsGroup {
    pub(super) fn new(
        client: async_nats::Client,
        jetstream: async_nats::jetstream::Context,
        stream: &str,
        settings: GroupSettings,
        timeout: Duration,
    ) -> Self {
        Self {
            timeout,
            jetstream,
            stream: stream.to_owned(),
            durable: durable_name(&settings.group, &settings.subject),
            body_field: Bytes::copy_from_slice(settings.body_field.as_bytes()),
            settings,
            consumer: tokio::sync::Mutex::new(None),
            replies: Mutex::new(HashMap::new()),
            connects_seen: AtomicU64::new(client.statistics().connects.load(Ordering::Relaxed)),
            unreadable: Mutex::new(HashSet::new()),
            client,
        }
    }

    /// The durable consumer, created if missing.
    async fn consumer(&self) -> GroupResult<PullConsumer> {
        let mut cached = self.consumer.lock().await;
        if let Some(consumer) = cached.as_ref() {
            return Ok(consumer.clone());
        }
        // The server's error code, not its text, says the stream is missing (as the owner side
        // asks it in `NatsStream::stream_handle`).
        let stream = self.jetstream.get_stream(&self.stream).await.map_err(|e| match e.kind() {
            GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND => {
                GroupError::NoGroup(format!("JetStream stream {}: {e}", self.stream))
            }
            _ => unavailable(e),
        })?;
        let start = if self.settings.start == "$" { DeliverPolicy::New } else { DeliverPolicy::All };
        let consumer = stream.get_or_create_consumer(&self.durable, self.config(start)).await.map_err(unavailable)?;
        *cached = Some(consumer.clone());
        Ok(consumer)
    }

    /// The durable consumer's settings, starting at `deliver_policy` when it is created.
    fn config(&self, deliver_policy: DeliverPolicy) -> pull::Config {
        pull::Config {
            durable_name: Some(self.durable.clone()),
            filter_subject: self.settings.subject.clone(),
            ack_policy: AckPolicy::Explicit,
            ack_wait: self.settings.ack_wait,
            max_deliver: -1,
            max_ack_pending: self.settings.max_ack_pending,
            deliver_policy,
            ..Default::default()
        }
    }

    /// The durable consumer's position without creating it: the last stream sequence delivered
    /// to it and the messages delivered and not acknowledged; `None` when it does not exist.
    pub(crate) async fn position(&self) -> GroupResult<Option<(u64, u64)>> {
        use async_nats::jetstream::context::ConsumerInfoErrorKind;
        let stream = self.jetstream.get_stream(&self.stream).await.map_err(unavailable)?;
        match stream.consumer_info(&self.durable).await {
            Ok(info) => Ok(Some((info.delivered.stream_sequence, info.num_ack_pending as u64))),
            Err(e) if matches!(e.kind(), ConsumerInfoErrorKind::NotFound) => Ok(None),
            Err(e) if matches!(e.kind(), ConsumerInfoErrorKind::JetStream(j) if j.error_code() == ErrorCode::CONSUMER_NOT_FOUND) => {
                Ok(None)
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    /// `handoff bridge rewind` on JetStream, where a consumer's start cannot move: deletes the
    /// durable consumer and creates it again, with the same settings, delivering from `start`.
    /// Acknowledgements of messages after `start` are forgotten with it: they are delivered
    /// again and the inbox recognises them.
    pub(crate) async fn restart_at(&self, start: DeliverPolicy) -> GroupResult<()> {
        let stream = self.jetstream.get_stream(&self.stream).await.map_err(unavailable)?;
        stream.delete_consumer(&self.durable).await.map_err(unavailable)?;
        stream.create_consumer(self.config(start)).await.map_err(unavailable)?;
        *self.consumer.lock().await = None;
        Ok(())
    }

    /// The entry a message carries, and whether it was delivered before.
    fn entry(&self, message: &async_nats::jetstream::Message) -> Option<(RawEntry, bool)> {
        let info = message.info().ok()?;
        let id = info.stream_sequence.to_string();
        let redelivered = info.delivered > 1;
        let mut fields = Vec::new();
        if let Some(headers) = &message.headers {
            for (name, values) in headers.iter() {
                let name: &str = name.as_ref();
                if name.len() >= 5 && name[..5].eq_ignore_ascii_case("nats-") {
                    continue;
                }
                // A CloudEvents attribute's value is percent-encoded on NATS (its binding).
                let attribute = crate::percent::encoded_header(name.as_bytes());
                for value in values {
                    let value = match attribute {
                        true => Bytes::from(crate::percent::decode(value.as_str())),
                        false => Bytes::copy_from_slice(value.as_str().as_bytes()),
                    };
                    fields.push((Bytes::copy_from_slice(name.as_bytes()), value));
                }
            }
        }
        fields.push((self.body_field.clone(), message.payload.clone()));
        if let Some(reply) = &message.reply {
            self.replies.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id.clone(), reply.clone());
        }
        Some((RawEntry::new(id, Some(fields)), redelivered))
    }
}

impl ConsumerGroup for NatsGroup {
    fn consumer(&self) -> &str {
        &self.settings.instance
    }

    async fn own_pending(&self, _count: u32) -> GroupResult<Vec<RawEntry>> {
        // JetStream delivers what an instance left unacknowledged again after `ack_wait`.
        Ok(Vec::new())
    }

    async fn read(&self, count: u32, block: Option<Duration>) -> GroupResult<Read> {
        let consumer = self.consumer().await?;
        // A pull request the server lost (it restarted, the connection was cut) is never
        // answered: the read gives up at its own deadline rather than wait for ever.
        let deadline = tokio::time::Instant::now() + block.unwrap_or_default() + self.timeout;
        let batch = match block {
            Some(block) => consumer.batch().max_messages(count as usize).expires(block).messages().await,
            None => consumer.fetch().max_messages(count as usize).messages().await,
        };
        let mut messages = match batch {
            Ok(messages) => messages,
            Err(e) => {
                *self.consumer.lock().await = None;
                return Err(unavailable(e));
            }
        };
        let mut read = Read::default();
        loop {
            let next = tokio::time::timeout_at(deadline, messages.next()).await;
            let message = match next {
                Ok(None) => break,
                Ok(Some(Ok(message))) => message,
                // What was received stays read (it is acknowledged or delivered again).
                Ok(Some(Err(e))) if !read.is_empty() => {
                    tracing::debug!(subject = %self.settings.subject, error = %e, "a fetch ended early");
                    break;
                }
                Err(_) if !read.is_empty() => break,
                Ok(Some(Err(e))) => {
                    *self.consumer.lock().await = None;
                    return Err(unavailable(e));
                }
                Err(_) => {
                    *self.consumer.lock().await = None;
                    return Err(unavailable("no answer to a pull request in time"));
                }
            };
            if let Some((entry, redelivered)) = self.entry(&message) {
                if redelivered { read.redelivered.push(entry) } else { read.entries.push(entry) }
            }
        }
        Ok(read)
    }

    async fn ack(&self, entry_ids: &[String]) -> GroupResult<()> {
        let mut replies: Vec<(async_nats::Subject, &'static [u8])> = {
            let mut map = self.replies.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            entry_ids.iter().filter_map(|id| map.remove(id)).map(|reply| (reply, &b"+ACK"[..])).collect()
        };
        {
            // Poisoned, never delivered: JetStream stops delivering it. The consumer's ack
            // subject by the message's stream sequence (the server takes the rest from its own
            // record of the delivery); if it fails, the next delivery ends the connection again
            // and the message is found again.
            let mut unreadable = self.unreadable.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for id in entry_ids.iter().filter(|id| unreadable.remove(*id)) {
                let subject = format!("$JS.ACK.{}.{}.1.{id}.1.0.0", self.stream, self.durable);
                replies.push((subject.into(), &b"+TERM"[..]));
            }
        }
        // A double ack: a request the server answers once it has recorded the acknowledgement.
        let acks = replies.into_iter().map(|(reply, ack)| self.client.request(reply, Bytes::from_static(ack)));
        let results = futures_util::future::join_all(acks).await;
        match results.into_iter().find_map(Result::err) {
            None => Ok(()),
            Some(e) => Err(unavailable(e)),
        }
    }

    async fn ensure(&self, _start: &str) -> GroupResult<()> {
        self.consumer().await.map(drop)
    }

    /// JetStream redelivers a dead instance's messages after `ack_wait`, through `read`; what
    /// it delivers and this client cannot read ends the connection instead, and is found here
    /// after a reconnect (`unreadable`).
    async fn reclaim(&self, _idle: Duration, _count: u32) -> GroupResult<Vec<RawEntry>> {
        let connects = self.client.statistics().connects.load(Ordering::Relaxed);
        if connects == self.connects_seen.load(Ordering::Relaxed) {
            return Ok(Vec::new());
        }
        let info = self.consumer().await?.get_info().await.map_err(unavailable)?;
        let found = unreadable::find(&self.jetstream, &self.stream, &info, &self.settings.subject, &self.body_field)
            .await
            .map_err(unavailable)?;
        self.connects_seen.store(connects, Ordering::Relaxed);
        let mut handed = self.unreadable.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for entry in &found {
            tracing::warn!(subject = %self.settings.subject, sequence = %entry.id, reason = entry.unreadable.as_deref().unwrap_or_default(), "a message this client cannot read; it goes to poison");
            handed.insert(entry.id.clone());
        }
        Ok(found)
    }

    async fn delete_idle_consumers(&self, _idle: Duration) {}

    async fn info(&self) -> GroupResult<GroupInfo> {
        let consumer = self.consumer().await?;
        let info = consumer.get_info().await.map_err(unavailable)?;
        Ok(GroupInfo { pending: info.num_ack_pending as u64, lag: Some(info.num_pending) })
    }

    async fn oldest_pending_idle(&self) -> GroupResult<Option<Duration>> {
        Ok(None)
    }

    /// Publishes each record to the subject `key` (a JetStream stream must capture it) and
    /// awaits every PubAck; true only if each was stored (or was a repeat of one stored). The
    /// record travels as one JSON body — reason, detail, source subject and sequence, event id,
    /// the entry's fields — and nothing of the entry's content goes into a header: a hostile
    /// value cannot break the message. Its message id (source subject and sequence) makes a
    /// batch published again after a partial failure store each record once.
    async fn dead_letters(&self, key: &str, records: &[PoisonRecord]) -> bool {
        let mut acks = Vec::with_capacity(records.len());
        for p in records {
            let body = p.json();
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_ID, format!("dead:{}:{}", p.stream, p.entry_id).as_str());
            match self.jetstream.publish_with_headers(key.to_owned(), headers, Bytes::from(body.to_string())).await {
                Ok(ack) => acks.push(ack),
                Err(_) => return false,
            }
        }
        futures_util::future::join_all(acks.into_iter().map(|ack| ack.into_future())).await.iter().all(Result::is_ok)
    }
}
