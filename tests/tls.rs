//! TLS to every server handoff talks to, against real servers of the test's own that speak TLS
//! only, with a CA made at test time: the relay, bridge and worker run their paths over it;
//! `verify-full` succeeds with the right CA and host name and fails, naming the key, with a wrong
//! CA or host name; `verify-ca` accepts the host name; mutual TLS with a client certificate.

use crate::common;

use common::pki::Pki;
use common::process::{Handoff, run_to_end};
use common::tls_servers::{TlsMariaDb, TlsPostgres, TlsRedis, TlsRedisCluster};
use common::{TestEnv, eventually, relay_defaults};

/// A relay, a bridge and a worker in one config, on whatever `[database]` / `[redis]` say:
/// events of aggregate type `user` travel to `audit_logs` under stream prefix `id`.
fn chain(base: &str, id: &str) -> String {
    let worker = if base.contains("mysql://") {
        TestEnv::worker_section("")
            .replace("ON CONFLICT (audit_id) DO NOTHING", "ON DUPLICATE KEY UPDATE audit_id = audit_id")
    } else {
        TestEnv::worker_section("")
    };
    format!(
        "{base}\n[telemetry]\nlisten = \"127.0.0.1:0\"\n[shutdown]\ngrace_period = \"5s\"\n\
         [[relay]]\nname = \"relay\"\n{relay}\n\
         [[bridge]]\nname = \"bridge\"\nconsumer = \"admin\"\ninstance = \"tls\"\nblock = \"200ms\"\n\
         streams = [{{ key = \"{id}:user\", owner = \"relay\" }}]\n{worker}",
        relay = relay_defaults(id, ""),
    )
}

fn database(url: &str, tls: &str) -> String {
    format!("[database]\nurl = \"{url}\"\npool_size = 4\nconnect_timeout = \"3s\"\n[database.tls]\n{tls}\n")
}

fn shared_redis() -> String {
    format!("[redis]\nurl = \"{}\"\ncommand_timeout = \"1s\"\n", common::base_redis_url())
}

fn ca(path: &std::path::Path) -> String {
    format!("ca_file = \"{}\"\n", path.display())
}

fn client_cert(pki: &Pki) -> String {
    format!("cert_file = \"{}\"\nkey_file = \"{}\"\n", pki.client_cert.display(), pki.client_key.display())
}

fn check(config: &str) -> (bool, String) {
    run_to_end(config, &["check"])
}

/// Inserts `n` events through handoff's own pool (so over TLS).
async fn insert_events(config: &str, n: usize) {
    let config = handoff::load_str(config).unwrap();
    let db = handoff::Database::connect(&config.database, "tls-test").unwrap();
    let values: Vec<String> = (1..=n)
        .map(|i| format!("('tls-{i}', 'user', 'agg-{i}', 'user.changed', '{{\"actor\": \"admin\", \"n\": {i}}}')"))
        .collect();
    let sql = format!(
        "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES {}",
        values.join(", ")
    );
    match db {
        handoff::Database::Postgres(pool) => {
            pool.get().await.unwrap().batch_execute(&sql).await.unwrap();
        }
        handoff::Database::Mysql(pool) => {
            use mysql_async::prelude::Queryable;
            pool.get_conn().await.unwrap().query_drop(sql).await.unwrap();
        }
    }
}

/// Waits until `n` audit_logs rows exist, read through handoff's own pool.
async fn await_audit_logs(config: &str, n: i64) {
    let config = handoff::load_str(config).unwrap();
    let db = handoff::Database::connect(&config.database, "tls-test").unwrap();
    eventually(&format!("{n} audit_logs rows"), || async {
        let count: i64 = match &db {
            handoff::Database::Postgres(pool) => {
                pool.get().await.ok()?.query_one("SELECT count(*) FROM audit_logs", &[]).await.ok()?.get(0)
            }
            handoff::Database::Mysql(pool) => {
                use mysql_async::prelude::Queryable;
                let row: Option<i64> =
                    pool.get_conn().await.ok()?.query_first("SELECT COUNT(*) FROM audit_logs").await.ok()?;
                row?
            }
        };
        (count == n).then_some(())
    })
    .await;
}

