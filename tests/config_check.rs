//! Bad configuration and bad SQL are reported with the key or statement they concern, all at
//! once, and without leaking secrets.

use crate::common;

use common::db_env::{DbEnv, Dialect};
use common::process::{run_to_end, run_with_env};
use common::{TestEnv, eventually};

fn minimal(extra: &str) -> String {
    format!("[database]\nurl = \"postgres://postgres@127.0.0.1:5432/handoff_test\"\n{extra}")
}

#[test]
fn unknown_keys_are_rejected_by_name_with_the_closest_known_key() {
    let (ok, out) = run_to_end(&minimal("[[relay]]\nname = \"a\"\nbatch_sise = 10\n"), &["check"]);
    assert!(!ok);
    assert!(out.contains("relay[0].batch_sise: unknown key `batch_sise`; did you mean `batch_size`?"), "{out}");
}

#[test]
fn unknown_keys_type_errors_and_rule_violations_are_all_reported_in_one_run() {
    let config = minimal(
        "colour = \"blue\"\n\
         [redis]\ncomand_timeout = \"5s\"\n\
         [[relay]]\nname = \"a\"\nbatch_sise = 10\nlease = 30\nconcurrency = 0\n",
    );
    let (ok, out) = run_to_end(&config, &["check"]);
    assert!(!ok);
    for expected in [
        "database.colour: unknown key `colour`",
        "redis.comand_timeout: unknown key `comand_timeout`; did you mean `command_timeout`?",
        "relay[0].batch_sise: unknown key `batch_sise`; did you mean `batch_size`?",
        "relay[0].lease: invalid type",
        "relay[0].concurrency must be between 1 and 64",
    ] {
        assert!(out.contains(expected), "missing `{expected}` in:\n{out}");
    }
    assert!(out.contains("(5 problems)"), "each problem once: {out}");
}

#[test]
fn a_locked_claim_is_refused_where_it_cannot_keep_its_promises() {
    let config = minimal(
        "[[relay]]\nname = \"a\"\nclaim = \"locked\"\nconcurrency = 8\nlease = \"2s\"\n\
         [relay.ordering]\n\
         [relay.sql]\nmark_delivered = \"UPDATE audit_outbox SET status = 'DELIVERED' WHERE id = ANY(:ids::bigint[])\"\n",
    );
    let (ok, out) = run_to_end(&config, &["check"]);
    assert!(!ok);
    for expected in [
        "relay[0].claim: \"locked\" cannot keep ordering's per-key runs",
        "relay[0].claim: \"locked\" runs the reference schema's statements, but sql.mark_delivered replace(s) them",
        "database.pool_size (8) must be larger than the concurrency of the relays with claim = \"locked\" (8)",
        "relay[0].lease (2s) must be longer than redis.command_timeout (5s) with claim = \"locked\"",
    ] {
        assert!(out.contains(expected), "missing `{expected}` in:\n{out}");
    }
    let mysql =
        "[database]\nurl = \"mysql://root@127.0.0.1:3306/handoff_test\"\n[[relay]]\nname = \"a\"\nclaim = \"locked\"\n";
    let (ok, out) = run_to_end(mysql, &["check"]);
    assert!(!ok);
    assert!(out.contains("relay[0].claim: \"locked\" needs Postgres"), "{out}");
}

#[test]
fn durations_need_units_and_the_key_is_named() {
    let (ok, out) = run_to_end(&minimal("[[relay]]\nname = \"a\"\nlease = 30\n"), &["check"]);
    assert!(!ok);
    assert!(out.contains("lease"), "{out}");
}

