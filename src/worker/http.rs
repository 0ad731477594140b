//! The HTTP handler: POST the event to a neighbour service with an `Idempotency-Key`, so a
//! consumer in any language can apply it. 2xx → processed; configured statuses → DEAD at once;
//! no verdict from the endpoint (no connection, no response in time, 429, 502, 503, 504) → the
//! endpoint is down: the row goes back untouched; any other status → retry, an attempt counted.
//! `https://` URLs are verified per the handler's `tls` table.
//!
//! Event content never steers the request: only the event headers named in `forward_headers`
//! travel (by default the trace context), never one that frames, routes or authenticates the
//! call, and never a name the request already carries.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Uri};

use crate::tls::https::{self, EndpointError, HttpsClient};
use crate::worker::config::{HttpHandlerConfig, never_forwarded};
use crate::worker::inbox::InboxRow;

/// How much of an error response's body is read back into the row's last error.
const ERROR_BODY_MAX: usize = 4096;

pub(crate) struct HttpHandler {
    client: HttpsClient,
    uri: Uri,
    timeout: Duration,
    dead_on: Vec<u16>,
    /// Fixed and configured headers, sent with every call.
    headers: HeaderMap,
    /// Lower-case names of the event headers that may travel.
    forward: Vec<String>,
    /// Bounds the requests in flight (`concurrency`); waiters are served first come, first
    /// served, so calls start in the batch's order.
    in_flight: tokio::sync::Semaphore,
}

/// The outcome of one POST.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    Done,
    /// The receiver says the event can never succeed.
    Refused(String),
    /// The receiver failed this event: worth retrying, an attempt counted.
    Failed(String),
    /// The endpoint answered that it is overloaded or down (429, 502, 503, 504): no verdict on
    /// the event, and not the event's fault.
    Unavailable(String),
    /// No answer at all: the endpoint could not be reached, or did not answer in time. Not the
    /// event's fault, unless the endpoint answered the batch's other events (then the event may
    /// be what hangs or crashes the receiver).
    NoAnswer(String),
}

/// Statuses that say the endpoint, not the event, is the problem: too many requests, a gateway
/// with nothing behind it, the service unavailable, a gateway timeout.
const UNAVAILABLE: &[u16] = &[429, 502, 503, 504];

/// What an answer of `status` (not a success) says of the event, with `message` as the error.
fn judge(status: u16, dead_on: &[u16], message: String) -> Delivery {
    if dead_on.contains(&status) {
        Delivery::Refused(message)
    } else if UNAVAILABLE.contains(&status) {
        Delivery::Unavailable(message)
    } else {
        Delivery::Failed(message)
    }
}

