//! Traces end to end: a producer writes a `traceparent` into its outbox row; with
//! `[telemetry.tracing]` on, the relay's, the bridge's and the worker's spans for that event are
//! children of the producer's span (one trace id), reach an OTLP/HTTP receiver, and the HTTP
//! handler is called with a `traceparent` of that trace naming the worker's span.

use crate::common;

use std::io::Write;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use common::http::read_request;
use common::process::Handoff;
use common::{TestEnv, eventually};

/// Records what each request carried and answers 200.
fn receiver<T: Send + 'static>(
    record: impl Fn(&dyn Fn(&str) -> String, serde_json::Value) -> T + Send + 'static,
) -> (String, Arc<Mutex<Vec<T>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<T>>> = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (header, body) = read_request(&stream);
            log.lock().unwrap().push(record(&header, body));
            let _ = write!(stream, "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}");
        }
    });
    (address, seen)
}

/// (name, trace id, span id, parent span id) of every span in the OTLP/JSON exports.
fn spans(exports: &[serde_json::Value]) -> Vec<(String, String, String, String)> {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    exports
        .iter()
        .flat_map(|export| export["resourceSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|resource| resource["scopeSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|scope| scope["spans"].as_array().cloned().unwrap_or_default())
        .map(|s| (text(&s["name"]), text(&s["traceId"]), text(&s["spanId"]), text(&s["parentSpanId"])))
        .collect()
}

#[tokio::test]
async fn one_events_spans_share_the_producers_trace_and_the_handler_gets_it() {
    let env = TestEnv::new().await;
    let (collector, exports) = receiver(|_, body| body);
    let (handler, calls) =
        receiver(|header, body| (body["event_id"].as_str().unwrap_or_default().to_owned(), header("traceparent")));
    let trace_id = format!("{:032x}", rand::random::<u128>() | 1);
    let producer_span = "b7ad6b7169203331";
    env.db
        .execute(
            "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers)
             VALUES ('traced-1', 'user', 'u-1', 'user.changed', '{\"actor\": \"admin\"}', $1::text::jsonb)",
            &[&format!("{{\"traceparent\": \"00-{trace_id}-{producer_span}-01\"}}")],
        )
        .await
        .unwrap();
    let config = format!(
        r#"{relay}
[[bridge]]
name = "bridge"
consumer = "admin"
instance = "b1"
streams = [{{ key = "{stream}", owner = "relay" }}]
block = "200ms"

[[worker]]
name = "worker"
consumer = "admin"
poll_interval = "50ms"

[[worker.handler]]
event_types = ["*"]
http = {{ url = "{handler}/events" }}

[telemetry.tracing]
endpoint = "{collector}/v1/traces"
"#,
        relay = env.config(""),
        stream = env.stream("user"),
    );
    let mut process = Handoff::run(&config);
    eventually("the handler to be called", || async { (!calls.lock().unwrap().is_empty()).then_some(()) }).await;
    eventually("the inbox row processed", || async { (env.inbox_count("PROCESSED").await == 1).then_some(()) }).await;
    // Spans leave in batches; the last ones when the process stops.
    process.signal("TERM");
    assert!(process.await_exit().await.success(), "{}", process.logs());

    let spans = spans(&exports.lock().unwrap());
    for stage in ["handoff.relay.append", "handoff.bridge.take_over", "handoff.worker.handle"] {
        let (_, trace, _, parent) =
            spans.iter().find(|(name, ..)| name == stage).unwrap_or_else(|| panic!("no {stage} span among {spans:?}"));
        assert_eq!(trace, &trace_id, "{stage} is in the producer's trace");
        assert_eq!(parent, producer_span, "{stage} is a child of the producer's span");
    }
    let worker_span = &spans.iter().find(|(name, ..)| name == "handoff.worker.handle").unwrap().2;
    let (event, traceparent) = calls.lock().unwrap()[0].clone();
    assert_eq!(event, "traced-1");
    assert_eq!(
        traceparent,
        format!("00-{trace_id}-{worker_span}-01"),
        "the handler is called within the worker's span"
    );
    assert!(spans.iter().any(|(name, ..)| name == "handoff.relay.batch"), "the relay's batch has a span");
}
