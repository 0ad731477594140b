//! The HTTP handler: POST the event to a neighbour service with an `Idempotency-Key`, so a
//! consumer in any language can apply it. 2xx → processed; configured statuses → DEAD at once;
//! anything else (5xx, timeouts, refused connections) → retry.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::config::HttpHandlerConfig;
use crate::store::inbox::InboxRow;

pub struct HttpHandler {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: Uri,
    timeout: Duration,
    dead_on: Vec<u16>,
    headers: Vec<(String, String)>,
}

/// The outcome of one POST.
#[derive(Debug, PartialEq, Eq)]
pub enum Delivery {
    Done,
    /// The receiver says the event can never succeed.
    Refused(String),
    /// Worth retrying.
    Failed(String),
}

impl HttpHandler {
    pub fn new(config: &HttpHandlerConfig) -> Result<Self, String> {
        let uri: Uri = config.url.parse().map_err(|e| format!("url: {e}"))?;
        if uri.scheme_str() != Some("http") {
            return Err("url must be http:// (the target is a local neighbour; TLS is not supported)".into());
        }
        let client = Client::builder(TokioExecutor::new()).build_http();
        let headers = config.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        Ok(Self { client, uri, timeout: config.timeout, dead_on: config.dead_on.clone(), headers })
    }

    pub async fn deliver(&self, row: &InboxRow) -> Delivery {
        let request = match self.request(row) {
            Ok(request) => request,
            Err(e) => return Delivery::Refused(format!("cannot build the request: {e}")),
        };
        let response = match tokio::time::timeout(self.timeout, self.client.request(request)).await {
            Err(_) => return Delivery::Failed(format!("no response within {:?}", self.timeout)),
            Ok(Err(e)) => return Delivery::Failed(format!("request failed: {}", crate::relay::error_chain(&e))),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status.is_success() {
            return Delivery::Done;
        }
        // A short excerpt of the body helps the operator; it is truncated with the error.
        let body = tokio::time::timeout(Duration::from_secs(1), response.into_body().collect())
            .await
            .ok()
            .and_then(Result::ok)
            .map(|b| String::from_utf8_lossy(&b.to_bytes()[..]).chars().take(200).collect::<String>())
            .unwrap_or_default();
        let message = format!("HTTP {status}: {body}");
        if self.dead_on.contains(&status.as_u16()) { Delivery::Refused(message) } else { Delivery::Failed(message) }
    }

    fn request(&self, row: &InboxRow) -> Result<Request<Full<Bytes>>, hyper::http::Error> {
        let body = serde_json::json!({
            "event_id": row.event_id,
            "event_type": row.event_type,
            "owner": row.owner,
            "aggregate_type": row.aggregate_type,
            "aggregate_id": row.aggregate_id,
            "payload": row.payload,
        });
        let mut request = Request::post(self.uri.clone())
            .header("content-type", "application/json")
            .header("idempotency-key", row.event_id.as_str())
            .header("x-event-type", row.event_type.as_str());
        // Context the owner attached (traceparent, tracestate, …) travels on.
        if let Some(headers) = row.headers.as_object() {
            for (name, value) in headers {
                // Names or values HTTP cannot carry are left out rather than failing the event.
                let name = hyper::header::HeaderName::from_bytes(name.as_bytes());
                let value = value.as_str().map(hyper::header::HeaderValue::from_str);
                if let (Ok(name), Some(Ok(value))) = (name, value) {
                    request = request.header(name, value);
                }
            }
        }
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        request.body(Full::new(Bytes::from(body.to_string())))
    }
}
