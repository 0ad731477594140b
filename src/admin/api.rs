//! The admin API: routes, authentication and scopes, the audit log, idempotent retries. Each
//! call runs the same operation as its CLI command (`ops`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tracing::info;

use super::auth::{Caller, authenticate};
use super::bodies::{DeadBody, PauseBody, PoisonBody, ReplayBody, ReprocessBody, ResumeBody, RewindBody};
use super::idempotency::{Begun, MAX_KEY};
use super::reply::response;
use super::state::AdminState;
use crate::ops;
use crate::telemetry::listener::{BodyError, read_body};

/// A request body larger than this is refused.
const MAX_BODY: usize = 64 * 1024;
/// Rows one call may touch or load at once (`limit` of dead and poison calls, a replay's
/// `batch`); a reprocess's `limit` (rows moved in small transactions) goes further.
const MAX_ROWS: u32 = 10_000;
const MAX_REPROCESS: u32 = 1_000_000;

/// `value` if it is within `1..=max`, else a refusal naming `field`.
fn within(field: &str, value: u32, max: u32) -> Result<u32, Reply> {
    match value {
        1.. if value <= max => Ok(value),
        _ => Err(error(StatusCode::BAD_REQUEST, format!("{field}: must be between 1 and {max} (got {value})"))),
    }
}

type Reply = (StatusCode, Value);

fn error(status: StatusCode, message: impl std::fmt::Display) -> Reply {
    (status, json!({ "error": message.to_string() }))
}

pub(super) async fn handle(state: &Arc<AdminState>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let tokens = state.config.admin.as_ref().map(|a| a.tokens.as_slice()).unwrap_or_default();
    let Some(caller) = authenticate(tokens, request.headers().get(hyper::header::AUTHORIZATION)) else {
        let mut denied = json_response(error(StatusCode::UNAUTHORIZED, "credentials required (a bearer token)"));
        let challenge = hyper::header::HeaderValue::from_static("Basic realm=\"handoff admin\", charset=\"UTF-8\"");
        denied.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, challenge);
        return denied;
    };
    let (method, path, query) = (request.method().clone(), request.uri().path().to_owned(), request.uri().query());
    let query = parse_query(query.unwrap_or_default());
    if method == Method::GET {
        return match path.as_str() {
            "/" => response(StatusCode::OK, "text/html; charset=utf-8", super::page::render(state).await),
            _ => json_response(read(state, &path, &query).await),
        };
    }
    if method != Method::POST {
        return json_response(error(StatusCode::METHOD_NOT_ALLOWED, "GET or POST"));
    }
    if !caller.may_write() {
        return json_response(error(StatusCode::FORBIDDEN, format!("token `{}` may only read", caller.name)));
    }
    if let Some((status, why)) = super::guard::refusal(request.headers(), caller.scheme) {
        return json_response(error(status, why));
    }
    let key = request.headers().get("idempotency-key").map(|v| v.to_str().map(str::to_owned));
    let key = match key.transpose() {
        Ok(Some(k)) if k.len() > MAX_KEY => {
            return json_response(error(
                StatusCode::BAD_REQUEST,
                format!("Idempotency-Key: at most {MAX_KEY} characters"),
            ));
        }
        Ok(key) => key,
        Err(_) => return json_response(error(StatusCode::BAD_REQUEST, "Idempotency-Key: visible ASCII only")),
    };
    let within = state.config.admin.as_ref().map(|a| a.header_read_timeout).unwrap_or(Duration::from_secs(5));
    let body = match read_body(request.into_body(), MAX_BODY, within).await {
        Ok(body) => body,
        Err(e @ BodyError::TooLarge(_)) => return json_response(error(StatusCode::PAYLOAD_TOO_LARGE, e)),
        Err(e @ BodyError::TooSlow(_)) => return json_response(error(StatusCode::REQUEST_TIMEOUT, e)),
        Err(e) => return json_response(error(StatusCode::BAD_REQUEST, e)),
    };
    let ticket = match key.as_deref().map(|k| state.idempotency.begin(&caller.name, k, method.as_str(), &path, &body)) {
        None => None,
        Some(Begun::Run(ticket)) => Some(ticket),
        Some(Begun::Replay(status, body)) => return response(status, "application/json", body),
        Some(Begun::Running) => {
            let why = "a request with this Idempotency-Key is still running; retry when it is done";
            return json_response(error(StatusCode::CONFLICT, why));
        }
        Some(Begun::Reused) => {
            let why = "this Idempotency-Key was used for another request (path or body differ); use a new key";
            return json_response(error(StatusCode::UNPROCESSABLE_ENTITY, why));
        }
    };
    // In a task of its own: a client that hangs up does not cut a mutation off half way, and
    // its idempotency key is settled with the answer either way.
    let (state, path) = (state.clone(), path.clone());
    let mutation = tokio::spawn(async move {
        let (Ok((status, value)) | Err((status, value))) = write(&state, &caller, &path, &body).await;
        let summary = String::from_utf8_lossy(&body[..body.len().min(1024)]).into_owned();
        info!(target: "handoff::admin", caller = %caller.name, %path, request = %summary, status = status.as_u16(), "admin call");
        let text = serde_json::to_string_pretty(&value).unwrap_or_default();
        if let Some(ticket) = ticket {
            ticket.finish(status, &text);
        }
        (status, text)
    });
    match mutation.await {
        Ok((status, text)) => response(status, "application/json", text),
        Err(e) => json_response(error(StatusCode::INTERNAL_SERVER_ERROR, format!("the call failed: {e}"))),
    }
}

