//! `POST /api/replay`: a replay job started in the background of the running process, its
//! progress kept for `GET /api/replay/<job>` (the checkpoint in the database answers for jobs
//! started elsewhere). A job already running here is not started twice: the call answers with
//! its progress.

use std::sync::Arc;

use hyper::StatusCode;
use serde_json::{Value, json};

use super::bodies::ReplayBody;
use super::state::AdminState;
use crate::broker::Broker;
use crate::broker::kafka::KafkaStream;
use crate::replay::{self, Request};

pub(super) async fn start(state: &Arc<AdminState>, body: ReplayBody) -> (StatusCode, Value) {
    let selection = match body.selection.into_selection() {
        Ok(s) => s,
        Err(e) => return (StatusCode::BAD_REQUEST, json!({ "error": e.to_string() })),
    };
    let request = Request {
        relay: body.relay,
        selection,
        time: body.time,
        to_stream: body.to_stream,
        rate: body.rate,
        batch: body.batch,
        job: body.job,
        restart: body.restart,
        allow_partial: body.allow_partial,
    };
    let plan = match replay::plan(&state.config, &state.db, &request, !body.dry_run).await {
        Ok(plan) => plan,
        Err(e) => return (StatusCode::BAD_REQUEST, json!({ "error": e.to_string() })),
    };
    let checkpoint = plan.checkpoint.clone();
    let job = checkpoint.job.clone();
    if body.dry_run || plan.finished {
        return (
            StatusCode::OK,
            json!({ "dry_run": body.dry_run, "finished": plan.finished, "checkpoint": checkpoint }),
        );
    }
    if let Some(running) = state.replay_running(&job) {
        return (StatusCode::OK, running);
    }
    let Some(relay) = state.config.relays.iter().find(|r| r.name == request.relay) else {
        return (StatusCode::BAD_REQUEST, json!({ "error": format!("no relay named `{}`", request.relay) }));
    };
    let (broker, payload_field, kafka_key) =
        (relay.broker, relay.payload_field().map(str::to_owned), relay.kafka_key());
    state.replay_progress(
        &job,
        json!({ "job": job, "running": true, "appended": checkpoint.appended, "total": checkpoint.total }),
    );
    let (state, url) = (state.clone(), format!("/api/replay/{job}"));
    tokio::spawn(async move {
        let progress =
            |p: &replay::Progress| state.replay_progress(&p.job, json!({ "running": !p.done, "progress": p }));
        let stop = state.shutdown();
        let kafka = match (broker, &state.config.kafka) {
            (Broker::Kafka, Some(kafka)) => {
                KafkaStream::connect(kafka, "").ok().map(|k| k.laying_out(payload_field.as_deref(), kafka_key))
            }
            _ => None,
        };
        let result = match (broker, &state.redis, &state.nats) {
            (Broker::Redis, Some(redis), _) => {
                replay::run(&state.config, &state.db, redis, &request, checkpoint, progress, stop).await
            }
            (Broker::Nats, _, Some(nats)) => {
                // The relay's message mapping: its payload field is the body.
                let nats = nats.with_body_field(payload_field.as_deref());
                replay::run(&state.config, &state.db, &nats, &request, checkpoint, progress, stop).await
            }
            (Broker::Kafka, _, _) if kafka.is_some() => {
                let kafka = kafka.as_ref().expect("checked");
                replay::run(&state.config, &state.db, kafka, &request, checkpoint, progress, stop).await
            }
            _ => {
                state.replay_progress(&job, json!({ "running": false, "error": "no client of the relay's broker" }));
                return;
            }
        };
        match result {
            Ok(p) => state.replay_progress(&job, json!({ "running": false, "progress": p })),
            Err(e) => state.replay_progress(&job, json!({ "running": false, "error": e.to_string() })),
        }
    });
    (StatusCode::ACCEPTED, json!({ "job": plan.checkpoint.job, "resumed": plan.resumed, "status": url }))
}
