//! OpenTelemetry traces (opt-in, `[telemetry.tracing]`): a span for each event at each stage —
//! the relay's append, the bridge's takeover, the worker's handler — each a child of the trace
//! context the producer wrote into the event's headers (`traceparent`), so the producer's trace id
//! is the one that reaches the handler; the worker's span is the context an HTTP handler
//! forwards. The relay's batches get spans of their own (claim to settle), linked from their
//! events' spans. Spans leave through a batch processor and an OTLP/HTTP (JSON) exporter.
//!
//! The tracer is process-wide, as OpenTelemetry's own global provider is: it is installed once
//! at startup, and every call here is a no-op until then — with tracing off nothing is parsed,
//! allocated or exported per event.

mod otlp;

pub(crate) use otlp::TracingError;

use std::sync::OnceLock;

use opentelemetry::trace::{
    Link, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};

use crate::telemetry::config::TracingConfig;

struct Installed {
    tracer: SdkTracer,
    provider: SdkTracerProvider,
}

static TRACES: OnceLock<Installed> = OnceLock::new();

/// Starts exporting spans per `config` (call within the Tokio runtime: exports run on it).
pub(crate) fn install(config: &TracingConfig) -> Result<(), TracingError> {
    let exporter = otlp::OtlpJson::new(config)?;
    let service = config
        .service_name
        .clone()
        .or_else(|| std::env::var("OTEL_SERVICE_NAME").ok())
        .unwrap_or_else(|| "handoff".into());
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(service).build();
    let mut builder = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource);
    if let Some(ratio) = config.sample_ratio {
        // A producer's sampling decision is followed; new traces are sampled at the ratio.
        builder = builder.with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio))));
    }
    let provider = builder.build();
    let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "handoff");
    TRACES.set(Installed { tracer, provider }).map_err(|_| TracingError::Installed)
}

/// Exports the spans still buffered (at exit).
pub(crate) fn shutdown() {
    if let Some(installed) = TRACES.get()
        && let Err(e) = installed.provider.shutdown()
    {
        tracing::warn!(error = %e, "exporting the last spans failed");
    }
}

pub(crate) fn enabled() -> bool {
    TRACES.get().is_some()
}

/// A span, or nothing when tracing is off; ends when dropped.
pub(crate) struct EventSpan(Option<opentelemetry_sdk::trace::Span>);

impl EventSpan {
    /// A span `name` for one event, child of the `traceparent` in `headers` (JSON object text),
    /// or a new trace when there is none; linked to `batch` when given.
    pub(crate) fn start(name: &'static str, kind: SpanKind, headers: Option<&str>, batch: Option<&EventSpan>) -> Self {
        let Some(installed) = TRACES.get() else { return Self(None) };
        let parent = headers
            .and_then(traceparent_of)
            .map_or_else(Context::new, |remote| Context::new().with_remote_span_context(remote));
        let links = batch
            .and_then(|b| b.0.as_ref())
            .map(|span| vec![Link::with_context(opentelemetry::trace::Span::span_context(span).clone())])
            .unwrap_or_default();
        let span = installed
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_links(links)
            .start_with_context(&installed.tracer, &parent);
        Self(Some(span))
    }

    /// A span of its own (a relay batch).
    pub(crate) fn root(name: &'static str) -> Self {
        Self::start(name, SpanKind::Internal, None, None)
    }

    pub(crate) fn set(&mut self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        if let Some(span) = &mut self.0 {
            opentelemetry::trace::Span::set_attribute(span, KeyValue::new(key, value));
        }
    }

    /// Records that `what` happened now (a stage of a batch).
    pub(crate) fn event(&mut self, what: &'static str) {
        if let Some(span) = &mut self.0 {
            opentelemetry::trace::Span::add_event(span, what, Vec::new());
        }
    }

    /// Marks the span failed with `message`.
    pub(crate) fn fail(&mut self, message: impl Into<String>) {
        if let Some(span) = &mut self.0 {
            opentelemetry::trace::Span::set_status(span, Status::error(message.into()));
        }
    }

    /// The W3C `traceparent` of this span (what a call made within it carries).
    pub(crate) fn traceparent(&self) -> Option<String> {
        let context = opentelemetry::trace::Span::span_context(self.0.as_ref()?);
        Some(format!("00-{}-{}-{:02x}", context.trace_id(), context.span_id(), context.trace_flags().to_u8()))
    }
}

/// The remote span context of a `traceparent` field in a JSON object of headers; `None` when
/// there is none or it is malformed (then the span starts a trace of its own).
fn traceparent_of(headers: &str) -> Option<SpanContext> {
    if !headers.contains("traceparent") {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(headers).ok()?;
    let text = value.get("traceparent")?.as_str()?;
    parse_traceparent(text)
}

/// `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>` (W3C Trace Context, version 00).
fn parse_traceparent(text: &str) -> Option<SpanContext> {
    let parts: Vec<&str> = text.trim().split('-').collect();
    let [version, trace, span, flags] = parts.as_slice() else { return None };
    if *version != "00" || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
    let span_id = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some(SpanContext::new(trace_id, span_id, TraceFlags::new(flags), true, TraceState::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_w3c_traceparent_is_read_and_a_malformed_one_ignored() {
        let context =
            traceparent_of(r#"{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#).unwrap();
        assert_eq!(context.trace_id().to_string(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(context.span_id().to_string(), "b7ad6b7169203331");
        assert!(context.is_sampled() && context.is_remote());
        for bad in [
            r#"{"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"}"#,
            r#"{"traceparent": "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#,
            r#"{"traceparent": "00-0af7651916cd43dd-b7ad6b7169203331-01"}"#,
            r#"{"traceparent": 7}"#,
            "not json traceparent",
        ] {
            assert!(traceparent_of(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn without_tracing_spans_are_nothing() {
        let span = EventSpan::start("x", SpanKind::Internal, Some("{}"), None);
        assert!(span.traceparent().is_none());
    }
}