fn json_response((status, value): Reply) -> Response<Full<Bytes>> {
    response(status, "application/json", serde_json::to_string_pretty(&value).unwrap_or_default())
}

/// `a=1&b=x%20y` → pairs (later keys win).
fn parse_query(query: &str) -> HashMap<String, String> {
    let decode = |s: &str| crate::percent::decode(&s.replace('+', " "));
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

async fn read(state: &AdminState, path: &str, query: &HashMap<String, String>) -> Reply {
    let param = |k: &str| query.get(k).cloned().filter(|v| !v.is_empty());
    let limit = query.get("limit").and_then(|l| l.parse().ok()).unwrap_or(100u32).clamp(1, 1000);
    let offset = query.get("offset").and_then(|o| o.parse().ok()).unwrap_or(0u32);
    // A full page says where the next one starts.
    let page = |count: usize| (count as u32 >= limit).then(|| offset + limit);
    match path {
        "/api/status" => {
            let lines = ops::status::collect(&state.config, &state.db, state.brokers()).await;
            (StatusCode::OK, json!({ "components": lines }))
        }
        "/api/dead" => {
            let rows = crate::dead::DeadFilter {
                event_id: param("event_id"),
                older_than: None,
                error_contains: param("error"),
                limit,
                offset,
            };
            let filter = crate::dead::Filter { relay: param("relay"), worker: param("worker"), rows };
            answer(
                crate::dead::run(&state.config, &state.db, &filter, crate::dead::DeadAction::List, true).await,
                |rows| json!({ "count": rows.len(), "next_offset": page(rows.len()), "rows": rows }),
            )
        }
        "/api/poison" => {
            let (reason, event_id) = (param("reason"), param("event_id"));
            let records = crate::poison::PoisonFilter { reason, event_id, limit, offset };
            let filter = crate::poison::Filter { bridge: param("bridge"), records };
            answer(
                crate::poison::list(&state.config, &state.db, &filter).await,
                |rows| json!({ "count": rows.len(), "next_offset": page(rows.len()), "rows": rows }),
            )
        }
        _ => match path.strip_prefix("/api/replay/") {
            Some(job) => replay_status(state, job).await,
            None => error(StatusCode::NOT_FOUND, format!("no such endpoint: GET {path}")),
        },
    }
}

/// A request's JSON body; an empty one is refused (`{}` asks for the defaults).
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Reply> {
    if body.iter().all(u8::is_ascii_whitespace) {
        let why = "request body: a JSON object is required (send {} for the defaults)";
        return Err(error(StatusCode::BAD_REQUEST, why));
    }
    serde_json::from_slice(body).map_err(|e| error(StatusCode::BAD_REQUEST, format!("request body: {e}")))
}

/// A refusal with `status` for an error, its text after `field`'s name when one is given.
fn refused<E: std::fmt::Display>(status: StatusCode, field: &'static str) -> impl FnOnce(E) -> Reply {
    move |e| if field.is_empty() { error(status, e) } else { error(status, format!("{field}: {e}")) }
}

/// An operation's outcome: `ok`'s body, or its error as a bad request.
fn answer<T, E: std::fmt::Display>(outcome: Result<T, E>, ok: impl FnOnce(T) -> Value) -> Reply {
    outcome.map_or_else(refused(StatusCode::BAD_REQUEST, ""), |value| (StatusCode::OK, ok(value)))
}

/// A POST's reply: `Err` is a refusal, so each step can return it with `?`.
async fn write(state: &Arc<AdminState>, caller: &Caller, path: &str, body: &[u8]) -> Result<Reply, Reply> {
    let (config, bad) = (&state.config, StatusCode::BAD_REQUEST);
    Ok(match path {
        "/api/dead/retry" | "/api/dead/purge" => {
            let b: DeadBody = parse(body)?;
            let older_than = b
                .older_than
                .as_deref()
                .map(humantime::parse_duration)
                .transpose()
                .map_err(refused(bad, "older_than"))?;
            within("limit", b.limit, MAX_ROWS)?;
            let rows = crate::dead::DeadFilter {
                event_id: b.event_id,
                older_than,
                error_contains: b.error,
                limit: b.limit,
                offset: 0,
            };
            let filter = crate::dead::Filter { relay: b.relay, worker: b.worker, rows };
            let action =
                if path.ends_with("retry") { crate::dead::DeadAction::Retry } else { crate::dead::DeadAction::Purge };
            let done = crate::dead::run(config, &state.db, &filter, action, b.dry_run).await;
            answer(done, |rows| json!({ "dry_run": b.dry_run, "count": rows.len(), "rows": rows }))
        }
        "/api/poison/retry" => {
            let b: PoisonBody = parse(body)?;
            within("limit", b.limit, MAX_ROWS)?;
            let records =
                crate::poison::PoisonFilter { reason: b.reason, event_id: b.event_id, limit: b.limit, offset: 0 };
            let filter = crate::poison::Filter { bridge: b.bridge, records };
            let done = crate::poison::retry(config, &state.db, &filter, b.dry_run).await;
            answer(done, |rows| json!({ "dry_run": b.dry_run, "count": rows.len(), "rows": rows }))
        }
        "/api/pause" => {
            let b: PauseBody = parse(body)?;
            let expires =
                b.expires_after.as_deref().map(humantime::parse_duration).transpose().map_err(refused(bad, "for"))?;
            let target = crate::pause::known(&config.pause_targets(), b.component, &b.name)
                .map_err(refused(StatusCode::NOT_FOUND, ""))?;
            let by = format!("admin:{}", caller.name);
            answer(crate::pause::pause(&state.db, target, b.reason, expires, &by).await, |p| json!({ "paused": p }))
        }
        "/api/resume" => {
            let b: ResumeBody = parse(body)?;
            let target = crate::pause::known(&config.pause_targets(), b.component, &b.name)
                .map_err(refused(StatusCode::NOT_FOUND, ""))?;
            let done = crate::pause::resume(&state.db, &target).await;
            answer(done, |was| json!({ "resumed": target.to_string(), "was_paused": was }))
        }
        "/api/reprocess" => {
            let b: ReprocessBody = parse(body)?;
            within("limit", b.limit, MAX_REPROCESS)?;
            let request = crate::reprocess::Request {
                worker: b.worker,
                from: b.states,
                time: b.time,
                selection: b.selection.into_selection().map_err(refused(bad, ""))?,
                all: b.all,
                limit: b.limit,
                dry_run: b.dry_run,
            };
            answer(crate::reprocess::run(config, &state.db, request).await, |report| json!(report))
        }
        "/api/rewind" => {
            let b: RewindBody = parse(body)?;
            let to = crate::rewind::RewindTo::parse(&b.to).map_err(refused(bad, "to"))?;
            let moved = crate::rewind::rewind(config, &b.bridge, b.stream.as_deref(), &to, b.dry_run).await;
            answer(moved, |moved| json!({ "bridge": b.bridge, "dry_run": b.dry_run, "streams": moved }))
        }
        "/api/replay" => {
            let b: ReplayBody = parse(body)?;
            within("batch", b.batch, MAX_ROWS)?;
            super::replay::start(state, b).await
        }
        _ => error(StatusCode::NOT_FOUND, format!("no such endpoint: POST {path}")),
    })
}

async fn replay_status(state: &AdminState, job: &str) -> Reply {
    if let Some(progress) = state.replays.lock().unwrap_or_else(|e| e.into_inner()).get(job) {
        return (StatusCode::OK, progress.clone());
    }
    match crate::replay::load(&state.db, job).await {
        Ok(Some(checkpoint)) => (StatusCode::OK, json!({ "checkpoint": checkpoint })),
        Ok(None) => error(StatusCode::NOT_FOUND, format!("no replay job `{job}`")),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, crate::error::error_chain(&e)),
    }
}
