//! Shared harness for integration tests against the real Postgres and Redis.
//!
//! Every test gets its own Postgres schema (the connection URL sets `search_path`) and its own
//! stream-key prefix, so tests run in parallel. URLs come from `HANDOFF_TEST_DATABASE_URL` and
//! `HANDOFF_TEST_REDIS_URL`, defaulting to the local services `scripts/test` brings up.
#![allow(dead_code)]

pub mod brokers;
pub mod db_env;
pub mod generated;
pub mod http;
pub mod kafka;
pub mod mysql;
pub mod nats_cluster;
pub mod nats_server;
pub mod pki;
pub mod process;
pub mod proxy;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod redis_server;
pub mod tls_servers;

use std::future::Future;
use std::time::Duration;

use fred::prelude::*;
use tokio_postgres::NoTls;

pub const WAIT: Duration = Duration::from_secs(60);

pub fn base_database_url() -> String {
    std::env::var("HANDOFF_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/handoff_test".into())
}

pub fn base_redis_url() -> String {
    std::env::var("HANDOFF_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Polls `check` until it yields `Some`, or panics naming `what` after [`WAIT`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The relay keys tests usually want, minus those `extra` sets itself (TOML forbids repeats).
pub fn relay_defaults(id: &str, extra: &str) -> String {
    let defaults = [
        ("stream", format!("\"{id}:{{aggregate_type}}\"")),
        ("poll_interval", "\"50ms\"".to_owned()),
        ("lease", "\"2s\"".to_owned()),
    ];
    let set_in_extra = |key: &str| extra.lines().any(|l| l.split('=').next().is_some_and(|k| k.trim() == key));
    defaults.iter().filter(|(key, _)| !set_in_extra(key)).map(|(key, value)| format!("{key} = {value}\n")).collect()
}

/// `base` and one bridge `bridge` (consumer `admin`, instance `instance`) reading `streams` (keys
/// under the prefix `id`, owner `relay`); `extra` goes into `[[bridge]]`.
pub fn bridge_config(base: &str, id: &str, instance: &str, streams: &[&str], extra: &str) -> String {
    let streams: Vec<String> = streams.iter().map(|s| format!("{{ key = \"{id}:{s}\", owner = \"relay\" }}")).collect();
    format!(
        "{base}\n[[bridge]]\nname = \"bridge\"\nconsumer = \"admin\"\ninstance = \"{instance}\"\nstreams = [{streams}]\nblock = \"200ms\"\nclaim_idle = \"1s\"\n{extra}\n",
        streams = streams.join(", "),
    )
}

/// A `[[worker]]` section for consumer `admin` whose one handler runs `handler_sql` for every
/// event type; `extra` goes into `[[worker]]`.
pub fn worker_section_with(extra: &str, handler_sql: &str) -> String {
    format!(
        r#"
[[worker]]
name = "worker"
consumer = "admin"
poll_interval = "50ms"
lease = "2s"
{extra}

[[worker.handler]]
event_types = ["*"]
sql = ["{handler_sql}"]
"#
    )
}

/// One test's isolated world: a fresh schema with the reference tables, a stream prefix.
pub struct TestEnv {
    pub id: String,
    pub schema: String,
    pub database_url: String,
    pub db: tokio_postgres::Client,
    pub redis: Client,
    pub redis_url: String,
    /// Lines of a `[redis.tls]` table, empty for a plain Redis.
    pub redis_tls: String,
}

impl TestEnv {
    pub async fn new() -> Self {
        Self::with_redis(&base_redis_url()).await
    }

    /// Like `new`, with the relay's Redis at `redis_url` (e.g. a test's own server).
    pub async fn with_redis(redis_url: &str) -> Self {
        Self::with_tls_redis(redis_url, "").await
    }

    /// Like `with_redis` for a `rediss://` URL and the lines of its `[redis.tls]` table; the
    /// test's own Redis client connects the way handoff does.
    pub async fn with_tls_redis(redis_url: &str, redis_tls: &str) -> Self {
        let env = Self::unmigrated(redis_url, redis_tls).await;
        env.migrate().await;
        env
    }

    /// A schema of its own with nothing in it yet (a test runs `handoff migrate` itself).
    pub async fn empty() -> Self {
        Self::unmigrated(&base_redis_url(), "").await
    }

    async fn unmigrated(redis_url: &str, redis_tls: &str) -> Self {
        let id = format!("t{:08x}", rand::random::<u32>());
        let schema = id.clone();
        let base = base_database_url();
        let (admin, conn) = tokio_postgres::connect(&base, NoTls).await.expect("connect to test database");
        tokio::spawn(conn);
        admin.batch_execute(&format!("CREATE SCHEMA {schema}")).await.unwrap();
        let sep = if base.contains('?') { '&' } else { '?' };
        let database_url = format!("{base}{sep}options=-csearch_path%3D{schema}&application_name=handoff-{id}");
        let (db, conn) = tokio_postgres::connect(&database_url, NoTls).await.unwrap();
        tokio::spawn(conn);
        let redis = if redis_tls.is_empty() {
            Self::redis_client(redis_url).await
        } else {
            let toml =
                format!("[database]\nurl = \"{base}\"\n[redis]\nurl = \"{redis_url}\"\n[redis.tls]\n{redis_tls}\n");
            let config = handoff::load_str(&toml).unwrap();
            let (stream, _) = handoff::RedisStream::connect(&config.redis).await.unwrap();
            stream.client().clone()
        };
        Self { id, schema, database_url, db, redis, redis_url: redis_url.to_owned(), redis_tls: redis_tls.to_owned() }
    }

    /// A Redis client for assertions that reconnects by itself (tests stop their own servers).
    pub async fn redis_client(redis_url: &str) -> Client {
        let redis = Builder::from_config(Config::from_url(redis_url).unwrap())
            .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(5))
            .set_policy(ReconnectPolicy::new_constant(0, 100))
            .build()
            .unwrap();
        redis.init().await.expect("connect to test redis");
        redis
    }

    async fn migrate(&self) {
        let pool = handoff::postgres_pool(&self.database_config(), "handoff-test").unwrap();
        handoff::migrate_postgres(&pool).await.expect("migrate");
    }

    pub fn database_config(&self) -> handoff::DatabaseConfig {
        let toml = format!("[database]\nurl = \"{}\"\n", self.database_url);
        handoff::load_str(&toml).unwrap().database
    }

    /// Stream key for an aggregate type under this test's prefix.
    pub fn stream(&self, aggregate_type: &str) -> String {
        format!("{}:{aggregate_type}", self.id)
    }

    /// The sections every config shares (database, redis, telemetry, shutdown); components follow.
    pub fn base_config(&self) -> String {
        format!(
            r#"[database]
url = "{db}"
pool_size = 4

[redis]
url = "{redis}"
command_timeout = "1s"
{redis_tls}

[telemetry]
listen = "127.0.0.1:0"
sample_interval = "100ms"

[shutdown]
grace_period = "5s"
"#,
            db = self.database_url,
            redis = self.redis_url,
            redis_tls =
                if self.redis_tls.is_empty() { String::new() } else { format!("[redis.tls]\n{}", self.redis_tls) },
        )
    }

    /// A config with one bridge `bridge` (consumer `admin`, instance `instance`) reading
    /// `streams` (keys under this test's prefix, owner `relay`); `extra` goes into `[[bridge]]`.
    pub fn bridge_config(&self, instance: &str, streams: &[&str], extra: &str) -> String {
        bridge_config(&self.base_config(), &self.id, instance, streams, extra)
    }

    /// A `[[worker]]` section for consumer `admin` writing the seed's `audit_logs`.
    pub fn worker_section(extra: &str) -> String {
        worker_section_with(
            extra,
            "INSERT INTO audit_logs (audit_id, source, action, actor, detail) VALUES (:event_id, :owner, :event_type, :payload.actor, :payload) ON CONFLICT (audit_id) DO NOTHING",
        )
    }

    /// Appends an entry with raw field values to `stream` (a key under this test's prefix).
    pub async fn xadd_raw(&self, stream: &str, fields: Vec<(&str, Vec<u8>)>) -> String {
        let fields: Vec<(String, fred::types::Value)> =
            fields.into_iter().map(|(k, v)| (k.to_owned(), fred::types::Value::Bytes(v.into()))).collect();
        self.redis.xadd(self.stream(stream), false, None::<()>, "*", fields).await.unwrap()
    }

    /// Appends a valid event entry as the relay would (owner `relay`).
    pub async fn xadd_event(&self, stream: &str, event_id: &str, payload: &str) -> String {
        let fields = vec![
            ("event_id", event_id.as_bytes().to_vec()),
            ("event_type", b"user.changed".to_vec()),
            ("aggregate_type", stream.as_bytes().to_vec()),
            ("aggregate_id", b"agg".to_vec()),
            ("payload", payload.as_bytes().to_vec()),
            ("headers", br#"{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#.to_vec()),
            ("owner", b"relay".to_vec()),
        ];
        self.xadd_raw(stream, fields).await
    }

    /// Inbox rows of consumer `admin` in `status`.
    pub async fn inbox_count(&self, status: &str) -> i64 {
        self.db
            .query_one("SELECT count(*) FROM consumer_inbox WHERE consumer = 'admin' AND status = $1", &[&status])
            .await
            .unwrap()
            .get(0)
    }

    /// Entries delivered to the bridge's group (`admin`) and not acknowledged; `None` while
    /// the group does not exist yet.
    pub async fn group_pending(&self, stream: &str) -> Option<u64> {
        let reply: fred::types::Value = self
            .redis
            .custom(
                fred::types::CustomCommand::new_static("XPENDING", fred::types::ClusterHash::FirstKey, false),
                vec![self.stream(stream), "admin".to_owned()],
            )
            .await
            .ok()?;
        match reply {
            fred::types::Value::Array(parts) => parts.first().and_then(|v| v.as_u64()),
            _ => None,
        }
    }

    /// Whether group `admin` has read every entry of the stream and acknowledged all it read.
    /// `group_pending == Some(0)` alone also holds between a restarted bridge re-acknowledging
    /// its own pending entries and reading the unread rest.
    pub async fn group_caught_up(&self, stream: &str) -> bool {
        group_caught_up(&self.redis, &self.stream(stream), "admin").await
    }

    /// Poison records as (reason, event_id), in entry order.
    pub async fn poison(&self) -> Vec<(String, Option<String>)> {
        self.db
            .query("SELECT reason, event_id FROM consumer_inbox_poison ORDER BY id", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    }

    /// A config with one relay named `relay` on the reference table; `extra` is appended to the
    /// `[[relay]]` table (later keys may open sub-tables).
    pub fn config(&self, extra: &str) -> String {
        format!(
            "{base}\n[[relay]]\nname = \"relay\"\n{defaults}{extra}\n",
            base = self.base_config(),
            defaults = relay_defaults(&self.id, extra),
        )
    }

    /// Inserts `n` events (`<prefix>-<i>`) of `aggregate_type`, as an owner service would.
    pub async fn insert_events(&self, prefix: &str, aggregate_type: &str, n: usize) {
        self.db
            .execute(
                "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers)
                 SELECT $1 || '-' || g, $2, 'agg-' || g, 'user.changed',
                        jsonb_build_object('auditId', $1 || '-' || g, 'actor', 'admin', 'n', g),
                        '{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}'
                 FROM generate_series(1, $3::int) g",
                &[&prefix, &aggregate_type, &(n as i32)],
            )
            .await
            .unwrap();
    }

    /// A row that keeps killing its claimant: `rounds` relays run with `config`, each killed
    /// while parked before its append and its lease left to expire; then a relay that lives
    /// must turn the row DEAD after `rounds` expired claims, without appending it.
    pub async fn kill_claimants_until_dead(&self, config: &str, rounds: i32) {
        for round in 1..=rounds {
            let mut victim = process::Handoff::run_paused(config, "before_append");
            victim.await_paused().await;
            victim.kill();
            eventually(&format!("lease of claim {round} to expire"), || async {
                let live = self.scalar_i64("SELECT count(*) FROM audit_outbox WHERE lease_expires_at > now()").await;
                (live == 0).then_some(())
            })
            .await;
        }
        let _survivor = process::Handoff::run(config);
        eventually("the crash-looping row to turn DEAD", || async { (self.count("DEAD").await == 1).then_some(()) })
            .await;
        let row = self.db.query_one("SELECT expired_claims, last_error FROM audit_outbox", &[]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), rounds);
        assert!(row.get::<_, String>(1).contains(&format!("lease expired {rounds} times")));
        assert!(self.stream_event_ids(&self.stream("user")).await.is_empty());
    }

    /// Inserts a row with `insert` (which returns its due time, seconds since the epoch) in a
    /// transaction left open, and waits until the database's clock has passed that time by 1.5 s:
    /// a locked claim starts a second before the previous claim's first row, so rows inserted
    /// from now on and claimed before this one commits leave it behind that bound. Commit it with
    /// the client returned. The row's due time is returned too.
    pub async fn late_row(&self, insert: &str) -> (tokio_postgres::Client, f64) {
        let (late, conn) = tokio_postgres::connect(&self.database_url, NoTls).await.unwrap();
        tokio::spawn(conn);
        late.batch_execute("BEGIN").await.unwrap();
        let due: f64 = late.query_one(insert, &[]).await.unwrap().get(0);
        eventually("the database clock to pass the late row by 1.5 s", || async {
            let now: f64 =
                self.db.query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[]).await.unwrap().get(0);
            (now > due + 1.5).then_some(())
        })
        .await;
        (late, due)
    }

    /// The earliest value of `column` (a timestamp) in `table`, in seconds since the epoch.
    pub async fn earliest(&self, table: &str, column: &str) -> f64 {
        let sql = format!("SELECT extract(epoch FROM min({column}))::float8 FROM {table}");
        self.db.query_one(&sql, &[]).await.unwrap().get(0)
    }

    /// Number of rows in `status`.
    pub async fn count(&self, status: &str) -> i64 {
        self.db.query_one("SELECT count(*) FROM audit_outbox WHERE status = $1", &[&status]).await.unwrap().get(0)
    }

    pub async fn scalar_i64(&self, sql: &str) -> i64 {
        self.db.query_one(sql, &[]).await.unwrap().get(0)
    }

    /// Waits until `n` rows are DELIVERED.
    pub async fn await_delivered(&self, n: i64) {
        eventually(&format!("{n} rows delivered"), || async { (self.count("DELIVERED").await == n).then_some(()) })
            .await;
    }

    /// Event ids of every entry in `stream`, in stream order.
    pub async fn stream_event_ids(&self, stream: &str) -> Vec<String> {
        let entries: Vec<(String, std::collections::HashMap<String, String>)> =
            self.redis.xrange(stream, "-", "+", None).await.unwrap();
        entries.into_iter().map(|(_, fields)| fields["event_id"].clone()).collect()
    }

    /// Every entry of `stream` as (entry id, fields).
    pub async fn stream_entries(&self, stream: &str) -> Vec<(String, std::collections::HashMap<String, String>)> {
        self.redis.xrange(stream, "-", "+", None).await.unwrap()
    }
}

/// The sizes of the pages in which the first relay of `config` reads its rows delivered in the
/// last hour, `page` rows a page (as a broker-loss check reads them).
pub async fn delivered_page_sizes(config: &str, page: usize) -> Vec<usize> {
    use handoff::Database;
    use handoff::OutboxStore;

    async fn sizes<S: OutboxStore>(store: S, page: usize) -> Vec<usize> {
        let mut pages = store.delivered_since(Duration::from_secs(3600), page).await.unwrap().expect("delivered_since");
        let mut sizes = Vec::new();
        while let Some(rows) = pages.next().await {
            sizes.push(rows.unwrap().len());
        }
        sizes
    }
    let config = handoff::load_str(config).unwrap();
    let relay = &config.relays[0];
    let db = Database::connect(&config.database, "handoff-test").unwrap();
    sizes(handoff::Outbox::prepare(&db, relay).await.unwrap(), page).await
}

/// Whether `group` of `stream` has read up to the stream's last generated id and has nothing
/// pending (`XINFO STREAM` / `XINFO GROUPS`); false while either does not exist.
pub async fn group_caught_up(redis: &Client, stream: &str, group: &str) -> bool {
    use fred::types::{ClusterHash, CustomCommand, Value};
    async fn xinfo(redis: &Client, what: &'static str, stream: &str) -> Option<Value> {
        let command = CustomCommand::new_static("XINFO", ClusterHash::Offset(1), false);
        redis.custom(command, vec![what.to_owned(), stream.to_owned()]).await.ok()
    }
    /// Field `name` of a flat key/value reply (RESP2 array or RESP3 map).
    fn field(reply: &Value, name: &str) -> Option<Value> {
        match reply {
            Value::Array(parts) => {
                parts.chunks(2).find(|kv| kv[0].as_str().as_deref() == Some(name)).map(|kv| kv[1].clone())
            }
            Value::Map(map) => map.clone().inner().into_iter().find(|(k, _)| k.as_str() == Some(name)).map(|(_, v)| v),
            _ => None,
        }
    }
    let Some(info) = xinfo(redis, "STREAM", stream).await else { return false };
    let Some(last) = field(&info, "last-generated-id").and_then(|v| v.as_string()) else { return false };
    let Some(Value::Array(groups)) = xinfo(redis, "GROUPS", stream).await else { return false };
    groups.iter().any(|g| {
        field(g, "name").and_then(|v| v.as_string()).as_deref() == Some(group)
            && field(g, "pending").and_then(|v| v.as_u64()) == Some(0)
            && field(g, "last-delivered-id").and_then(|v| v.as_string()).as_deref() == Some(last.as_str())
    })
}
