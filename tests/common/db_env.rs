//! One scenario, both dialects: [`DbEnv`] is a test's world on Postgres ([`TestEnv`]) or on
//! MariaDB ([`MyEnv`]) behind one set of methods, so a scenario is written once and
//! [`on_both_dialects!`](crate::on_both_dialects) runs it on each. Where the SQL differs by
//! dialect a method hides it, or the scenario passes both texts to [`DbEnv::pick`]; what only one
//! dialect has stays reachable by matching on the variants.

use fred::prelude::*;
use mysql_async::prelude::Queryable;

use super::mysql::MyEnv;
use super::{TestEnv, base_redis_url, eventually};

/// Which database a scenario runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Mariadb,
}

/// Generates, for each scenario `name` (an `async fn name(dialect: Dialect)` in scope), a module
/// `name` with the tests `postgres` and `mariadb`: `<file>::<name>::postgres` and
/// `<file>::<name>::mariadb`, so each dialect can be run, filtered and reported alone.
#[macro_export]
macro_rules! on_both_dialects {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn postgres() {
                super::$name($crate::common::db_env::Dialect::Postgres).await
            }

            #[tokio::test]
            async fn mariadb() {
                super::$name($crate::common::db_env::Dialect::Mariadb).await
            }
        }
    )+};
}

/// The seed's handler on MariaDB (`TestEnv::worker_section` has the Postgres one): a replayed
/// event is a no-op, as `ON CONFLICT DO NOTHING` makes it there.
pub const MARIADB_HANDLER: &str = "INSERT INTO audit_logs (audit_id, source, action, actor, detail) VALUES (:event_id, :owner, :event_type, :payload.actor, :payload) ON DUPLICATE KEY UPDATE audit_id = audit_id";

/// A test's isolated world on one dialect: its own schema or database, its own stream prefix.
pub enum DbEnv {
    Postgres(TestEnv),
    Mariadb(MyEnv),
}

impl DbEnv {
    pub async fn postgres() -> Self {
        Self::new(Dialect::Postgres).await
    }

    pub async fn mariadb() -> Self {
        Self::new(Dialect::Mariadb).await
    }

    pub async fn new(dialect: Dialect) -> Self {
        Self::with_redis(dialect, &base_redis_url()).await
    }