#[tokio::test]
async fn postgres_over_tls_verifies_the_server_and_presents_a_client_certificate() {
    let pki = Pki::new();
    let pg = TlsPostgres::start(&pki).await;
    let id = format!("t{:08x}", rand::random::<u32>());
    let verified = format!("{}{}", database(&pg.url("postgres", "localhost"), &ca(&pki.ca)), shared_redis());

    let (ok, out) = run_to_end(&verified, &["migrate"]);
    assert!(ok, "{out}");
    let (ok, out) = check(&verified);
    assert!(ok && out.contains("database: reachable, TLSv1.3"), "{out}");
    assert!(out.contains("certificate and host name verified (mode verify-full)"), "{out}");

    // Relay, bridge and worker on a database they reach over verified TLS only.
    let config = chain(&verified, &id);
    let _running = Handoff::run(&config);
    insert_events(&config, 20).await;
    await_audit_logs(&config, 20).await;

    let wrong_ca = format!("{}{}", database(&pg.url("postgres", "localhost"), &ca(&pki.other_ca)), shared_redis());
    let (ok, out) = check(&wrong_ca);
    assert!(!ok && out.contains("not signed by a CA in database.tls.ca_file"), "{out}");

    // The certificate names `localhost`, not `127.0.0.1`.
    let by_ip = format!("{}{}", database(&pg.url("postgres", "127.0.0.1"), &ca(&pki.ca)), shared_redis());
    let (ok, out) = check(&by_ip);
    assert!(!ok && out.contains("database.tls.mode = \"verify-ca\""), "{out}");
    let chain_only = format!(
        "{}{}",
        database(&pg.url("postgres", "127.0.0.1"), &format!("mode = \"verify-ca\"\n{}", ca(&pki.ca))),
        shared_redis()
    );
    let (ok, out) = check(&chain_only);
    assert!(ok && out.contains("host name not checked (mode verify-ca)"), "{out}");

    // `certuser` is admitted only with a client certificate the server's CA signed.
    let no_cert = format!("{}{}", database(&pg.url("certuser", "localhost"), &ca(&pki.ca)), shared_redis());
    let (ok, out) = check(&no_cert);
    assert!(!ok && out.contains("set database.tls.cert_file"), "{out}");
    let with_cert = format!(
        "{}{}",
        database(&pg.url("certuser", "localhost"), &format!("{}{}", ca(&pki.ca), client_cert(&pki))),
        shared_redis()
    );
    let (ok, out) = check(&with_cert);
    assert!(ok, "{out}");

    // The libpq spelling in the URL works the same; the server refuses plain connections.
    let url_words = format!(
        "[database]\nurl = \"{}?sslmode=verify-full&sslrootcert={}\"\n{}",
        pg.url("postgres", "localhost"),
        pki.ca.display(),
        shared_redis()
    );
    let (ok, out) = check(&url_words);
    assert!(ok && out.contains("mode verify-full"), "{out}");
    let plain =
        format!("[database]\nurl = \"{}?sslmode=disable\"\n{}", pg.url("postgres", "localhost"), shared_redis());
    let (ok, out) = check(&plain);
    assert!(!ok && out.contains("no encryption"), "{out}");
}

#[tokio::test]
async fn mariadb_over_tls_verifies_the_server_and_presents_a_client_certificate() {
    let pki = Pki::new();
    let my = TlsMariaDb::start(&pki).await;
    let id = format!("t{:08x}", rand::random::<u32>());
    let verified = format!("{}{}", database(&my.url("handoff", "localhost"), &ca(&pki.ca)), shared_redis());

    let (ok, out) = run_to_end(&verified, &["migrate"]);
    assert!(ok, "{out}");
    let (ok, out) = check(&verified);
    assert!(ok && out.contains("database: reachable, TLSv1.3"), "{out}");
    assert!(out.contains("(mode verify-full)"), "{out}");

    let config = chain(&verified, &id);
    let _running = Handoff::run(&config);
    insert_events(&config, 20).await;
    await_audit_logs(&config, 20).await;

    let wrong_ca = format!("{}{}", database(&my.url("handoff", "localhost"), &ca(&pki.other_ca)), shared_redis());
    let (ok, out) = check(&wrong_ca);
    assert!(!ok && out.contains("database.tls.ca_file"), "{out}");
    let by_ip = format!("{}{}", database(&my.url("handoff", "127.0.0.1"), &ca(&pki.ca)), shared_redis());
    let (ok, out) = check(&by_ip);
    assert!(!ok && out.contains("not valid for name"), "{out}");

    let no_cert = format!("{}{}", database(&my.url("certuser", "localhost"), &ca(&pki.ca)), shared_redis());
    let (ok, out) = check(&no_cert);
    assert!(!ok && out.contains("certuser"), "{out}");
    let with_cert = format!(
        "{}{}",
        database(&my.url("certuser", "localhost"), &format!("{}{}", ca(&pki.ca), client_cert(&pki))),
        shared_redis()
    );
    let (ok, out) = check(&with_cert);
    assert!(ok, "{out}");

    // MySQL's own spelling; `require` encrypts without verifying, and says so.
    let required =
        format!("[database]\nurl = \"{}?ssl-mode=REQUIRED\"\n{}", my.url("handoff", "127.0.0.1"), shared_redis());
    let (ok, out) = check(&required);
    assert!(ok && out.contains("certificate NOT verified (mode require)"), "{out}");
}

