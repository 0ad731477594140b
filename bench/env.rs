//! The benchmark's world: its own schema in the local Postgres, its own stream prefix, helpers
//! to fill the outbox, run the real binary and read its resource use.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fred::prelude::*;
use tokio_postgres::NoTls;

pub struct BenchEnv {
    pub schema: String,
    pub database_url: String,
    pub redis_url: String,
    /// `[redis.tls]` for every config the benchmark writes (empty without TLS).
    pub redis_tls: String,
    pub db: tokio_postgres::Client,
    pub redis: fred::prelude::Client,
    /// The broker as handoff sees it (for what a stream has been sent).
    pub broker: handoff::RedisStream,
    pub binary: PathBuf,
    pub dir: PathBuf,
}

impl BenchEnv {
    pub async fn new(base_url: &str, redis_url: &str, binary: PathBuf, dir: PathBuf) -> anyhow::Result<Self> {
        Self::with_layout(base_url, redis_url, binary, dir, handoff::OutboxLayout::Plain).await
    }

    /// Like `new`, with the outbox created plain or partitioned by time.
    pub async fn with_layout(
        base_url: &str,
        redis_url: &str,
        binary: PathBuf,
        dir: PathBuf,
        layout: handoff::OutboxLayout,
    ) -> anyhow::Result<Self> {
        static ENVIRONMENTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let made = ENVIRONMENTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let schema = format!("bench_{}_{made}", std::process::id());
        let (admin, conn) = tokio_postgres::connect(base_url, NoTls).await?;
        tokio::spawn(conn);
        admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")).await?;
        let sep = if base_url.contains('?') { '&' } else { '?' };
        let database_url = format!("{base_url}{sep}options=-csearch_path%3D{schema}");
        let (db, conn) = tokio_postgres::connect(&database_url, NoTls).await?;
        tokio::spawn(conn);
        // HANDOFF_BENCH_REDIS_CA: a CA file for a `rediss://` URL (the benchmark of TLS to Redis);
        // the benchmark's own client connects the way handoff does.
        let redis_tls = std::env::var("HANDOFF_BENCH_REDIS_CA")
            .map(|ca| format!("[redis.tls]\nca_file = \"{ca}\"\n"))
            .unwrap_or_default();
        let redis_config = handoff::load_str(&format!(
            "[database]\nurl = \"{database_url}\"\n[redis]\nurl = \"{redis_url}\"\n{redis_tls}"
        ))?;
        let (stream, _) = handoff::RedisStream::connect(&redis_config.redis).await?;
        let redis = stream.client().clone();
        let broker = stream;
        std::fs::create_dir_all(&dir)?;
        let redis_url = redis_url.to_owned();
        let env = Self { schema, database_url, redis_url, redis_tls, db, redis, broker, binary, dir };
        let pool = handoff::postgres_pool(&env.database_config(), "handoff-bench")?;
        handoff::migrate_postgres_with(&pool, layout).await?;
        Ok(env)
    }

    pub fn database_config(&self) -> handoff::DatabaseConfig {
        handoff::load_str(&format!("[database]\nurl = \"{}\"\n", self.database_url)).expect("config").database
    }

    /// CPU seconds (user + system) the Redis server has used so far, from `INFO cpu`: the relay's
    /// appends cost Redis time too, on the same two cores.
    pub async fn redis_cpu_seconds(&self) -> anyhow::Result<f64> {
        let info: String = self.redis.info(Some(fred::types::InfoKind::Cpu)).await?;
        Ok(info
            .lines()
            .filter_map(|l| l.strip_prefix("used_cpu_sys:").or_else(|| l.strip_prefix("used_cpu_user:")))
            .filter_map(|v| v.trim().parse::<f64>().ok())
            .sum())
    }

    /// What a stream takes in Redis's memory (`MEMORY USAGE key SAMPLES 0`: every node counted).
    pub async fn stream_memory(&self, key: &str) -> anyhow::Result<i64> {
        use fred::interfaces::ClientLike;
        let memory = fred::types::CustomCommand::new_static("MEMORY", fred::types::ClusterHash::Offset(1), false);
        let bytes: Option<i64> = self.redis.custom(memory, vec!["USAGE", key, "SAMPLES", "0"]).await?;
        Ok(bytes.unwrap_or(0))
    }

    pub fn stream(&self, name: &str) -> String {
        format!("{}:{name}", self.schema)
    }