#[test]
fn every_problem_is_listed_at_once_with_its_path() {
    let config = minimal(
        "[[relay]]\nname = \"a\"\nbatch_size = 0\npoll_interval = \"0s\"\nstream = \"s:{x\"\n\
         [relay.backoff]\ninitial = \"2s\"\nmax = \"1s\"\nmultiplier = 2.0\njitter = 0.1\n\
         [[relay]]\nname = \"a\"\n",
    );
    let (ok, out) = run_to_end(&config, &["check"]);
    assert!(!ok);
    for expected in [
        "relay[0].batch_size",
        "relay[0].poll_interval",
        "relay[0].stream",
        "relay[0].backoff.max",
        "relay[1].name: `a` is used by another relay",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
}

#[test]
fn an_unknown_sql_parameter_names_the_statement() {
    let config = minimal("[[relay]]\nname = \"a\"\n[relay.sql]\ndead = \"UPDATE t SET x = :oops\"\n");
    let (ok, out) = run_to_end(&config, &["check"]);
    assert!(!ok);
    assert!(out.contains("relay[0].sql.dead: unknown parameter :oops"), "{out}");
}

#[test]
fn the_environment_overrides_secrets_and_ignores_injected_service_variables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.toml");
    std::fs::write(&path, "[database]\nurl = \"postgres://nobody@127.0.0.1:1/none\"\n").unwrap();
    let env = [
        ("HANDOFF_DATABASE__URL", "postgres://postgres@127.0.0.1:5432/handoff_test"),
        // What Kubernetes injects for a Service named `handoff`; must not trip the unknown-key check.
        ("HANDOFF_PORT", "tcp://10.0.0.1:9464"),
        ("HANDOFF_SERVICE_HOST", "10.0.0.1"),
    ];
    let (ok, out) = run_with_env(&path, &["check"], &env);
    assert!(ok, "{out}");
    assert!(out.contains("database: reachable"));
}

#[test]
fn url_file_reads_a_mounted_secret_and_conflicts_with_url() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("db-url");
    std::fs::write(&secret, "postgres://postgres@127.0.0.1:5432/handoff_test\n").unwrap();
    let config = format!("[database]\nurl_file = \"{}\"\n", secret.display());
    let (ok, out) = run_to_end(&config, &["check"]);
    assert!(ok, "{out}");
    let both = format!("{config}url = \"postgres://x@y/z\"\n");
    let (ok, out) = run_to_end(&both, &["check"]);
    assert!(!ok && out.contains("database.url and database.url_file are both set"), "{out}");
}

#[test]
fn a_server_that_cannot_be_verified_is_refused_rather_than_used() {
    // The local Postgres offers TLS with a self-signed certificate no root vouches for
    // (scripts/services makes one; Debian's own cluster has its "snakeoil" one), or no TLS at
    // all; its Redis speaks plain TCP only. Either way nothing is verified: refused.
    let config = "[database]\nurl = \"postgres://app:hunter2@127.0.0.1:5432/handoff_test?sslmode=verify-full\"\n\
                  [redis]\nurl = \"rediss://:s3cret@127.0.0.1:6379\"\ncommand_timeout = \"1s\"\n[[relay]]\nname = \"a\"\n";
    let (ok, out) = run_to_end(config, &["check"]);
    assert!(!ok, "{out}");
    let unverifiable = out.contains("certificate") || out.contains("server does not support TLS");
    assert!(out.contains("error: database:") && unverifiable, "{out}");
    assert!(out.contains("error: redis"), "{out}");
    assert!(!out.contains("hunter2") && !out.contains("s3cret"), "secrets leaked: {out}");
}

#[test]
fn tls_settings_a_connection_cannot_honour_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-ca.pem");
    let config = format!(
        "[database]\nurl = \"postgres://u@db.internal/x?sslmode=verify-full&sslrootcert={ca}\"\n",
        ca = missing.display()
    );
    let (ok, out) = run_to_end(&config, &["check"]);
    assert!(!ok && out.contains("database.tls.ca_file: cannot read"), "{out}");

    let plain = "[database]\nurl = \"postgres://u@db/x\"\n[redis]\nurl = \"redis://127.0.0.1:6379\"\n[redis.tls]\nmode = \"verify-full\"\n";
    let (ok, out) = run_to_end(plain, &["check"]);
    assert!(!ok && out.contains("redis.tls is set but redis.url is not a TLS URL"), "{out}");

    let mysql = "[database]\nurl = \"mysql://root@127.0.0.1:3306/test?ssl-mode=VERIFY_CA\"\n";
    let (ok, out) = run_to_end(mysql, &["check"]);
    assert!(!ok && out.contains("database.tls.mode: verify-ca cannot be honoured on MySQL"), "{out}");

    let clash = "[database]\nurl = \"postgres://u@db/x?sslmode=require\"\n[database.tls]\nmode = \"verify-full\"\n";
    let (ok, out) = run_to_end(clash, &["check"]);
    assert!(!ok && out.contains("database.tls.mode and the URL's TLS mode disagree"), "{out}");

    let half = "[database]\nurl = \"postgres://u@db/x\"\n[database.tls]\ncert_file = \"/c.pem\"\n";
    let (ok, out) = run_to_end(half, &["check"]);
    assert!(!ok && out.contains("database.tls.cert_file and database.tls.key_file go together"), "{out}");
}

