//! A Redis Streams consumer group behind the consumer-side broker seam: XREADGROUP on a
//! connection of its own (its reads block), XPENDING + XCLAIM for what dead instances left,
//! and the cluster's failover followed by moving that connection to the stream's new primary.

use std::time::Duration;

use tracing::{debug, info, warn};

use super::client::RedisStream;
use super::group::Group;
use crate::broker::group::{ConsumerGroup, GroupInfo, GroupResult, Read};
use crate::broker::read::RawEntry;
use crate::event::PoisonRecord;

pub(crate) struct RedisGroup {
    group: Group,
    /// The broker: this stream's dedicated client comes from it, and a new one when the stream
    /// moves to another node; dead letters go through its shared client.
    stream: RedisStream,
}

impl RedisGroup {
    pub(crate) fn new(stream: &RedisStream, key: &str, group: &str, consumer: &str, command_timeout: Duration) -> Self {
        let client = stream.dedicated(key);
        Self { group: Group::new(client, key, group, consumer, command_timeout), stream: stream.clone() }
    }
}

impl ConsumerGroup for RedisGroup {
    fn consumer(&self) -> &str {
        &self.group.consumer
    }

    async fn own_pending(&self, count: u32) -> GroupResult<Vec<RawEntry>> {
        self.group.read("0", count, None).await
    }

    async fn read(&self, count: u32, block: Option<Duration>) -> GroupResult<Read> {
        // Redis hands out only new entries on ">": redeliveries are read by `own_pending` and
        // `reclaim`.
        let entries = self.group.read(">", count, block).await?;
        Ok(Read { entries, redelivered: Vec::new() })
    }

    async fn ack(&self, entry_ids: &[String]) -> GroupResult<()> {
        self.group.ack(entry_ids).await.map(drop)
    }

    async fn ensure(&self, start: &str) -> GroupResult<()> {
        self.group.ensure(start).await
    }

    async fn reclaim(&self, idle: Duration, count: u32) -> GroupResult<Vec<RawEntry>> {
        let pending = self.group.pending(idle, ("-", "+"), count, None).await?;
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = pending.into_iter().map(|p| p.id).collect();
        self.group.claim(idle, &ids).await
    }

    async fn delete_idle_consumers(&self, idle: Duration) {
        let key = &self.group.key;
        let idle = match self.group.idle_consumers(idle).await {
            Ok(idle) => idle,
            Err(e) => return debug!(stream = %key, error = %e, "listing idle consumers failed"),
        };
        for name in idle {
            match self.group.delete_consumer(&name).await {
                Ok(()) => info!(stream = %key, consumer = %name, "deleted an idle consumer"),
                Err(e) => warn!(stream = %key, consumer = %name, error = %e, "could not delete an idle consumer"),
            }
        }
    }

    async fn info(&self) -> GroupResult<GroupInfo> {
        self.group.info().await
    }

    async fn oldest_pending_idle(&self) -> GroupResult<Option<Duration>> {
        self.group.oldest_pending_idle().await
    }

    async fn dead_letters(&self, key: &str, records: &[PoisonRecord]) -> bool {
        self.stream.append_dead_letters(key, records).await
    }

    async fn after_outage(&self) {
        let key = &self.group.key;
        if let Some(client) = self.stream.reroute(key, &self.group.client()).await {
            info!(stream = %key, "the stream's node changed; reading from its new primary");
            self.group.replace_client(client);
        }
    }

    /// A fresh connection: the client's read buffer keeps the allocation of the largest reply it
    /// decoded for as long as the connection lives (the entries' bytes were cut from it).
    fn release_buffers(&self) {
        self.group.replace_client(self.stream.dedicated(&self.group.key));
    }
}