    /// Empties the outbox, inbox and audit log and deletes the benchmark's streams.
    pub async fn reset(&self) -> anyhow::Result<()> {
        self.db.batch_execute("TRUNCATE audit_outbox, consumer_inbox, consumer_inbox_poison, audit_logs").await?;
        let keys: Vec<String> = self
            .redis
            .custom(
                fred::types::CustomCommand::new_static("KEYS", fred::types::ClusterHash::Random, false),
                vec![format!("{}:*", self.schema)],
            )
            .await?;
        for key in keys {
            let _: i64 = self.redis.del(key).await?;
        }
        Ok(())
    }

    /// Removes the benchmark's schema (a second environment's, when the run made one).
    pub async fn drop_schema(&self) -> anyhow::Result<()> {
        self.reset().await?;
        self.db.batch_execute(&format!("DROP SCHEMA {} CASCADE", self.schema)).await?;
        Ok(())
    }

    /// Inserts `n` pending events with ~300-byte JSON payloads (one statement per 50k rows).
    pub async fn fill(&self, n: usize, prefix: &str) -> anyhow::Result<()> {
        self.fill_as(n, prefix, "user").await
    }

    /// Like `fill`, with another aggregate type (so the events go to another stream).
    pub async fn fill_as(&self, n: usize, prefix: &str, aggregate_type: &str) -> anyhow::Result<()> {
        let mut done = 0;
        while done < n {
            let chunk = (n - done).min(50_000);
            self.insert_typed(prefix, aggregate_type, done, chunk).await?;
            done += chunk;
        }
        self.db.batch_execute("ANALYZE audit_outbox").await?;
        Ok(())
    }

    /// Inserts the pending events `prefix-(after+1)` … `prefix-(after+count)`, ~300-byte JSON
    /// payloads, in one statement.
    pub async fn insert_events(&self, prefix: &str, after: usize, count: usize) -> anyhow::Result<()> {
        self.insert_typed(prefix, "user", after, count).await
    }

    async fn insert_typed(&self, prefix: &str, aggregate_type: &str, after: usize, count: usize) -> anyhow::Result<()> {
        let (after, count) = (after as i64, count as i64);
        self.db
            .execute(
                "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers)
                     SELECT $1 || '-' || ($2 + g), $4, 'user-' || (($2 + g) % 1000), 'auth.mfa_policy_changed',
                            jsonb_build_object('auditId', $1 || '-' || ($2 + g), 'actor', 'admin@example.com',
                                               'userId', 'user-' || (($2 + g) % 1000), 'policy', 'mfa_required',
                                               'reason', repeat(md5(g::text), 5)),
                            '{\"traceparent\": \"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\"}'
                     FROM generate_series(1, $3::bigint) g",
                &[&prefix, &after, &count, &aggregate_type],
            )
            .await?;
        Ok(())
    }

    /// WAL the server has written so far, in bytes (`pg_stat_wal`, Postgres 14 and later).
    pub async fn wal_bytes(&self) -> anyhow::Result<i64> {
        self.scalar("SELECT wal_bytes::bigint FROM pg_stat_wal").await
    }

    pub async fn scalar(&self, sql: &str) -> anyhow::Result<i64> {
        Ok(self.db.query_one(sql, &[]).await?.get(0))
    }

    /// Waits until the row `last` names exists and `table` holds `n` rows. Until then it probes
    /// that one row by its unique key: counting the table every 10 ms instead (a scan of a table
    /// that grows through the run, by parallel workers once past 8 MB) took CPU from the very
    /// run it timed, on the two cores the run shares.
    pub async fn until_written(&self, limit: Duration, n: i64, table: &str, last: &str) -> anyhow::Result<Duration> {
        let probe = format!("SELECT count(*) FROM {table} WHERE {last}");
        let count = format!("SELECT count(*) FROM {table}");
        time_until(limit, || async { Ok(self.scalar(&probe).await? > 0 && self.scalar(&count).await? >= n) }).await
    }