#[test]
fn secrets_never_appear_in_errors() {
    let config = "[database]\nurl = \"postgres://postgres:hunter2@127.0.0.1:1/none\"\n[redis]\nurl = \"redis://:sekrit@127.0.0.1:1\"\ncommand_timeout = \"200ms\"\n";
    let (ok, out) = run_to_end(config, &["check"]);
    assert!(!ok);
    assert!(!out.contains("hunter2") && !out.contains("sekrit"), "{out}");
    assert!(out.contains("database"), "{out}");
}

/// An HTTP handler's URL may carry credentials: `check` names the handler and the host, never
/// the user's password, the path's token (webhook URLs carry one) or the query's.
#[tokio::test]
async fn a_handler_url_with_credentials_is_shown_redacted() {
    let env = TestEnv::new().await;
    let worker = format!(
        "{}\n[[worker]]\nname = \"w\"\nconsumer = \"admin\"\n[[worker.handler]]\nevent_types = [\"*\"]\n\
         http = {{ url = \"https://svc:hunter2@127.0.0.1:1/services/T0/B0/pathtoken?token=sekrit\" }}\n",
        env.base_config()
    );
    let (ok, out) = run_to_end(&worker, &["check"]);
    assert!(!ok, "{out}");
    assert!(out.contains("https://***@127.0.0.1:1/***?***"), "{out}");
    assert!(!out.contains("hunter2") && !out.contains("sekrit") && !out.contains("pathtoken"), "{out}");
}

/// A statement naming a column the table lacks, in each dialect's SQL: `check` names the key
/// and the column.
async fn check_names_the_statement_the_database_rejects(dialect: Dialect) {
    let env = DbEnv::new(dialect).await;
    let (key, statement) = env.pick(
        ("release", "UPDATE audit_outbox SET statuz = 'PENDING' WHERE id = ANY(:ids)"),
        ("dead", "UPDATE audit_outbox SET statuz = 'DEAD' WHERE id = :id"),
    );
    let config = env.config(&format!("[relay.sql]\n{key} = \"{statement}\"\n"));
    let (ok, out) = run_to_end(&config, &["check"]);
    assert!(!ok);
    assert!(out.contains(&format!("sql.{key}")) && out.contains("statuz"), "{out}");
}

crate::on_both_dialects!(check_names_the_statement_the_database_rejects);

#[tokio::test]
async fn check_names_missing_claim_columns() {
    let env = TestEnv::new().await;
    let config = env.config(
        "[relay.sql]\nclaim = \"SELECT id, claim_token AS token, event_id, attempts, expired_claims FROM audit_outbox LIMIT :batch_size\"\n",
    );
    let (ok, out) = run_to_end(&config, &["check"]);
    assert!(!ok);
    assert!(out.contains("sql.claim") && out.contains("age_ms"), "{out}");
}

#[tokio::test]
async fn check_names_the_consumer_statement_and_column_at_fault() {
    let env = TestEnv::new().await;
    let bridge = env.bridge_config(
        "b1",
        &["user"],
        "[bridge.sql]\ninsert = \"INSERT INTO consumer_inbox (consumer, event_id, nope) VALUES (:consumer, :event_id, :payload)\"\n",
    );
    let (ok, out) = run_to_end(&bridge, &["check"]);
    assert!(!ok && out.contains("bridge `bridge`: sql.insert") && out.contains("nope"), "{out}");

    // The claim lacks expired_leases; the stats statement is fine; retry names a parameter the
    // statement is not offered (a configuration error, before any database work).
    let claim = "UPDATE consumer_inbox SET status = 'PROCESSING' WHERE consumer = :consumer AND id < :batch_size \
                 RETURNING id, lease_token AS token, event_id, event_type, payload, attempts";
    let worker =
        format!("{}{}", env.base_config(), TestEnv::worker_section(&format!("[worker.sql]\nclaim = \"{claim}\"")));
    let (ok, out) = run_to_end(&worker, &["check"]);
    assert!(!ok && out.contains("worker `worker` sql.claim") && out.contains("expired_leases"), "{out}");

    let typo =
        worker.replacen("[worker.sql]", "[worker.sql]\nretry = \"UPDATE consumer_inbox SET last_error = :oops\"", 1);
    let (ok, out) = run_to_end(&typo, &["check"]);
    assert!(!ok && out.contains("worker[0].sql.retry") && out.contains(":oops") && out.contains(":error"), "{out}");
}