#[tokio::test]
async fn redis_over_tls_carries_the_chain_and_refuses_the_wrong_ca_or_host() {
    let pki = Pki::new();
    let redis = TlsRedis::start(&pki, false).await;
    let env = TestEnv::with_tls_redis(&redis.url("localhost"), &ca(&pki.ca)).await;
    let (ok, out) = check(&env.base_config());
    assert!(ok && out.contains("redis: reachable, TLSv1_3"), "{out}");
    assert!(out.contains("certificate and host name verified (mode verify-full)"), "{out}");

    let config = format!(
        "{}\n[[relay]]\nname = \"relay\"\n{}\n{}\n{}",
        env.base_config(),
        relay_defaults(&env.id, ""),
        bridge_section(&env, &["user"]),
        TestEnv::worker_section("")
    );
    let _running = Handoff::run(&config);
    env.insert_events("r", "user", 20).await;
    await_shared_audit_logs(&env, 20).await;

    let redis_base = |url: &str, tls: &str| {
        format!(
            "[database]\nurl = \"{}\"\n[redis]\nurl = \"{url}\"\ncommand_timeout = \"1s\"\n[redis.tls]\n{tls}",
            env.database_url
        )
    };
    let (ok, out) = check(&redis_base(&redis.url("localhost"), &ca(&pki.other_ca)));
    assert!(!ok && out.contains("redis.tls.ca_file"), "{out}");
    let (ok, out) = check(&redis_base(&redis.url("127.0.0.1"), &ca(&pki.ca)));
    assert!(!ok && out.contains("redis.tls.mode = \"verify-ca\"") && out.contains("redis.tls.server_name"), "{out}");
    // By address, verified against the name the certificate carries; a name it does not carry fails.
    let renamed = |name: &str| format!("{}server_name = \"{name}\"\n", ca(&pki.ca));
    let (ok, out) = check(&redis_base(&redis.url("127.0.0.1"), &renamed("localhost")));
    assert!(ok && out.contains("certificate and host name verified"), "{out}");
    let (ok, out) = check(&redis_base(&redis.url("localhost"), &renamed("elsewhere.example")));
    assert!(!ok && out.contains("does not name the host"), "{out}");

    // A Redis that wants client certificates.
    let mutual = TlsRedis::start(&pki, true).await;
    let (ok, _) = check(&redis_base(&mutual.url("localhost"), &ca(&pki.ca)));
    assert!(!ok, "no client certificate, no connection");
    let (ok, out) = check(&redis_base(&mutual.url("localhost"), &format!("{}{}", ca(&pki.ca), client_cert(&pki))));
    assert!(ok, "{out}");
}

#[tokio::test]
async fn a_tls_redis_cluster_carries_streams_on_every_node() {
    let pki = Pki::new();
    let cluster = TlsRedisCluster::start(&pki).await;
    let env = TestEnv::with_tls_redis(&cluster.url("localhost"), &ca(&pki.ca)).await;
    let (ok, out) = check(&env.base_config());
    assert!(ok && out.contains("(mode verify-full)"), "{out}");
    // Three aggregate types: three streams, spread over the cluster's slots.
    let types = ["user", "order", "invoice"];
    let config = format!(
        "{}\n[[relay]]\nname = \"relay\"\n{}\n{}\n{}",
        env.base_config(),
        relay_defaults(&env.id, ""),
        bridge_section(&env, &types),
        TestEnv::worker_section("")
    );
    let _running = Handoff::run(&config);
    for t in types {
        env.insert_events(t, t, 10).await;
    }
    await_shared_audit_logs(&env, 30).await;
}