    /// The rate at which a component wrote `table`'s `n` rows, by the database's clock: `column`
    /// holds each writing transaction's `now()`, so this is the rows written after the first
    /// transaction over the time from its start to the last one's. The process's start and its
    /// first batch are left out, as they are from the SQL limits these runs are compared with.
    pub async fn written_rate(
        &self,
        limit: Duration,
        n: i64,
        table: &str,
        column: &str,
        last: &str,
    ) -> anyhow::Result<f64> {
        self.until_written(limit, n, table, last).await?;
        let row = self
            .db
            .query_one(
                &format!(
                    "SELECT count(*) FILTER (WHERE {column} > f.first), extract(epoch FROM max({column}) - f.first)::float8
                     FROM {table}, (SELECT min({column}) AS first FROM {table}) f GROUP BY f.first"
                ),
                &[],
            )
            .await?;
        let (after_first, seconds): (i64, f64) = (row.get(0), row.get(1));
        anyhow::ensure!(seconds > 0.0, "all {n} rows of {table} came in one transaction; use more events");
        Ok(after_first as f64 / seconds)
    }

    /// Rows still PENDING or IN_FLIGHT, counted on the claim's partial indexes. A predicate the
    /// partial indexes cannot answer (`status <> 'DELIVERED'`, `status IN (…)`) scans the whole
    /// table: over 1M delivered rows that is a parallel scan of ~0.5 s per poll, charged to the
    /// history runs alone (it made them look 10-35% slower than they were).
    pub async fn open_rows(&self) -> anyhow::Result<i64> {
        self.scalar(
            "SELECT (SELECT count(*) FROM audit_outbox WHERE status = 'PENDING')
                  + (SELECT count(*) FROM audit_outbox WHERE status = 'IN_FLIGHT')",
        )
        .await
    }

    /// Autovacuum's passes over the outbox: how many it has finished (vacuums and analyzes), and
    /// how many are under way now.
    pub async fn autovacuum_passes(&self) -> anyhow::Result<(i64, i64)> {
        let row = self
            .db
            .query_one(
                "SELECT (SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0) FROM pg_stat_user_tables
                         WHERE relid = 'audit_outbox'::regclass)::bigint,
                        (SELECT count(*) FROM pg_stat_progress_vacuum WHERE relid = 'audit_outbox'::regclass)
                      + (SELECT count(*) FROM pg_stat_progress_analyze WHERE relid = 'audit_outbox'::regclass)",
                &[],
            )
            .await?;
        Ok((row.get(0), row.get(1)))
    }

    /// What the Postgres server has done so far: CPU, WAL, checkpoints, autovacuum passes over
    /// the outbox (for the sustained run's windows).
    pub async fn server_activity(&self) -> anyhow::Result<ServerActivity> {
        let row = self
            .db
            .query_one(
                "SELECT (SELECT wal_bytes::bigint FROM pg_stat_wal), (SELECT wal_fpi FROM pg_stat_wal),
                        (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)",
                &[],
            )
            .await?;
        Ok(ServerActivity {
            cpu_seconds: postgres_cpu_seconds(),
            wal_bytes: row.get(0),
            wal_fpi: row.get(1),
            checkpoints: row.get(2),
            autovacuum_passes: self.autovacuum_passes().await?.0,
        })
    }

    /// Fails when a run left rows DEAD (a run that did not deliver everything measured nothing).
    pub async fn ensure_none_dead(&self) -> anyhow::Result<()> {
        let dead = self.scalar("SELECT count(*) FROM audit_outbox WHERE status = 'DEAD'").await?;
        anyhow::ensure!(
            dead == 0,
            "{dead} outbox rows went DEAD during the run (see the relay logs in {:?})",
            self.dir
        );
        Ok(())
    }

    pub async fn xlen(&self, stream: &str) -> anyhow::Result<u64> {
        Ok(self.redis.xlen(stream).await?)
    }

    /// Entries ever appended to `stream`, trimmed ones included (`XINFO STREAM`'s entries-added).
    pub async fn appended(&self, stream: &str) -> anyhow::Result<i64> {
        appended(&self.broker, stream).await
    }

    /// Starts `handoff run` with `config` (written to a file); logs go to a file next to it.
    pub fn spawn(&self, name: &str, config: &str) -> anyhow::Result<Child> {
        self.spawn_binary(&self.binary, name, config)
    }

    /// Like `spawn`, with another build of handoff (an earlier one, to compare in one sitting).
    pub fn spawn_binary(&self, binary: &std::path::Path, name: &str, config: &str) -> anyhow::Result<Child> {
        let path = self.dir.join(format!("{name}.toml"));
        std::fs::write(&path, config)?;
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))?;
        Ok(Command::new(binary)
            .args(["run", "--config"])
            .arg(&path)
            // HANDOFF_BENCH_LOG=handoff=trace shows where each batch's time goes.
            .env("RUST_LOG", std::env::var("HANDOFF_BENCH_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?)
    }

    /// The server settings that shape the figures, as `(name, setting)`.
    pub async fn postgres_settings(&self) -> anyhow::Result<Vec<(String, String)>> {
        let rows = self
            .db
            .query(
                "SELECT name, current_setting(name) FROM pg_settings
                 WHERE name IN ('server_version', 'autovacuum', 'autovacuum_naptime',
                                'autovacuum_vacuum_scale_factor', 'shared_buffers', 'synchronous_commit',
                                'fsync', 'max_wal_size', 'checkpoint_timeout', 'work_mem')
                 ORDER BY name",
                &[],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// The sections every benchmark config shares.
    pub fn base_config(&self) -> String {
        self.config_with_url(&self.database_url)
    }

    /// Like `base_config`, the process's connections named `application` in
    /// `pg_stat_activity`: what their backends use is told apart by
    /// [`Self::backend_cpu_seconds`].
    pub fn base_config_as(&self, application: &str) -> String {
        self.config_with_url(&format!("{}&application_name={application}", self.database_url))
    }

    fn config_with_url(&self, url: &str) -> String {
        format!(
            "[database]\nurl = \"{url}\"\npool_size = 8\n[redis]\nurl = \"{}\"\n{}[telemetry]\nlisten = \"127.0.0.1:0\"\nsample_interval = \"1h\"\n",
            self.redis_url, self.redis_tls
        )
    }

    /// Each live backend serving one of `applications`: (pid, application name, CPU seconds it
    /// has used). A backend gone before its `/proc` entry is read is left out; one that exits
    /// between two readings takes its CPU with it (a pool keeps its connections for the
    /// process's life, so the deployment's backends do not).
    pub async fn backend_cpu_seconds(&self, applications: &[&str]) -> anyhow::Result<Vec<(i32, String, f64)>> {
        let sql = "SELECT pid, application_name FROM pg_stat_activity WHERE application_name = ANY($1)";
        let rows = self.db.query(sql, &[&applications]).await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let pid: i32 = r.get(0);
                let application: String = r.get(1);
                Some((pid, application, postgres_process_cpu_seconds(pid)?))
            })
            .collect())
    }
}