#[tokio::test]
async fn check_passes_on_the_reference_schema() {
    let env = TestEnv::new().await;
    let (ok, out) = run_to_end(&env.config(""), &["check"]);
    assert!(ok, "{out}");
    assert!(out.contains("relay `relay`: statements prepared"), "{out}");
    // The default claim is resolved, and check says to what and why.
    assert!(out.contains("relay `relay`: claim = \"locked\" (auto: every condition"), "{out}");
    let (ok, out) = run_to_end(&env.config("claim = \"leased\""), &["check"]);
    assert!(ok && out.contains("relay `relay`: claim = \"leased\" (configured)"), "{out}");
}

#[test]
fn every_shipped_example_config_parses() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            handoff::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            seen += 1;
        }
    }
    assert!(seen > 0);
}

#[test]
fn the_documented_example_for_an_existing_consumer_is_the_shipped_file() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = std::fs::read_to_string(root.join("config/existing-consumer.toml")).unwrap();
    let doc = std::fs::read_to_string(root.join("docs/reference/sql-contract.md")).unwrap();
    assert!(doc.contains("](../../config/existing-consumer.toml)"), "sql-contract.md links the shipped file");
    let shown: Vec<&str> = doc.split("```toml\n").skip(1).map(|b| b.split("```").next().unwrap()).collect();
    assert!(!shown.is_empty(), "sql-contract.md shows part of config/existing-consumer.toml");
    for block in shown {
        assert!(
            file.contains(block),
            "sql-contract.md shows what config/existing-consumer.toml does not say:\n{block}"
        );
    }
}

/// A MySQL server that accepts the connection and never answers: `database.connect_timeout`
/// bounds the wait (the driver has no timeout of its own).
#[test]
fn a_silent_mysql_server_fails_within_the_connect_timeout() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let _held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in listener.incoming().flatten() {
            open.push(stream); // accepted, never answered
        }
    });
    let config = format!("[database]\nurl = \"mysql://root@127.0.0.1:{port}/x\"\nconnect_timeout = \"300ms\"\n");
    let (ok, out) = run_to_end(&config, &["check"]);
    assert!(!ok && out.contains("database.connect_timeout"), "{out}");
}

/// WAITAOF arrived with Redis 7.2; the test machine's Redis is older.
#[test]
fn a_fsync_gate_on_a_redis_without_waitaof_is_refused_naming_the_key() {
    let config = "[database]\nurl = \"postgres://postgres@127.0.0.1:5432/handoff_test\"\n\
                  [[relay]]\nname = \"a\"\n[relay.durability]\naof = true\n";
    let (ok, out) = run_to_end(config, &["check"]);
    assert!(!ok && out.contains("relay `a` durability.aof needs WAITAOF"), "{out}");
}

/// `migrate --print` prints the schema of the config's dialect, and refuses a config that does
/// not load rather than guess (it used to print the Postgres schema for a broken MySQL config).
#[test]
fn migrate_print_follows_the_config_and_refuses_a_broken_one() {
    let mysql = "[database]\nurl = \"mysql://root@127.0.0.1:3306/app\"\n[[relay]]\nname = \"a\"\n";
    let (ok, out) = run_to_end(mysql, &["migrate", "--print"]);
    assert!(ok && out.contains("ENGINE = InnoDB") && !out.contains("jsonb"), "{out}");
    let broken = format!("{mysql}batch_sise = 10\n");
    let (ok, out) = run_to_end(&broken, &["migrate", "--print"]);
    assert!(!ok && out.contains("batch_sise") && !out.contains("CREATE TABLE"), "{out}");
}