    /// Like `new`, with the Redis at `redis_url` (e.g. a scenario's own server, which it stops).
    pub async fn with_redis(dialect: Dialect, redis_url: &str) -> Self {
        match dialect {
            Dialect::Postgres => Self::Postgres(TestEnv::with_redis(redis_url).await),
            Dialect::Mariadb => Self::Mariadb(MyEnv::with_redis(redis_url).await),
        }
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            Self::Postgres(_) => Dialect::Postgres,
            Self::Mariadb(_) => Dialect::Mariadb,
        }
    }

    /// `postgres` on Postgres, `mariadb` on MariaDB: the two texts of one statement or setting.
    pub fn pick<T>(&self, postgres: T, mariadb: T) -> T {
        match self {
            Self::Postgres(_) => postgres,
            Self::Mariadb(_) => mariadb,
        }
    }

    /// The test's id: its schema or database name and its stream-key prefix.
    pub fn id(&self) -> &str {
        match self {
            Self::Postgres(env) => &env.id,
            Self::Mariadb(env) => &env.id,
        }
    }

    pub fn database_url(&self) -> &str {
        match self {
            Self::Postgres(env) => &env.database_url,
            Self::Mariadb(env) => &env.database_url,
        }
    }

    /// The test's own Redis client (reconnects by itself).
    pub fn redis(&self) -> &Client {
        match self {
            Self::Postgres(env) => &env.redis,
            Self::Mariadb(env) => &env.redis,
        }
    }

    /// The database's current time to the millisecond, as SQL (MariaDB's `NOW()` has seconds only).
    pub fn now(&self) -> &'static str {
        self.pick("now()", "NOW(3)")
    }

    /// The relay's claim-loop setting for a scenario that parks every row at a fault point and
    /// counts them parked. On MariaDB one loop, so one claim takes every row: two loops'
    /// concurrent SKIP LOCKED claims may both pass a row the other had locked for a moment, and
    /// both then park with that row left PENDING. On Postgres the default two loops, which may
    /// split the rows between their parked batches.
    pub fn parking_loops(&self) -> &'static str {
        self.pick("", "concurrency = 1")
    }

    /// Stream key for an aggregate type under this test's prefix.
    pub fn stream(&self, aggregate_type: &str) -> String {
        format!("{}:{aggregate_type}", self.id())
    }

    /// The sections every config shares (database, redis, telemetry, shutdown).
    pub fn base_config(&self) -> String {
        match self {
            Self::Postgres(env) => env.base_config(),
            Self::Mariadb(env) => env.base_config(),
        }
    }

    /// One relay named `relay` on the reference outbox; `extra` goes into `[[relay]]`.
    pub fn config(&self, extra: &str) -> String {
        match self {
            Self::Postgres(env) => env.config(extra),
            Self::Mariadb(env) => env.config(extra),
        }
    }

    /// As [`TestEnv::bridge_config`], on this dialect.
    pub fn bridge_config(&self, instance: &str, streams: &[&str], extra: &str) -> String {
        super::bridge_config(&self.base_config(), self.id(), instance, streams, extra)
    }

    /// As [`TestEnv::worker_section`], with the seed's handler written in this dialect.
    pub fn worker_section(&self, extra: &str) -> String {
        match self {
            Self::Postgres(_) => TestEnv::worker_section(extra),
            Self::Mariadb(_) => super::worker_section_with(extra, MARIADB_HANDLER),
        }
    }

    /// Inserts `n` events (`<prefix>-<i>`) of `aggregate_type`, as an owner service would.
    pub async fn insert_events(&self, prefix: &str, aggregate_type: &str, n: usize) {
        match self {
            Self::Postgres(env) => env.insert_events(prefix, aggregate_type, n).await,
            Self::Mariadb(env) => env.insert_events(prefix, aggregate_type, n).await,
        }
    }

    /// Number of outbox rows in `status`.
    pub async fn count(&self, status: &str) -> i64 {
        match self {
            Self::Postgres(env) => env.count(status).await,
            Self::Mariadb(env) => env.count(status).await,
        }
    }

    /// Waits until `n` outbox rows are DELIVERED.
    pub async fn await_delivered(&self, n: i64) {
        eventually(&format!("{n} rows delivered"), || async { (self.count("DELIVERED").await == n).then_some(()) })
            .await;
    }

    /// Inbox rows of consumer `admin` in `status`.
    pub async fn inbox_count(&self, status: &str) -> i64 {
        self.scalar(&format!("SELECT COUNT(*) FROM consumer_inbox WHERE consumer = 'admin' AND status = '{status}'"))
            .await
    }

    /// The first column of the first row of `sql`, an integer of any width (0 for no row).
    pub async fn scalar(&self, sql: &str) -> i64 {
        match self {
            // The text protocol: `count(*)` (int8) and `max(attempts)` (int4) read alike.
            Self::Postgres(_) => match self.text_rows(sql).await.first() {
                None => 0,
                Some(row) => {
                    let text = row[0].as_deref().unwrap_or_else(|| panic!("NULL from {sql}"));
                    text.parse().unwrap_or_else(|e| panic!("{text:?} from {sql}: {e}"))
                }
            },
            Self::Mariadb(env) => env.scalar(sql).await,
        }
    }

    /// Runs `sql` (statements separated by `;`), returning nothing.
    pub async fn exec(&self, sql: &str) {
        match self {
            Self::Postgres(env) => env.db.batch_execute(sql).await.unwrap(),
            Self::Mariadb(env) => env.exec(sql).await,
        }
    }

    /// Every row of `sql` as the database's text of each column (`None` for NULL): values that
    /// compare alike on both dialects whatever their SQL types.
    pub async fn text_rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        match self {
            Self::Postgres(env) => env
                .db
                .simple_query(sql)
                .await
                .unwrap()
                .into_iter()
                .filter_map(|message| match message {
                    tokio_postgres::SimpleQueryMessage::Row(row) => {
                        Some((0..row.len()).map(|i| row.get(i).map(str::to_owned)).collect())
                    }
                    _ => None,
                })
                .collect(),
            Self::Mariadb(env) => {
                let rows: Vec<mysql_async::Row> = env.db.get_conn().await.unwrap().query(sql).await.unwrap();
                rows.into_iter()
                    .map(|row| {
                        row.unwrap()
                            .into_iter()
                            .map(|value| match value {
                                mysql_async::Value::NULL => None,
                                mysql_async::Value::Bytes(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
                                other => Some(other.as_sql(true)),
                            })
                            .collect()
                    })
                    .collect()
            }
        }
    }

    /// The first column of `sql`'s only row, as text; panics on no row or NULL.
    pub async fn text(&self, sql: &str) -> String {
        let rows = self.text_rows(sql).await;
        let row = rows.first().unwrap_or_else(|| panic!("no row from {sql}"));
        row[0].clone().unwrap_or_else(|| panic!("NULL from {sql}"))
    }

    /// Appends a valid event entry to this test's stream of `aggregate_type`, as the relay
    /// would (owner `relay`).
    pub async fn xadd_event(&self, aggregate_type: &str, event_id: &str, payload: &str) -> String {
        match self {
            Self::Postgres(env) => env.xadd_event(aggregate_type, event_id, payload).await,
            Self::Mariadb(_) => {
                let fields: Vec<(&str, &str)> = vec![
                    ("event_id", event_id),
                    ("event_type", "user.changed"),
                    ("aggregate_type", aggregate_type),
                    ("aggregate_id", "agg"),
                    ("payload", payload),
                    ("headers", "{}"),
                    ("owner", "relay"),
                ];
                self.redis().xadd(self.stream(aggregate_type), false, None::<()>, "*", fields).await.unwrap()
            }
        }
    }

    /// Event ids of every entry in `stream`, in stream order.
    pub async fn stream_event_ids(&self, stream: &str) -> Vec<String> {
        self.stream_entries(stream).await.into_iter().map(|(_, fields)| fields["event_id"].clone()).collect()
    }

    /// Every entry of `stream` as (entry id, fields).
    pub async fn stream_entries(&self, stream: &str) -> Vec<(String, std::collections::HashMap<String, String>)> {
        self.redis().xrange(stream, "-", "+", None).await.unwrap()
    }
}