/// Entries ever appended to `stream` (0 before the first). What a relay delivered, counted
/// without reading the outbox: counting its PENDING rows walks every entry that delivered rows
/// left in the partial index since the last vacuum, a scan that grows through a long run.
pub async fn appended(broker: &handoff::RedisStream, stream: &str) -> anyhow::Result<i64> {
    use handoff::EventStream;
    let state = broker.stream_state(stream).await.map_err(|e| anyhow::anyhow!("XINFO STREAM {stream}: {e}"))?;
    Ok(state.entries_added.unwrap_or(0) as i64)
}

/// Counters of the Postgres server; see [`BenchEnv::server_activity`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerActivity {
    pub cpu_seconds: f64,
    pub wal_bytes: i64,
    pub wal_fpi: i64,
    pub checkpoints: i64,
    pub autovacuum_passes: i64,
}

impl ServerActivity {
    /// What happened between `earlier` and this.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            cpu_seconds: self.cpu_seconds - earlier.cpu_seconds,
            wal_bytes: self.wal_bytes - earlier.wal_bytes,
            wal_fpi: self.wal_fpi - earlier.wal_fpi,
            checkpoints: self.checkpoints - earlier.checkpoints,
            autovacuum_passes: self.autovacuum_passes - earlier.autovacuum_passes,
        }
    }
}

/// Peak resident set (kB, from /proc) and CPU seconds (its CPU-time clock) of a running process.
pub fn resources(pid: u32) -> (u64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let peak_kb = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (peak_kb, process_cpu_seconds(pid).unwrap_or(0.0))
}

/// CPU seconds the process `pid` has used, all its threads (exited ones too), to the
/// nanosecond: its CPU-time clock. `/proc/<pid>/stat` holds the same figure truncated to 10 ms
/// ticks — over a few seconds of a process using a few hundredths of a core (a relay at rest,
/// one of eight summed) the truncation is a large part of a difference.
#[cfg(target_os = "linux")]
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    // Pid 0 would name the calling process: never one measured.
    let pid = libc::pid_t::try_from(pid).ok().filter(|&p| p > 0)?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: all zeros is a valid timespec (whatever padding the target gives it); both calls
    // only write through pointers to these locals, which outlive them.
    let mut time: libc::timespec = unsafe { std::mem::zeroed() };
    let read = unsafe { libc::clock_getcpuclockid(pid, &mut clock) == 0 && libc::clock_gettime(clock, &mut time) == 0 };
    read.then_some(time.tv_sec as f64 + time.tv_nsec as f64 * 1e-9)
}