/// `migrations/roles/<dialect>/<role>.sql`, the schema as plain files for migration tools, is
/// exactly what `migrate --print --role` prints (`scripts/role-sql` writes them again).
#[test]
fn the_role_sql_files_are_what_migrate_prints() {
    for (dialect, url) in
        [("postgres", "postgres://handoff@127.0.0.1:1/app"), ("mysql", "mysql://handoff@127.0.0.1:1/app")]
    {
        for role in ["relay", "bridge", "worker"] {
            let (ok, printed) =
                run_to_end(&format!("[database]\nurl = \"{url}\"\n"), &["migrate", "--print", "--role", role]);
            assert!(ok, "{printed}");
            let path = format!("{}/migrations/roles/{dialect}/{role}.sql", env!("CARGO_MANIFEST_DIR"));
            let file = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                file == printed,
                "{path} differs from `handoff migrate --print --role {role}`: run scripts/role-sql"
            );
        }
    }
}

/// A command whose reader went away (`handoff migrate --print | head`) ends quietly: no panic
/// about a broken pipe.
#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("handoff.toml");
    std::fs::write(&path, "[database]\nurl = \"postgres://handoff@127.0.0.1:1/app\"\n").unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_handoff"))
        .args(["migrate", "--print", "--config"])
        .arg(&path)
        .stdout(writer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !stderr.contains("panicked"), "{:?}: {stderr}", out.status);
}

/// `HANDOFF_RELAY__<NAME>__<KEY>` reaches the `[[relay]]` entry of that name (the README's
/// "any key"); a name no entry has is an error naming the variable.
#[test]
fn an_environment_override_reaches_a_named_relay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("handoff.toml");
    std::fs::write(&path, minimal("[[relay]]\nname = \"orders\"\n[[relay]]\nname = \"auth-service\"\n")).unwrap();
    let (ok, out) =
        common::process::run_with_env(&path, &["check"], &[("HANDOFF_RELAY__AUTH_SERVICE__BATCH_SIZE", "0")]);
    assert!(!ok && out.contains("relay[1].batch_size") && !out.contains("relay[0].batch_size"), "{out}");
    let (ok, out) = common::process::run_with_env(&path, &["check"], &[("HANDOFF_RELAY__BILLING__BATCH_SIZE", "5")]);
    assert!(!ok && out.contains("HANDOFF_RELAY__BILLING__BATCH_SIZE: no [[relay]] entry is named `billing`"), "{out}");
}

/// The production checklist reads the live Redis: an evicting, unpersisted Redis with a replica
/// and an ungated relay warns about each, naming the setting; once fixed, each passes. Warnings
/// never fail the check.
#[tokio::test]
async fn check_warns_about_redis_settings_that_can_lose_entries_and_passes_them_once_fixed() {
    use common::redis_server::{RedisServer, redis_cli};
    let primary = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]).await;
    let _replica = RedisServer::replica_of(primary.port).await;
    let env = TestEnv::with_redis(&primary.url()).await;
    eventually("the replica to be connected", || async {
        redis_cli(primary.port, &["info", "replication"]).contains("connected_slaves:1").then_some(())
    })
    .await;
    let (ok, out) = run_to_end(&env.config(""), &["check"]);
    assert!(ok, "warnings do not fail the check: {out}");
    assert!(out.contains("warn: redis: maxmemory-policy is allkeys-lru"), "{out}");
    assert!(out.contains("warn: redis: no persistence"), "{out}");
    assert!(out.contains("warn: redis: 1 replica(s), and relay(s) relay settle"), "{out}");

    redis_cli(primary.port, &["config", "set", "maxmemory-policy", "noeviction"]);
    redis_cli(primary.port, &["config", "set", "appendonly", "yes"]);
    eventually("the AOF to be on", || async {
        redis_cli(primary.port, &["info", "persistence"]).contains("aof_enabled:1").then_some(())
    })
    .await;
    let gated = env.config("[relay.durability]\nreplicas = 1\n");
    let (ok, out) = run_to_end(&gated, &["check"]);
    assert!(ok && !out.contains("warn: redis"), "{out}");
    assert!(
        out.contains("ok: redis: maxmemory-policy noeviction") && out.contains("ok: redis: appendonly on"),
        "{out}"
    );
}