impl HttpHandler {
    pub(crate) fn new(config: &HttpHandlerConfig, path: &str) -> Result<Self, EndpointError> {
        let (uri, client) = https::client(path, "url", config.url(), &config.shown_url(), &config.tls)?;
        let mut headers = https::json_headers(path, config.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        // `user:password@` in the URL (which may come from `url_file`) is sent as basic auth.
        let (uri, basic) = https::basic_auth_from(uri);
        if let Some(basic) = basic {
            if headers.contains_key(hyper::header::AUTHORIZATION) {
                let detail = "set by the URL's user:password@ too; keep one".to_owned();
                return Err(EndpointError::Header { path: path.to_owned(), name: "Authorization".into(), detail });
            }
            headers.insert(hyper::header::AUTHORIZATION, basic);
        }
        let forward = config.forward_headers.iter().map(|h| h.to_ascii_lowercase()).collect();
        let in_flight = tokio::sync::Semaphore::new(config.concurrency.max(1) as usize);
        Ok(Self { client, uri, timeout: config.timeout, dead_on: config.dead_on.clone(), headers, forward, in_flight })
    }

    /// POSTs `row`; `trace` (the handler span's `traceparent`, when tracing is on) replaces the
    /// event's own, so the receiver's spans are children of handoff's.
    pub(crate) async fn deliver(&self, row: &InboxRow, trace: Option<&str>) -> Delivery {
        // The semaphore is never closed, so acquiring cannot fail.
        let Ok(_permit) = self.in_flight.acquire().await else { return Delivery::Failed("handler closed".into()) };
        let request = match self.request(row, trace) {
            Ok(request) => request,
            Err(e) => return Delivery::Refused(format!("cannot build the request: {e}")),
        };
        let response = match tokio::time::timeout(self.timeout, self.client.request(request)).await {
            Err(_) => return Delivery::NoAnswer(format!("no response within {:?}", self.timeout)),
            Ok(Err(e)) => return Delivery::NoAnswer(format!("request failed: {}", crate::error::error_chain(&e))),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status.is_success() {
            return Delivery::Done;
        }
        let body =
            tokio::time::timeout(Duration::from_secs(1), excerpt(response.into_body())).await.unwrap_or_default();
        let message = format!("HTTP {status}: {body}");
        judge(status.as_u16(), &self.dead_on, message)
    }

    fn request(&self, row: &InboxRow, trace: Option<&str>) -> Result<Request<Full<Bytes>>, hyper::http::Error> {
        let mut body = serde_json::json!({
            "event_id": row.event_id,
            "event_type": row.event_type,
            "owner": row.owner,
            "aggregate_type": row.aggregate_type,
            "aggregate_id": row.aggregate_id,
            "payload": row.payload,
        });
        if !row.fields.is_empty() {
            body["fields"] = serde_json::Value::Object(row.fields.clone());
        }
        let mut request = Request::post(self.uri.clone()).body(Full::new(Bytes::from(body.to_string())))?;
        let headers = request.headers_mut();
        headers.clone_from(&self.headers);
        headers.insert("idempotency-key", HeaderValue::from_str(&row.event_id)?);
        headers.insert("x-event-type", HeaderValue::from_str(&row.event_type)?);
        if let Some(trace) = trace
            && self.forward.iter().any(|h| h == "traceparent")
        {
            headers.insert("traceparent", HeaderValue::from_str(trace)?);
        }
        for (name, value) in forwarded(&row.headers, &self.forward) {
            // Never a second value for a name the request carries already.
            headers.entry(name).or_insert(value);
        }
        Ok(request)
    }
}

/// The event headers allowed to travel, as valid HTTP headers; others are left out silently
/// (they are the producer's data, not a reason to fail the event).
fn forwarded(headers: &serde_json::Value, allowed: &[String]) -> Vec<(HeaderName, HeaderValue)> {
    let Some(headers) = headers.as_object() else { return Vec::new() };
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.to_ascii_lowercase();
            allowed.contains(&name) && !never_forwarded(&name)
        })
        .filter_map(|(name, value)| {
            let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
            let value = HeaderValue::from_str(value.as_str()?).ok()?;
            Some((name, value))
        })
        .collect()
}

/// The start of a response body: at most `ERROR_BODY_MAX` bytes are read, however long it is.
async fn excerpt(mut body: hyper::body::Incoming) -> String {
    let mut kept = Vec::new();
    while kept.len() < ERROR_BODY_MAX {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let room = ERROR_BODY_MAX - kept.len();
                    kept.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&kept).chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_headers_travel_and_never_credentials_or_framing() {
        let event = serde_json::json!({
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "Authorization": "Bearer stolen",
            "Host": "evil.example",
            "Content-Length": "0",
            "x-tenant": "acme",
            "tracestate": 7,
        });
        let allowed: Vec<String> = ["traceparent", "tracestate", "authorization", "host"].map(String::from).to_vec();
        let names: Vec<String> = forwarded(&event, &allowed).into_iter().map(|(n, _)| n.to_string()).collect();
        // `tracestate` is not a string: left out; `authorization` and `host` are never forwarded.
        assert_eq!(names, ["traceparent"]);
    }

    #[test]
    fn credentials_in_the_url_are_sent_as_basic_auth_and_never_in_the_host() {
        let uri: Uri = "https://ops%40acme:p%3Ass@hooks.local:8443/events?x=1".parse().unwrap();
        let (uri, basic) = https::basic_auth_from(uri);
        assert_eq!(uri.to_string(), "https://hooks.local:8443/events?x=1");
        let basic = basic.unwrap();
        assert!(basic.is_sensitive());
        assert_eq!(basic, format!("Basic {}", crate::base64::encode(b"ops@acme:p:ss")).as_str());
        let (plain, none) = https::basic_auth_from("http://127.0.0.1:9000/x".parse().unwrap());
        assert_eq!((plain.to_string().as_str(), none), ("http://127.0.0.1:9000/x", None));
    }

    #[test]
    fn only_answers_about_the_endpoint_leave_the_event_untouched() {
        let judged = |status| judge(status, &[422], String::new());
        for status in [429, 502, 503, 504] {
            assert_eq!(judged(status), Delivery::Unavailable(String::new()), "{status}");
        }
        for status in [400, 404, 500, 501] {
            assert_eq!(judged(status), Delivery::Failed(String::new()), "{status}");
        }
        assert_eq!(judged(422), Delivery::Refused(String::new()));
        // A status named in `dead_on` wins, even one that otherwise says the endpoint is down.
        assert_eq!(judge(503, &[503], String::new()), Delivery::Refused(String::new()));
    }
}