/// Elsewhere, `/proc`'s ticks where there are any.
#[cfg(not(target_os = "linux"))]
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    Some(stat_ticks(std::path::Path::new(&format!("/proc/{pid}/stat")), None, OWN)? / 100.0)
}

/// A process's own user and system time, among `/proc/<pid>/stat`'s fields after its command.
const OWN: std::ops::RangeInclusive<usize> = 11..=12;
/// Its waited-for children's.
const CHILDREN: std::ops::RangeInclusive<usize> = 13..=14;

/// The sum of a `/proc/<pid>/stat` file's time `fields` ([`OWN`], [`CHILDREN`]), in clock
/// ticks; `None` if the file cannot be read or its command is not `command`.
fn stat_ticks(path: &std::path::Path, command: Option<&str>, fields: std::ops::RangeInclusive<usize>) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which may contain spaces) start at index 2.
    let (head, rest) = stat.rsplit_once(')')?;
    if command.is_some_and(|c| !head.ends_with(&format!("({c}"))) {
        return None;
    }
    let values: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.filter_map(|i| values.get(i)?.parse::<f64>().ok()).sum())
}

/// CPU seconds the Postgres process `pid` has used, if it is one (by its name in `/proc`).
fn postgres_process_cpu_seconds(pid: i32) -> Option<f64> {
    // Only a Postgres process: the pid read from pg_stat_activity may have gone and been reused.
    stat_ticks(std::path::Path::new(&format!("/proc/{pid}/stat")), Some("postgres"), OWN)?;
    process_cpu_seconds(u32::try_from(pid).ok()?)
}

/// CPU seconds all Postgres server processes on this machine have used so far: each live
/// process's own, from its CPU clock, and its waited-for children's, from `/proc` in ticks (a
/// backend that exited is counted in the postmaster's, to 10 ms; the deployment's pools keep
/// their backends for the run). The difference over a run is the server's CPU for that run, as
/// long as nothing else uses the server meanwhile.
pub fn postgres_cpu_seconds() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0.0 };
    let mut seconds = 0.0;
    for entry in dir.flatten() {
        let Some(children) = stat_ticks(&entry.path().join("stat"), Some("postgres"), CHILDREN) else { continue };
        let own = entry.file_name().to_str().and_then(|pid| pid.parse().ok()).and_then(process_cpu_seconds);
        seconds += own.unwrap_or(0.0) + children / 100.0;
    }
    seconds
}

/// SIGTERM and wait (bounded), then SIGKILL.
pub fn stop(child: &mut Child) {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Polls `done` every 10 ms; returns the elapsed time, or fails after `limit`.
pub async fn time_until<F, Fut>(limit: Duration, mut done: F) -> anyhow::Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let started = Instant::now();
    loop {
        if done().await? {
            return Ok(started.elapsed());
        }
        if started.elapsed() > limit {
            anyhow::bail!("not done within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child killed when dropped, a failed assertion too.
    struct Busy(std::process::Child);

    impl Drop for Busy {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn a_process_cpu_clock_reads_what_proc_counts_in_ticks() {
        // A busy child (not this process: the relays' and Postgres's clocks are read from outside).
        let busy = Busy(Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap());
        let pid = busy.0.id();
        let stat = format!("/proc/{pid}/stat");
        let ticks = || stat_ticks(std::path::Path::new(&stat), None, OWN).unwrap() / 100.0;
        while ticks() < 0.05 {
            std::thread::yield_now();
        }
        let (before, clock, after) = (ticks(), process_cpu_seconds(pid).unwrap(), ticks());
        drop(busy);
        // The ticks are the clock truncated, user and system time each to 10 ms, read on either
        // side of it.
        assert!(before <= clock && clock < after + 0.02, "ticks {before} / {after}, clock {clock}");
        assert_eq!(process_cpu_seconds(pid), None, "a process that is gone has no clock");
        assert_eq!(process_cpu_seconds(0), None, "pid 0 is not a process to measure");
    }
}
