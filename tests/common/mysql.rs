//! MariaDB / MySQL side of the harness: a database of the test's own, the reference schema, and
//! helpers written in MySQL's SQL. URL base from `HANDOFF_TEST_MYSQL_URL` (default: the local
//! MariaDB, root without a password).

use mysql_async::Pool;
use mysql_async::prelude::Queryable;

use super::base_redis_url;

pub fn base_mysql_url() -> String {
    std::env::var("HANDOFF_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
}

pub struct MyEnv {
    pub id: String,
    pub database_url: String,
    pub redis_url: String,
    pub db: Pool,
    pub redis: fred::prelude::Client,
}

impl MyEnv {
    pub async fn new() -> Self {
        Self::with_redis(&base_redis_url()).await
    }

    pub async fn with_redis(redis_url: &str) -> Self {
        let id = format!("t{:08x}", rand::random::<u32>());
        let admin = Pool::new(base_mysql_url().as_str());
        admin
            .get_conn()
            .await
            .expect("connect to test MariaDB")
            .query_drop(format!("CREATE DATABASE {id}"))
            .await
            .unwrap();
        let database_url = format!("{}/{id}", base_mysql_url());
        let db = Pool::new(database_url.as_str());
        let redis = super::TestEnv::redis_client(redis_url).await;
        let env = Self { id, database_url, redis_url: redis_url.to_owned(), db, redis };
        let config = handoff::load_str(&format!("[database]\nurl = \"{}\"\n", env.database_url)).unwrap();
        let database = handoff::Database::connect(&config.database, "handoff-test").unwrap();
        handoff::migrate(&database, Default::default(), &handoff::Part::ALL.into_iter().collect())
            .await
            .expect("migrate MariaDB");
        env
    }

    pub fn stream(&self, aggregate_type: &str) -> String {
        format!("{}:{aggregate_type}", self.id)
    }

    pub fn base_config(&self) -> String {
        format!(
            "[database]\nurl = \"{}\"\npool_size = 4\n[redis]\nurl = \"{}\"\ncommand_timeout = \"1s\"\n\
             [telemetry]\nlisten = \"127.0.0.1:0\"\nsample_interval = \"100ms\"\n[shutdown]\ngrace_period = \"5s\"\n",
            self.database_url, self.redis_url
        )
    }

    /// One relay on the reference outbox; `extra` goes into `[[relay]]`.
    pub fn config(&self, extra: &str) -> String {
        let defaults = super::relay_defaults(&self.id, extra);
        format!("{}\n[[relay]]\nname = \"relay\"\n{defaults}{extra}\n", self.base_config())
    }

    pub async fn exec(&self, sql: &str) {
        self.db.get_conn().await.unwrap().query_drop(sql).await.unwrap();
    }

    pub async fn scalar(&self, sql: &str) -> i64 {
        let row: Option<i64> = self.db.get_conn().await.unwrap().query_first(sql).await.unwrap();
        row.unwrap_or_default()
    }

    /// The rows `sql` returns, each as `T` (a tuple of its columns, or one value).
    pub async fn rows<T: mysql_async::prelude::FromRow + Send + 'static>(&self, sql: &str) -> Vec<T> {
        self.db.get_conn().await.unwrap().query(sql).await.unwrap()
    }

    /// `n` events `<prefix>-<i>` of `aggregate_type`, as an owner service inserts them.
    pub async fn insert_events(&self, prefix: &str, aggregate_type: &str, n: usize) {
        let values: Vec<String> = (1..=n)
            .map(|i| {
                format!(
                    "('{prefix}-{i}', '{aggregate_type}', 'agg-{i}', 'user.changed', \
                     JSON_OBJECT('auditId', '{prefix}-{i}', 'actor', 'admin', 'n', {i}), \
                     '{{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}}')"
                )
            })
            .collect();
        for chunk in values.chunks(500) {
            self.exec(&format!(
                "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES {}",
                chunk.join(", ")
            ))
            .await;
        }
    }

    pub async fn count(&self, status: &str) -> i64 {
        self.scalar(&format!("SELECT COUNT(*) FROM audit_outbox WHERE status = '{status}'")).await
    }

    pub async fn await_delivered(&self, n: i64) {
        super::eventually(&format!("{n} rows delivered"), || async {
            (self.count("DELIVERED").await == n).then_some(())
        })
        .await;
    }

    pub async fn stream_event_ids(&self, stream: &str) -> Vec<String> {
        use fred::prelude::*;
        let entries: Vec<(String, std::collections::HashMap<String, String>)> =
            self.redis.xrange(stream, "-", "+", None).await.unwrap();
        entries.into_iter().map(|(_, f)| f["event_id"].clone()).collect()
    }
}

impl Drop for MyEnv {
    fn drop(&mut self) {
        let id = self.id.clone();
        // Best effort: drop the test database so MariaDB does not fill up across runs.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let admin = Pool::new(base_mysql_url().as_str());
                if let Ok(mut conn) = admin.get_conn().await {
                    let _ = conn.query_drop(format!("DROP DATABASE IF EXISTS {id}")).await;
                }
            });
        })
        .join()
        .ok();
    }
}