fn bridge_section(env: &TestEnv, types: &[&str]) -> String {
    let streams: Vec<String> =
        types.iter().map(|t| format!("{{ key = \"{}\", owner = \"relay\" }}", env.stream(t))).collect();
    format!(
        "[[bridge]]\nname = \"bridge\"\nconsumer = \"admin\"\ninstance = \"tls\"\nblock = \"200ms\"\nstreams = [{}]\n",
        streams.join(", ")
    )
}

async fn await_shared_audit_logs(env: &TestEnv, n: i64) {
    eventually(&format!("{n} audit_logs rows"), || async {
        (env.scalar_i64("SELECT count(*) FROM audit_logs").await == n).then_some(())
    })
    .await;
}

/// What an HTTPS receiver saw: every request's headers (lower-case names, in order).
type Seen = std::sync::Arc<std::sync::Mutex<Vec<Vec<(String, String)>>>>;

/// A receiver on `localhost` with the test CA's server certificate; answers 200 to everything.
async fn https_receiver(pki: &Pki) -> (u16, Seen) {
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<rustls::pki_types::CertificateDer<'static>> =
        rustls::pki_types::CertificateDer::pem_file_iter(&pki.server_cert).unwrap().map(Result::unwrap).collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&pki.server_key).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(handoff::tls_provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Seen = Default::default();
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            let (acceptor, log) = (acceptor.clone(), log.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let headers = request
                        .headers()
                        .iter()
                        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned()))
                        .collect();
                    log.lock().unwrap().push(headers);
                    async {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(
                            hyper::body::Bytes::from("ok"),
                        )))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, seen)
}

// Multi-threaded: the receiver answers while the test thread waits for `handoff check`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_handler_is_verified_and_forwards_only_the_trace_context() {
    let pki = Pki::new();
    let (port, seen) = https_receiver(&pki).await;
    let env = TestEnv::new().await;
    env.db
        .execute(
            "INSERT INTO consumer_inbox (consumer, event_id, event_type, owner, payload, headers, content_hash, stream, stream_entry_id)
             VALUES ('admin', 'h-1', 'user.changed', 'relay', '{\"actor\": \"admin\"}',
                     '{\"traceparent\": \"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\",
                       \"Authorization\": \"Bearer stolen\", \"Host\": \"evil.example\", \"x-tenant\": \"acme\"}',
                     'h', 's', '1-0')",
            &[],
        )
        .await
        .unwrap();
    let config = format!(
        "{}\n[[worker]]\nname = \"worker\"\nconsumer = \"admin\"\npoll_interval = \"50ms\"\n\
         [[worker.handler]]\nevent_types = [\"*\"]\n\
         http = {{ url = \"https://localhost:{port}/events\", tls = {{ ca_file = \"{}\" }}, headers = {{ authorization = \"Bearer configured\" }} }}\n",
        env.base_config(),
        pki.ca.display()
    );
    let (ok, out) = check(&config);
    assert!(ok && out.contains("worker[0].handler[0].http: TLSv1_3"), "{out}");
    let _worker = Handoff::run(&config);
    eventually("the event processed over https", || async { (env.inbox_count("PROCESSED").await == 1).then_some(()) })
        .await;
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    let header =
        |name: &str| -> Vec<String> { requests[0].iter().filter(|(k, _)| k == name).map(|(_, v)| v.clone()).collect() };
    assert_eq!(header("traceparent"), ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]);
    assert_eq!(header("authorization"), ["Bearer configured"], "the event cannot set or add credentials");
    assert_eq!(header("host"), [format!("localhost:{port}")], "the event cannot route the call");
    assert!(header("x-tenant").is_empty(), "headers outside the allow-list stay behind");

    // The same handler with another CA never reaches the receiver.
    let wrong = config.replace(&pki.ca.display().to_string(), &pki.other_ca.display().to_string());
    let (ok, out) = check(&wrong);
    assert!(!ok && out.contains("worker[0].handler[0].http.tls.ca_file"), "{out}");
}
