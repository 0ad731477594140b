//! The admin listener on both dialects: every call needs a token, a read token changes nothing,
//! mutations are logged with who made them and answer a retried `Idempotency-Key` alike; the
//! status page, loaded in a real headless Chromium, shows a DEAD row and a paused relay.

use crate::common;

use common::db_env::{DbEnv, Dialect};
use common::http::{get, request};
use common::process::Handoff;

const READ: &str = "read-token-0123456789";
const WRITE: &str = "write-token-0123456789";

/// A relay (its outbox holds one DEAD row, `dead-1`, whose error holds markup) and an admin
/// listener with a read token (`oncall`) and a write token (`ops`).
async fn admin_env(dialect: Dialect) -> (DbEnv, Handoff, String, tempfile::TempDir) {
    let env = DbEnv::new(dialect).await;
    env.insert_events("dead", "user", 1).await;
    env.exec(&format!(
        "UPDATE audit_outbox SET status = 'DEAD', dead_at = {}, last_error = '<b>boom</b>' WHERE event_id = 'dead-1'",
        env.now()
    ))
    .await;
    let secrets = tempfile::tempdir().unwrap();
    let (read, write) = (secrets.path().join("read"), secrets.path().join("write"));
    std::fs::write(&read, format!("{READ}\n")).unwrap();
    std::fs::write(&write, WRITE).unwrap();
    let config = format!(
        "{}\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [[admin.token]]\nname = \"oncall\"\nscope = \"read\"\ntoken_file = \"{}\"\n\
         [[admin.token]]\nname = \"ops\"\nscope = \"write\"\ntoken_file = \"{}\"\n",
        env.config(""),
        read.display(),
        write.display()
    );
    let handoff = Handoff::run(&config);
    let address = handoff.admin_address().await;
    (env, handoff, address, secrets)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

async fn tokens_and_scopes_guard_every_call_and_mutations_are_logged_and_idempotent(dialect: Dialect) {
    let (env, handoff, address, _secrets) = admin_env(dialect).await;
    let pause = r#"{"component": "relay", "name": "relay", "reason": "broker migration"}"#;
    let calls = [
        ("GET", "/", ""),
        ("GET", "/api/status", ""),
        ("GET", "/api/dead", ""),
        ("GET", "/api/poison", ""),
        ("GET", "/api/replay/nope", ""),
        ("POST", "/api/pause", pause),
        ("POST", "/api/resume", r#"{"component": "relay", "name": "relay"}"#),
        ("POST", "/api/dead/retry", r#"{"dry_run": true}"#),
        ("POST", "/api/poison/retry", r#"{"dry_run": true}"#),
        ("POST", "/api/reprocess", r#"{"worker": "w", "all": true, "dry_run": true}"#),
        ("POST", "/api/rewind", r#"{"bridge": "b", "to": "1h", "dry_run": true}"#),
        ("POST", "/api/replay", r#"{"relay": "relay", "dry_run": true}"#),
    ];
    for (method, path, body) in calls {
        let (status, _) = request(&address, method, path, &[], body);
        assert_eq!(status, 401, "{method} {path} without a token");
        let (status, _) = request(&address, method, path, &[("Authorization", "Bearer not-a-token-at-all")], body);
        assert_eq!(status, 401, "{method} {path} with a wrong token");
        if method == "POST" {
            let (status, answer) = request(&address, method, path, &[("Authorization", &bearer(READ))], body);
            assert_eq!(status, 403, "{method} {path} with a read token: {answer}");
            assert!(answer.contains("token `oncall` may only read"), "{answer}");
        }
    }
    let (status, answer) = request(&address, "GET", "/api/dead", &[("Authorization", &bearer(READ))], "");
    let dead: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!((status, dead["rows"][0]["event_id"].as_str()), (200, Some("dead-1")), "{answer}");
    assert_eq!(dead["rows"][0]["last_error"], "<b>boom</b>");
    let page = |path: &str| {
        let (_, answer) = request(&address, "GET", path, &[("Authorization", &bearer(READ))], "");
        serde_json::from_str::<serde_json::Value>(&answer).unwrap()
    };
    assert_eq!(page("/api/dead?relay=relay&limit=1")["next_offset"], 1, "a full page says where the next starts");
    let second = page("/api/dead?relay=relay&limit=1&offset=1");
    assert_eq!((second["count"].as_i64(), second["next_offset"].is_null()), (Some(0), true));

    let write = bearer(WRITE);
    let with_key = [("Authorization", write.as_str()), ("Idempotency-Key", "pause-1")];
    let (status, first) = request(&address, "POST", "/api/pause", &with_key, pause);
    assert_eq!(status, 200, "{first}");
    let (status, again) = request(&address, "POST", "/api/pause", &with_key, pause);
    assert_eq!((status, &again), (200, &first), "a retried key answers as the first call did");
    let (_, status_doc) = request(&address, "GET", "/api/status", &[("Authorization", &bearer(READ))], "");
    let doc: serde_json::Value = serde_json::from_str(&status_doc).unwrap();
    let relay = &doc["components"][0];
    assert_eq!((relay["state"].as_str(), relay["paused"]["paused_by"].as_str()), (Some("paused"), Some("admin:ops")));
    let (status, answer) =
        request(&address, "POST", "/api/dead/retry", &[("Authorization", &write)], r#"{"dry_run": true}"#);
    assert!(status == 200 && answer.contains("\"count\": 1"), "{answer}");
    let (status, answer) =
        request(&address, "POST", "/api/pause", &[("Authorization", &write)], r#"{"component": "relay"}"#);
    assert!(status == 400 && answer.contains("missing field `name`"), "{status} {answer}");
    let (status, answer) =
        request(&address, "POST", "/api/pause", &[("Authorization", &write)], r#"{"component": "relay", "name": "x"}"#);
    assert!(status == 404 && answer.contains("no relay named `x`"), "{status} {answer}");
    let (status, _) = request(
        &address,
        "POST",
        "/api/resume",
        &[("Authorization", &write)],
        r#"{"component": "relay", "name": "relay"}"#,
    );
    assert_eq!(status, 200);
    assert_eq!(env.scalar("SELECT COUNT(*) FROM handoff_pauses").await, 0, "resumed");
    let logs = handoff.logs();
    let audit: Vec<&str> = logs.lines().filter(|l| l.contains("admin call")).collect();
    assert!(
        audit
            .iter()
            .any(|l| l.contains("caller=ops") && l.contains("path=/api/pause") && l.contains("broker migration")),
        "every mutation is logged with who made it: {audit:#?}"
    );
    assert!(!logs.contains(WRITE) && !logs.contains(READ), "tokens never reach the log");
}

/// The status page in a real browser (headless Chromium, credentials in the URL as basic
/// authentication): it loads, lists the DEAD row with its error escaped, and shows the relay
/// paused by the API as paused.
async fn the_status_page_shows_a_dead_row_and_a_paused_relay_in_chromium(dialect: Dialect) {
    let (_env, _handoff, address, _secrets) = admin_env(dialect).await;
    let pause = r#"{"component": "relay", "name": "relay", "reason": "broker migration"}"#;
    let (status, _) = request(&address, "POST", "/api/pause", &[("Authorization", &bearer(WRITE))], pause);
    assert_eq!(status, 200);
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| std::process::Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
        .expect("Chromium is needed for the status page test (scripts/services installs it)");
    let profile = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(chromium)
        .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("http://oncall:{READ}@{address}/"))
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&output.stdout);
    assert!(
        dom.contains("<title>handoff status</title>"),
        "the page loads: {dom}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(dom.contains("name=\"viewport\""), "sized for phones");
    let dead_row = dom.split("<tr>").find(|row| row.contains("dead-1")).expect("the DEAD row is listed");
    assert!(dead_row.contains("&lt;b&gt;boom&lt;/b&gt;"), "its error, escaped: {dead_row}");
    let relay_row = dom.split("<tr>").find(|row| row.contains("relay relay")).expect("the relay's row");
    assert!(
        relay_row.contains("state paused") && relay_row.contains("broker migration") && relay_row.contains("admin:ops"),
        "shown paused, by whom and why: {relay_row}"
    );
    let denied = std::process::Command::new(chromium)
        .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("http://{address}/"))
        .output()
        .expect("run chromium");
    assert!(!String::from_utf8_lossy(&denied.stdout).contains("dead-1"), "nothing without credentials");
}

crate::on_both_dialects!(
    tokens_and_scopes_guard_every_call_and_mutations_are_logged_and_idempotent,
    the_status_page_shows_a_dead_row_and_a_paused_relay_in_chromium
);

/// What a web page can make a browser send to the listener is refused before anything runs:
/// remembered basic credentials, a form or `text/plain` body, another origin, an empty body;
/// out-of-range numbers are refused naming their field, and an age past every row saturates
/// instead of wrapping; an idempotency key reused for another request is refused.
#[tokio::test]
async fn mutations_refuse_what_a_browser_can_send_cross_site_and_numbers_out_of_range() {
    let (env, _handoff, address, _secrets) = admin_env(Dialect::Postgres).await;
    let dead = || async { env.scalar("SELECT COUNT(*) FROM audit_outbox WHERE status = 'DEAD'").await };
    let basic = format!("Basic {}", base64(format!("ops:{WRITE}").as_bytes()));
    let evil = [("Authorization", basic.as_str()), ("Origin", "http://evil.example")];
    let (status, answer) = request(&address, "POST", "/api/dead/retry", &evil, "");
    assert!(status == 403 && answer.contains("bearer token"), "the issue's request: {status} {answer}");
    let write = bearer(WRITE);
    let pause = r#"{"component": "relay", "name": "relay"}"#;
    let as_text = [("Authorization", write.as_str()), ("Content-Type", "text/plain")];
    let (status, answer) = request(&address, "POST", "/api/pause", &as_text, pause);
    assert!(status == 415 && answer.contains("application/json"), "{status} {answer}");
    let form = [("Authorization", write.as_str()), ("Content-Type", "application/x-www-form-urlencoded")];
    assert_eq!(request(&address, "POST", "/api/dead/purge", &form, "").0, 415);
    let cross = [("Authorization", write.as_str()), ("Origin", "http://evil.example")];
    let (status, answer) = request(&address, "POST", "/api/pause", &cross, pause);
    assert!(status == 403 && answer.contains("cross-origin"), "{status} {answer}");
    let fetched = [("Authorization", write.as_str()), ("Sec-Fetch-Site", "cross-site")];
    assert_eq!(request(&address, "POST", "/api/pause", &fetched, pause).0, 403);
    assert_eq!(env.scalar("SELECT COUNT(*) FROM handoff_pauses").await, 0, "nothing was paused");
    assert_eq!(dead().await, 1, "nothing was re-driven or purged");

    let bearer_only = [("Authorization", write.as_str())];
    let (status, answer) = request(&address, "POST", "/api/dead/retry", &bearer_only, "");
    assert!(status == 400 && answer.contains("a JSON object is required"), "{status} {answer}");
    let (status, answer) =
        request(&address, "POST", "/api/replay", &bearer_only, r#"{"relay": "relay", "batch": 4294967295}"#);
    assert!(status == 400 && answer.contains("batch: must be between 1 and 10000"), "{status} {answer}");
    let (status, answer) = request(&address, "POST", "/api/dead/purge", &bearer_only, r#"{"limit": 0}"#);
    assert!(status == 400 && answer.contains("limit: must be between 1 and 10000"), "{status} {answer}");
    let eons = r#"{"older_than": "18446744073709552s"}"#;
    let (status, answer) = request(&address, "POST", "/api/dead/purge", &bearer_only, eons);
    assert!(status == 200 && answer.contains("\"count\": 0"), "older than any row matches none: {answer}");
    assert_eq!(dead().await, 1, "the row dead a moment ago was not purged");

    let keyed = [("Authorization", write.as_str()), ("Idempotency-Key", "k-1")];
    let dry = r#"{"dry_run": true}"#;
    let (status, first) = request(&address, "POST", "/api/dead/retry", &keyed, dry);
    assert_eq!(status, 200, "{first}");
    let (status, answer) = request(&address, "POST", "/api/poison/retry", &keyed, dry);
    assert!(status == 422 && answer.contains("used for another request"), "{status} {answer}");
    let long = "k".repeat(300);
    let (status, _) = request(&address, "POST", "/api/dead/retry", &[keyed[0], ("Idempotency-Key", &long)], dry);
    assert_eq!(status, 400);
}

/// Standard base64 with padding (what a browser sends for basic credentials).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            let c = if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' };
            out.push(c);
        }
    }
    out
}

/// 2,000 connections that never finish their headers (each sending 400 KB of them, as the
/// issue's flood did) on the admin port: the operators' calls and the probes are answered
/// throughout, and the process stays far below the chart's 256 MiB memory limit.
#[tokio::test]
async fn a_flood_of_unfinished_connections_starves_neither_the_api_nor_the_probes() {
    use std::io::Write;
    let (_env, handoff, address, _secrets) = admin_env(Dialect::Postgres).await;
    let telemetry = handoff.telemetry_address().await;
    let read = bearer(READ);
    let flood = address.clone();
    let answered = tokio::task::spawn_blocking(move || {
        let filler = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Filler: {}", "a".repeat(400 * 1024));
        let mut held = Vec::new();
        let mut answered = 0;
        for i in 1..=2000 {
            let Ok(mut stream) = std::net::TcpStream::connect(&flood) else { continue };
            // The listener may close it (to make room, or refusing headers this large).
            let _ = stream.write_all(filler.as_bytes());
            held.push(stream);
            if i % 250 == 0 {
                let (status, body) = request(&flood, "GET", "/api/status", &[("Authorization", &read)], "");
                assert_eq!(status, 200, "the API answers during the flood: {body}");
                assert_eq!(get(&telemetry, "/healthz").0, 200, "the probes answer during the flood");
                answered += 1;
            }
        }
        (answered, held)
    })
    .await
    .unwrap();
    let rss_kib = std::fs::read_to_string(format!("/proc/{}/status", handoff.pid()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:").map(|v| v.trim().trim_end_matches(" kB").parse::<u64>().unwrap()))
        .unwrap();
    eprintln!("handoff peak RSS after the flood: {rss_kib} KiB");
    assert_eq!(answered.0, 8);
    assert!(rss_kib < 256 * 1024, "peak RSS {rss_kib} KiB under the chart's 256 MiB");
    drop(answered.1);
}
