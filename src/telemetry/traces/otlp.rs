//! Spans to an OpenTelemetry collector over OTLP/HTTP, JSON encoded (the protocol's
//! `application/json` form: ids as hex, 64-bit numbers as strings). Written here rather than
//! taken from opentelemetry-otlp so the HTTP client is the one handoff already has (hyper with
//! rustls and ring, the same TLS settings as every other connection) and no protobuf toolchain
//! comes along.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::HeaderMap;
use hyper::{Request, Uri};
use opentelemetry::trace::{SpanId, SpanKind, Status};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use serde_json::json;

use crate::telemetry::config::TracingConfig;
use crate::tls::https::{self, HttpsClient};

const DEFAULT_ENDPOINT: &str = "http://localhost:4318/v1/traces";

/// Why traces could not be exported.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TracingError {
    #[error(transparent)]
    Endpoint(#[from] crate::tls::https::EndpointError),
    #[error("telemetry.tracing: the exporter must be started within the runtime")]
    NoRuntime,
    #[error("tracing is installed already")]
    Installed,
}

pub(super) struct OtlpJson {
    client: HttpsClient,
    uri: Uri,
    headers: HeaderMap,
    timeout: Duration,
    /// Exports are made on the runtime handoff runs on: the batch processor calls from a thread
    /// of its own, where the HTTP client has no reactor.
    runtime: tokio::runtime::Handle,
    resource: serde_json::Value,
}

impl std::fmt::Debug for OtlpJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Headers may carry credentials: never printed.
        f.debug_struct("OtlpJson").field("uri", &self.uri).finish_non_exhaustive()
    }
}

impl OtlpJson {
    pub(super) fn new(config: &TracingConfig) -> Result<Self, TracingError> {
        let path = "telemetry.tracing";
        let endpoint = config
            .endpoint
            .clone()
            .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").ok())
            .or_else(|| {
                std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
                    .ok()
                    .map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
            })
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        let (uri, client) = https::client(path, "endpoint", &endpoint, &endpoint, &config.tls)?;
        let from_env = std::env::var("OTEL_EXPORTER_OTLP_HEADERS").unwrap_or_default();
        let pairs: Vec<(String, String)> = from_env
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.trim().to_owned(), crate::percent::decode(v.trim())))
            .chain(config.headers.iter().map(|(k, v)| (k.clone(), v.clone())))
            .collect();
        let headers = https::json_headers(path, pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| TracingError::NoRuntime)?;
        Ok(Self { client, uri, headers, timeout: config.timeout, runtime, resource: json!({ "attributes": [] }) })
    }

    fn body(&self, batch: &[SpanData]) -> Vec<u8> {
        let spans: Vec<serde_json::Value> = batch.iter().map(span).collect();
        let document = json!({
            "resourceSpans": [{
                "resource": self.resource,
                "scopeSpans": [{ "scope": { "name": "handoff", "version": env!("CARGO_PKG_VERSION") }, "spans": spans }],
            }]
        });
        serde_json::to_vec(&document).unwrap_or_default()
    }
}

impl SpanExporter for OtlpJson {
    fn export(&self, batch: Vec<SpanData>) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let mut request = Request::post(self.uri.clone()).body(Full::new(Bytes::from(self.body(&batch))));
        if let Ok(request) = &mut request {
            request.headers_mut().clone_from(&self.headers);
        }
        let (client, timeout) = (self.client.clone(), self.timeout);
        let sent = self.runtime.spawn(async move {
            let request = request.map_err(|e| e.to_string())?;
            let response = tokio::time::timeout(timeout, client.request(request))
                .await
                .map_err(|_| format!("no answer within {timeout:?}"))?
                .map_err(|e| e.to_string())?;
            let status = response.status();
            // Read the body to the end so the connection can be reused.
            let _ = response.into_body().collect().await;
            if status.is_success() { Ok(()) } else { Err(format!("collector answered HTTP {status}")) }
        });
        async move {
            match sent.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(OTelSdkError::InternalFailure(format!("exporting spans: {e}"))),
                Err(e) => Err(OTelSdkError::InternalFailure(format!("exporting spans: {e}"))),
            }
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        let attributes: Vec<serde_json::Value> =
            resource.iter().map(|(k, v)| attribute(&KeyValue::new(k.clone(), v.clone()))).collect();
        self.resource = json!({ "attributes": attributes });
    }
}

fn span(data: &SpanData) -> serde_json::Value {
    let context = &data.span_context;
    let mut span = json!({
        "traceId": context.trace_id().to_string(),
        "spanId": context.span_id().to_string(),
        "flags": context.trace_flags().to_u8(),
        "name": data.name,
        "kind": kind(&data.span_kind),
        "startTimeUnixNano": nanos(data.start_time),
        "endTimeUnixNano": nanos(data.end_time),
        "attributes": data.attributes.iter().map(attribute).collect::<Vec<_>>(),
        "events": data.events.iter().map(|event| json!({
            "timeUnixNano": nanos(event.timestamp),
            "name": event.name,
        })).collect::<Vec<_>>(),
        "links": data.links.iter().map(|link| json!({
            "traceId": link.span_context.trace_id().to_string(),
            "spanId": link.span_context.span_id().to_string(),
        })).collect::<Vec<_>>(),
        "status": match &data.status {
            Status::Unset => json!({}),
            Status::Ok => json!({ "code": 1 }),
            Status::Error { description } => json!({ "code": 2, "message": description }),
        },
    });
    if data.parent_span_id != SpanId::INVALID {
        span["parentSpanId"] = json!(data.parent_span_id.to_string());
    }
    span
}

fn kind(kind: &SpanKind) -> u8 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn nanos(time: SystemTime) -> String {
    time.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos().to_string()
}

fn attribute(kv: &KeyValue) -> serde_json::Value {
    let value = match &kv.value {
        Value::Bool(b) => json!({ "boolValue": b }),
        Value::I64(i) => json!({ "intValue": i.to_string() }),
        Value::F64(f) => json!({ "doubleValue": f }),
        other => json!({ "stringValue": other.to_string() }),
    };
    json!({ "key": kv.key.as_str(), "value": value })
}
