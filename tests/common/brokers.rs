//! One test world on either broker: a [`TestEnv`] (its schema) and a broker server of the
//! test's own — a redis-server, or a nats-server with stream `AUDIT` on `audit.>` — to stop and
//! restart. Scenarios written once against [`Chain`] run on both: [`on_both_brokers!`] declares
//! each as a test per broker (`tests/both_brokers.rs` for the whole chain, `tests/bridge.rs` for
//! the bridge's own).

use std::time::Duration;

use super::TestEnv;
use super::nats_server::NatsServer;
use super::redis_server::RedisServer;
use handoff::NatsConfig;
use handoff::NatsStream;
use handoff::{AppendOptions, AppendOutcome, Entry, EventStream};

/// Declares each scenario (an `async fn(Chain)` of the calling file) as a test on Redis
/// (`redis::<name>`) and on NATS (`nats::<name>`).
macro_rules! on_both_brokers {
    ($($name:ident),* $(,)?) => {
        mod redis {
            $(#[tokio::test] async fn $name() { super::$name($crate::common::brokers::Chain::redis().await).await })*
        }
        mod nats {
            $(#[tokio::test] async fn $name() { super::$name($crate::common::brokers::Chain::nats().await).await })*
        }
    };
}
pub(crate) use on_both_brokers;

/// Declares each scenario as a test on Kafka too (`kafka::<name>`), on the broker
/// `scripts/services` starts, each test on topics and a group of its own. Scenarios that stop
/// the broker, or ask what only Redis and NATS tell (a group's read position, its deletion),
/// are not among them.
macro_rules! on_kafka {
    ($($name:ident),* $(,)?) => {
        mod kafka {
            $(#[tokio::test] async fn $name() { super::$name($crate::common::brokers::Chain::kafka().await).await })*
        }
    };
}
pub(crate) use on_kafka;

/// Like [`on_kafka!`] in both of the bridge's modes: `kafka_modes::taken_in::<name>` and
/// `kafka_modes::applied::<name>`.
macro_rules! in_both_modes_on_kafka {
    ($($name:ident),* $(,)?) => {
        mod kafka_modes {
            mod taken_in {
                $(#[tokio::test] async fn $name() { super::super::$name($crate::common::brokers::Chain::kafka().await).await })*
            }
            mod applied {
                $(#[tokio::test] async fn $name() { super::super::$name($crate::common::brokers::Chain::kafka().await.applying()).await })*
            }
        }
    };
}
pub(crate) use in_both_modes_on_kafka;

/// Declares each scenario of the consumer side as a test on each broker in each of the bridge's
/// modes: `taken_in::{redis,nats}::<name>` (the bridge alone, rows left PENDING for a worker) and
/// `applied::{redis,nats}::<name>` (a worker of the inbox in the same file, its handler applied
/// at take-over: rows PROCESSED, one audit log each).
macro_rules! in_both_modes_on_both_brokers {
    ($($name:ident),* $(,)?) => {
        mod taken_in {
            mod redis {
                $(#[tokio::test] async fn $name() { super::super::$name($crate::common::brokers::Chain::redis().await).await })*
            }
            mod nats {
                $(#[tokio::test] async fn $name() { super::super::$name($crate::common::brokers::Chain::nats().await).await })*
            }
        }
        mod applied {
            mod redis {
                $(#[tokio::test] async fn $name() { super::super::$name($crate::common::brokers::Chain::redis().await.applying()).await })*
            }
            mod nats {
                $(#[tokio::test] async fn $name() { super::super::$name($crate::common::brokers::Chain::nats().await.applying()).await })*
            }
        }
    };
}
pub(crate) use in_both_modes_on_both_brokers;

/// The trace context every published entry carries in its `headers` field.
pub const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

pub enum Broker {
    Redis(RedisServer),
    Nats(NatsServer),
    /// The shared broker of `scripts/services` (tests never stop it).
    Kafka,
}

pub struct Chain {
    pub env: TestEnv,
    pub broker: Broker,
    /// On NATS, a proxy handoff connects through, to cut its connections ([`Chain::nats_via_proxy`]).
    proxy: Option<super::proxy::Proxy>,
    /// Whether `bridge_config` adds a worker of the inbox and applies its handler at take-over
    /// (`apply = "worker"`), or leaves the bridge alone (rows stay PENDING).
    pub applying: bool,
}

impl Chain {
    pub async fn redis() -> Self {
        let server = RedisServer::start().await;
        Self {
            env: TestEnv::with_redis(&server.url()).await,
            broker: Broker::Redis(server),
            proxy: None,
            applying: false,
        }
    }

    /// The same chain with the bridge applying the seed's handler at take-over.
    pub fn applying(mut self) -> Self {
        self.applying = true;
        self
    }

    /// Inbox rows the bridge has taken in, whatever their state (applying, an event the bridge
    /// took in before it knew whether the worker is paused is left PENDING for the worker).
    pub async fn taken_in(&self) -> i64 {
        self.env.scalar_i64("SELECT count(*) FROM consumer_inbox").await
    }

    /// Asserts that exactly `n` events were taken in, one row each; when applying, that each
    /// comes to have exactly one effect (an audit log), by the bridge or the worker.
    pub async fn assert_taken_in_once(&self, n: i64) {
        assert_eq!(self.taken_in().await, n, "one inbox row per event");
        if self.applying {
            let env = &self.env;
            super::eventually(&format!("{n} rows PROCESSED"), || async {
                (env.inbox_count("PROCESSED").await == n).then_some(())
            })
            .await;
            let effects = env.scalar_i64("SELECT count(*) FROM audit_logs").await;
            let distinct = env.scalar_i64("SELECT count(DISTINCT audit_id) FROM audit_logs").await;
            assert_eq!((effects, distinct), (n, n), "one effect per event");
        } else {
            assert_eq!(self.env.inbox_count("PENDING").await, n, "left PENDING for a worker");
        }
    }

    /// Kills the broker's server (an outage).
    pub fn stop_broker(&mut self) {
        match &mut self.broker {
            Broker::Redis(server) => server.stop(),
            Broker::Nats(server) => server.stop(),
            Broker::Kafka => panic!("the shared Kafka broker is never stopped by a test"),
        }
    }

    /// Starts the broker's server again on its port (NATS with its store; this Redis keeps
    /// nothing).
    pub async fn restart_broker(&mut self) {
        match &mut self.broker {
            Broker::Redis(server) => server.restart().await,
            Broker::Nats(server) => server.restart().await,
            Broker::Kafka => panic!("the shared Kafka broker is never stopped by a test"),
        }
    }

    /// On the shared Kafka broker: the `user` topic (3 partitions) and the dead-letter topic of
    /// this test, made before anything reads or writes them.
    pub async fn kafka() -> Self {
        let env = TestEnv::new().await;
        super::kafka::create_topic(&format!("{}.audit.user", env.id), 3, &[]).await;
        super::kafka::create_topic(&format!("{}.dead", env.id), 1, &[]).await;
        Self { env, broker: Broker::Kafka, proxy: None, applying: false }
    }

    pub async fn nats() -> Self {
        let server = NatsServer::start().await;
        server.create_audit_stream().await;
        Self { env: TestEnv::new().await, broker: Broker::Nats(server), proxy: None, applying: false }
    }

    /// On NATS, with handoff's connections going through a proxy the test can cut.
    pub async fn nats_via_proxy() -> Self {
        let mut chain = Self::nats().await;
        let Broker::Nats(server) = &chain.broker else { unreachable!() };
        chain.proxy = Some(super::proxy::Proxy::start(server.port).await);
        chain
    }

    /// Cuts every connection handoff holds to the broker, as an idle timeout or a proxy would:
    /// on Redis the server kills its normal clients (at least one), on NATS the proxy drops them.
    pub fn cut_connections(&self) {
        match (&self.broker, &self.proxy) {
            (Broker::Kafka, _) => panic!("cut_connections is not offered on Kafka"),
            (Broker::Redis(server), _) => {
                let killed = super::redis_server::redis_cli(server.port, &["client", "kill", "type", "normal"]);
                assert!(killed.trim().parse::<u32>().is_ok_and(|n| n > 0), "connections were cut: {killed}");
            }
            (Broker::Nats(_), Some(proxy)) => proxy.cut(),
            (Broker::Nats(_), None) => panic!("cut_connections on NATS needs Chain::nats_via_proxy"),
        }
    }

    /// Whether this chain runs on Kafka (which counts a partition's first read after an
    /// assignment as a redelivery).
    pub fn is_kafka(&self) -> bool {
        matches!(self.broker, Broker::Kafka)
    }

    /// The proxy in front of NATS (`Chain::nats_via_proxy`).
    pub fn proxy(&self) -> &super::proxy::Proxy {
        self.proxy.as_ref().expect("a chain made with nats_via_proxy")
    }

    fn nats_section(&self) -> String {
        let url = match (&self.broker, &self.proxy) {
            (Broker::Redis(_), _) => return String::new(),
            (Broker::Kafka, _) => {
                let bootstrap = super::kafka::bootstrap();
                return format!(
                    "\n[kafka]\nbootstrap_servers = \"{bootstrap}\"\ntimeout = \"5s\"\ndelivery_timeout = \"5s\"\n"
                );
            }
            (Broker::Nats(_), Some(proxy)) => format!("nats://127.0.0.1:{}", proxy.port),
            (Broker::Nats(server), None) => server.url(),
        };
        format!("\n[nats]\nurl = \"{url}\"\nstream = \"AUDIT\"\ntimeout = \"2s\"\n")
    }

    /// Where the events of aggregate type `user` go: the Redis stream key or the NATS subject
    /// (also the `stream` label of the bridge's metrics and the inbox's `stream` column).
    pub fn user_stream(&self) -> String {
        match &self.broker {
            Broker::Redis(_) => self.env.stream("user"),
            Broker::Nats(_) => "audit.user".into(),
            Broker::Kafka => format!("{}.audit.user", self.env.id),
        }
    }

    /// A relay `relay` on this broker, one stream per aggregate type (`extra` goes into
    /// `[[relay]]`) and `more` sections after it.
    pub fn relay_config(&self, extra: &str, more: &str) -> String {
        self.relay_config_by("aggregate_type", extra, more)
    }

    /// Like `relay_config`, one stream per value of `column` (`<prefix>:{column}` on Redis,
    /// `audit.{column}` on NATS).
    pub fn relay_config_by(&self, column: &str, extra: &str, more: &str) -> String {
        let relay = match &self.broker {
            Broker::Redis(_) => self.env.config(&format!("stream = \"{}:{{{column}}}\"\n{extra}", self.env.id)),
            Broker::Nats(_) => self.env.config(&format!("broker = \"nats\"\nstream = \"audit.{{{column}}}\"\n{extra}")),
            Broker::Kafka => self
                .env
                .config(&format!("broker = \"kafka\"\nstream = \"{}.audit.{{{column}}}\"\n{extra}", self.env.id)),
        };
        format!("{relay}{more}{}", self.nats_section())
    }

    /// One bridge `bridge` (consumer `admin`, instance `instance`) reading the `user` stream;
    /// `extra` goes into `[[bridge]]`, `more` sections after it.
    pub fn bridge_config(&self, instance: &str, extra: &str, more: &str) -> String {
        let broker = match &self.broker {
            Broker::Redis(_) => String::new(),
            Broker::Nats(_) => "broker = \"nats\"\n".into(),
            // A group of this test's own: Kafka's groups are the cluster's, shared by every test.
            Broker::Kafka => format!("broker = \"kafka\"\ngroup = \"{}\"\n", self.env.id),
        };
        // Applying: a worker of the inbox in the same file, named, so a configuration that
        // could not apply is refused instead of quietly taking the rows in only.
        let (apply, worker) =
            if self.applying { ("apply = \"worker\"\n", TestEnv::worker_section("")) } else { ("", String::new()) };
        format!(
            "{}\n[[bridge]]\nname = \"bridge\"\nconsumer = \"admin\"\ninstance = \"{instance}\"\n{broker}streams = [{{ key = \"{}\", owner = \"relay\" }}]\nblock = \"200ms\"\nclaim_idle = \"1s\"\n{apply}{extra}\n{more}{worker}{}",
            self.env.base_config(),
            self.user_stream(),
            self.nats_section()
        )
    }

    /// Appends events `<prefix>-<i>` (1..=n) of type `user` as a relay would; the `malformed`
    /// ones lack their event id.
    pub async fn publish(&self, prefix: &str, n: usize, malformed: &[usize]) {
        let entries: Vec<(String, Vec<(String, String)>)> = (1..=n)
            .map(|i| {
                let id = format!("{prefix}-{i}");
                let mut fields = vec![
                    ("event_type".into(), "user.changed".into()),
                    ("aggregate_type".into(), "user".into()),
                    ("aggregate_id".into(), "agg".into()),
                    ("owner".into(), "relay".into()),
                    ("payload".into(), format!(r#"{{"auditId":"{id}","actor":"ops"}}"#)),
                    ("headers".into(), format!(r#"{{"traceparent":"{TRACEPARENT}"}}"#)),
                ];
                if !malformed.contains(&i) {
                    fields.push(("event_id".into(), id.clone()));
                }
                (id, fields)
            })
            .collect();
        self.append(entries).await;
    }

    /// Appends one entry of exactly these fields (`event_id` among them) to the `user` stream.
    pub async fn publish_fields(&self, fields: &[(&str, &str)]) {
        let id = fields.iter().find(|(k, _)| *k == "event_id").expect("an event_id field").1.to_owned();
        self.append(vec![(id, fields.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())]).await;
    }

    /// Appends each entry, given as its event id (the message id on NATS) and its fields.
    async fn append(&self, entries: Vec<(String, Vec<(String, String)>)>) {
        let entries: Vec<Entry> = entries
            .into_iter()
            .map(|(event_id, fields)| Entry {
                stream: self.user_stream(),
                fields: fields.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
                event_id,
                run: None,
                trace: None,
            })
            .collect();
        let outcomes = match &self.broker {
            Broker::Redis(_) => {
                let config = handoff::load_str(&self.env.base_config()).unwrap();
                let (stream, _) = handoff::RedisStream::connect(&config.redis).await.unwrap();
                stream.append(&entries, &AppendOptions::default()).await
            }
            Broker::Nats(server) => {
                let config = NatsConfig { timeout: Duration::from_secs(2), ..NatsConfig::new(&server.url(), "AUDIT") };
                let stream = NatsStream::connect(&config, "payload").await.unwrap();
                stream.append(&entries, &AppendOptions::default()).await
            }
            // Exactly these fields as headers (an entry without an event id stays without one).
            Broker::Kafka => {
                let messages = entries.iter().map(|e| e.fields.clone()).collect();
                super::kafka::produce(&self.user_stream(), messages).await;
                return;
            }
        };
        assert!(outcomes.iter().all(|o| matches!(o, AppendOutcome::Appended(_))), "{outcomes:?}");
    }

    /// What makes the relay's repeated appends land once: handoff's dedupe on Redis (a
    /// `[relay.dedupe]` table, last in `[[relay]]`), the stream's duplicate window on NATS.
    pub fn dedupe(&self) -> &'static str {
        match &self.broker {
            Broker::Redis(_) => "[relay.dedupe]\nwindow = \"1h\"\n",
            Broker::Nats(_) | Broker::Kafka => "",
        }
    }

    /// Where the bridge's dead letters go: a Redis stream under the test's prefix, or a subject
    /// the `AUDIT` stream captures (the bridge reads only `audit.user`).
    pub fn dead_letter_key(&self) -> String {
        match &self.broker {
            Broker::Redis(_) => self.env.stream("dead"),
            Broker::Nats(_) => "audit.dead".into(),
            Broker::Kafka => format!("{}.dead", self.env.id),
        }
    }

    /// Each dead-letter record as (reason, source stream, the entry's `payload` field).
    pub async fn dead_letters(&self) -> Vec<(String, String, String)> {
        match &self.broker {
            Broker::Redis(_) => {
                let entries: Vec<(String, std::collections::HashMap<String, String>)> =
                    fred::prelude::StreamsInterface::xrange(&self.env.redis, self.dead_letter_key(), "-", "+", None)
                        .await
                        .unwrap();
                entries
                    .into_iter()
                    .map(|(_, f)| {
                        let fields: serde_json::Value = serde_json::from_str(&f["fields"]).unwrap();
                        (
                            f["reason"].clone(),
                            f["source_stream"].clone(),
                            fields["payload"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect()
            }
            Broker::Nats(server) => messages_on(&server.url(), "audit.dead")
                .await
                .iter()
                .map(|message| dead_letter(&message.payload))
                .collect(),
            Broker::Kafka => super::kafka::read_all(&self.dead_letter_key())
                .await
                .iter()
                .map(|message| dead_letter(message.value.as_bytes()))
                .collect(),
        }
    }

    /// The event id of every entry the `user` stream holds, in order.
    pub async fn stream_event_ids(&self) -> Vec<String> {
        self.event_ids_in("user").await
    }

    /// Each entry of the `user` stream as (its event id, its entry id: the Redis entry id or
    /// the JetStream sequence), in order.
    pub async fn entries(&self) -> Vec<(String, String)> {
        match &self.broker {
            Broker::Redis(_) => self
                .env
                .stream_entries(&self.env.stream("user"))
                .await
                .into_iter()
                .map(|(id, fields)| (fields.get("event_id").cloned().unwrap_or_default(), id))
                .collect(),
            Broker::Nats(server) => messages_on(&server.url(), "audit.user")
                .await
                .iter()
                .map(|message| {
                    let event_id = message.headers.get("event_id").map(|v| v.as_str().to_owned());
                    (event_id.unwrap_or_default(), message.sequence.to_string())
                })
                .collect(),
            Broker::Kafka => super::kafka::read_all(&self.user_stream())
                .await
                .into_iter()
                .map(|m| {
                    (m.headers.get("event_id").cloned().unwrap_or_default(), format!("{}:{}", m.partition, m.offset))
                })
                .collect(),
        }
    }

    /// Every message of the `user` stream as (its key, its headers, its body), in order: on
    /// Redis an entry's `payload` field is the body and its other fields the headers (no key);
    /// a NATS message has no key either.
    pub async fn messages(&self) -> Vec<(Option<String>, std::collections::HashMap<String, String>, String)> {
        match &self.broker {
            Broker::Redis(_) => {
                let entries = self.env.stream_entries(&self.env.stream("user")).await;
                let split = |mut fields: std::collections::HashMap<String, String>| {
                    let body = fields.remove("payload").unwrap_or_default();
                    (None, fields, body)
                };
                entries.into_iter().map(|(_, fields)| split(fields)).collect()
            }
            Broker::Nats(server) => messages_on(&server.url(), "audit.user")
                .await
                .iter()
                .map(|m| {
                    let names: Vec<String> = m.headers.iter().map(|(name, _)| name.to_string()).collect();
                    let value = |name: &str| m.headers.get(name).map(|v| v.as_str().to_owned()).unwrap_or_default();
                    let headers = names.iter().map(|name| (name.clone(), value(name))).collect();
                    (None, headers, String::from_utf8_lossy(&m.payload).into_owned())
                })
                .collect(),
            Broker::Kafka => super::kafka::read_all(&self.user_stream())
                .await
                .into_iter()
                .map(|m| (m.key, m.headers, m.value))
                .collect(),
        }
    }

    /// On NATS, the body of every message on `audit.user`, in order, with the names of its
    /// headers; `None` on Redis (an entry has no body).
    pub async fn bodies(&self) -> Option<Vec<(String, Vec<String>)>> {
        let Broker::Nats(server) = &self.broker else { return None };
        let messages = messages_on(&server.url(), "audit.user").await;
        Some(
            messages
                .iter()
                .map(|m| {
                    let names = m.headers.iter().map(|(name, _)| name.to_string()).collect();
                    (String::from_utf8_lossy(&m.payload).into_owned(), names)
                })
                .collect(),
        )
    }

    /// The event id of every entry of the stream for `value` (of the template's column), in
    /// order.
    pub async fn event_ids_in(&self, value: &str) -> Vec<String> {
        match &self.broker {
            Broker::Redis(_) => {
                let entries: Vec<(String, std::collections::HashMap<String, String>)> =
                    fred::prelude::StreamsInterface::xrange(&self.env.redis, self.env.stream(value), "-", "+", None)
                        .await
                        .unwrap();
                entries.into_iter().map(|(_, f)| f.get("event_id").cloned().unwrap_or_default()).collect()
            }
            Broker::Nats(server) => messages_on(&server.url(), &format!("audit.{value}"))
                .await
                .iter()
                .map(|message| message.headers.get("event_id").map(|v| v.as_str().to_owned()).unwrap_or_default())
                .collect(),
            Broker::Kafka => super::kafka::read_all(&format!("{}.audit.{value}", self.env.id))
                .await
                .into_iter()
                .map(|m| m.headers.get("event_id").cloned().unwrap_or_default())
                .collect(),
        }
    }

    /// Entries delivered to the bridge's group and not acknowledged; `None` before the group
    /// exists.
    pub async fn unacknowledged(&self) -> Option<u64> {
        match &self.broker {
            Broker::Redis(_) => self.env.group_pending("user").await,
            Broker::Nats(server) => nats_consumer(&server.url()).await.map(|info| info.num_ack_pending as u64),
            // Kafka tells what the group has not committed, delivered or not.
            Broker::Kafka => self.kafka_lag().await,
        }
    }

    /// How far the bridge's group has read the `user` stream (the last entry delivered, counted
    /// from the stream's start) and how many of the entries it read are not acknowledged: read
    /// minus pending is what was acknowledged.
    pub async fn read_and_pending(&self) -> (u64, u64) {
        match &self.broker {
            Broker::Redis(_) => {
                let reply: fred::types::Value = fred::prelude::ClientLike::custom(
                    &self.env.redis,
                    fred::types::CustomCommand::new_static("XINFO", fred::types::ClusterHash::Offset(1), false),
                    vec!["GROUPS".to_owned(), self.env.stream("user")],
                )
                .await
                .unwrap();
                let fred::types::Value::Array(groups) = reply else { panic!("XINFO GROUPS: {reply:?}") };
                let fred::types::Value::Array(fields) = &groups[0] else { panic!("XINFO GROUPS: {groups:?}") };
                let field = |name: &str| {
                    fields
                        .chunks(2)
                        .find(|kv| kv[0].as_string().as_deref() == Some(name))
                        .and_then(|kv| kv[1].as_u64())
                        .unwrap()
                };
                (field("entries-read"), field("pending"))
            }
            Broker::Nats(server) => {
                let info = nats_consumer(&server.url()).await.expect("the bridge's durable consumer");
                (info.delivered.stream_sequence, info.num_ack_pending as u64)
            }
            Broker::Kafka => panic!("a Kafka group's read position is its members' own"),
        }
    }

    /// Deletes the bridge's consumer group (on NATS, its durable consumer) under it.
    pub async fn delete_group(&self) {
        match &self.broker {
            Broker::Redis(_) => {
                let _: fred::types::Value =
                    fred::prelude::StreamsInterface::xgroup_destroy(&self.env.redis, self.env.stream("user"), "admin")
                        .await
                        .unwrap();
            }
            Broker::Nats(server) => {
                let client = async_nats::connect(server.url()).await.unwrap();
                let stream = async_nats::jetstream::new(client).get_stream("AUDIT").await.unwrap();
                assert!(stream.delete_consumer(DURABLE).await.unwrap().success);
            }
            Broker::Kafka => panic!("a Kafka group with members cannot be deleted"),
        }
    }

    /// Deliveries of entries to the bridge's group so far, redeliveries included.
    pub async fn deliveries(&self) -> Option<u64> {
        match &self.broker {
            Broker::Redis(_) => {
                let reply: fred::types::Value = fred::prelude::ClientLike::custom(
                    &self.env.redis,
                    fred::types::CustomCommand::new_static("XPENDING", fred::types::ClusterHash::FirstKey, false),
                    vec![self.env.stream("user"), "admin".into(), "-".into(), "+".into(), "100".into()],
                )
                .await
                .ok()?;
                let fred::types::Value::Array(items) = reply else { return None };
                Some(
                    items
                        .iter()
                        .filter_map(|item| match item {
                            fred::types::Value::Array(parts) => parts.get(3)?.as_u64(),
                            _ => None,
                        })
                        .sum(),
                )
            }
            Broker::Nats(server) => nats_consumer(&server.url()).await.map(|info| info.delivered.consumer_sequence),
            Broker::Kafka => None,
        }
    }

    /// Every entry of the `user` stream read by the bridge's group and acknowledged.
    pub async fn await_acknowledged(&self) {
        super::eventually("every entry acknowledged", || async {
            let done = match &self.broker {
                Broker::Redis(_) => self.env.group_caught_up("user").await,
                Broker::Nats(server) => nats_consumer(&server.url())
                    .await
                    .is_some_and(|info| info.num_ack_pending == 0 && info.num_pending == 0),
                Broker::Kafka => self.kafka_lag().await == Some(0),
            };
            done.then_some(())
        })
        .await;
    }
}

impl Chain {
    /// The bridge's Kafka consumer group (this test's own).
    pub fn group(&self) -> String {
        self.env.id.clone()
    }

    /// What the bridge's group has not committed of the `user` topic; `None` when it cannot be
    /// read.
    pub async fn kafka_lag(&self) -> Option<u64> {
        let config = handoff::KafkaConfig::new(&super::kafka::bootstrap());
        handoff::kafka_committed_lag(&config, &self.env.id, &self.user_stream()).await.ok()
    }
}

/// A dead-letter record's (reason, source stream, the entry's `payload` field).
fn dead_letter(body: &[u8]) -> (String, String, String) {
    let body: serde_json::Value = serde_json::from_slice(body).unwrap();
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    (text(&body["reason"]), text(&body["source_stream"]), text(&body["fields"]["payload"]))
}

/// Every message of the `AUDIT` stream on `subject`, in order.
async fn messages_on(url: &str, subject: &str) -> Vec<async_nats::jetstream::message::StreamMessage> {
    let client = async_nats::connect(url).await.unwrap();
    let mut stream = async_nats::jetstream::new(client).get_stream("AUDIT").await.unwrap();
    let state = stream.info().await.unwrap().state.clone();
    let mut messages = Vec::new();
    for sequence in state.first_sequence..=state.last_sequence {
        if let Ok(message) = stream.get_raw_message(sequence).await
            && message.subject.as_str() == subject
        {
            messages.push(message);
        }
    }
    messages
}

/// The bridge's durable consumer: group `admin`, subject `audit.user`.
const DURABLE: &str = "admin-audit_user";

async fn nats_consumer(url: &str) -> Option<async_nats::jetstream::consumer::Info> {
    let client = async_nats::connect(url).await.ok()?;
    let stream = async_nats::jetstream::new(client).get_stream("AUDIT").await.ok()?;
    stream.consumer_info(DURABLE).await.ok()
}
