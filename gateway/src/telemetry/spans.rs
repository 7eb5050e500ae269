//! The spans Tether records, named as OpenTelemetry's semantic conventions name them: one
//! `invoke_agent {agent}` CLIENT span per run (the GenAI conventions' attributes, set when
//! it starts; A2A runs add `a2a.*`), with a child per request to the agent, per restore
//! and per commit that starts or ends the run; one CLIENT span per pass-through request;
//! and the W3C trace context taken from the client and handed to the agent. Every
//! function returns a disabled span, and does nothing else, while traces are off.

use std::future::Future;

use http::HeaderMap;
use opentelemetry::context::FutureExt as _;
use opentelemetry::propagation::{Injector, TextMapPropagator};
use opentelemetry::trace::{Status, TraceContextExt as _};
use opentelemetry::Context;
use opentelemetry_http::HeaderExtractor;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use runtime_adapter::Protocol;
use serde_json::Value;
use session_log::RunStatus;
use tracing::field::Empty;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::{AGENT, TARGET};

/// `gen_ai.provider.name`: the family of API the agent speaks (Tether cannot see which
/// model provider, if any, is behind it).
pub fn provider_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::OpenAiChat | Protocol::OpenAiResponses => "openai",
        Protocol::A2a => "a2a",
        Protocol::Adk => "google.adk",
    }
}

/// The client's trace context (`traceparent`, `tracestate`), when traces are on and the
/// client sent a valid one.
pub fn client_context(headers: &HeaderMap) -> Option<Context> {
    if !super::enabled() {
        return None;
    }
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    cx.span().span_context().is_valid().then_some(cx)
}

/// Runs `fut` in the client's trace: a span it starts without a parent of its own (a run
/// started on the core runtime) becomes a child of the client's.
pub async fn in_client_trace<F: Future>(client: Option<Context>, fut: F) -> F::Output {
    match client {
        Some(cx) => fut.with_context(cx).await,
        None => fut.await,
    }
}

/// Hands `span`'s trace context on in a request's headers (`traceparent`, and
/// `tracestate` when the client sent one), through `set(name, value)`.
pub fn inject(span: &Span, set: impl FnMut(&str, String)) {
    struct Headers<F>(F);
    impl<F: FnMut(&str, String)> Injector for Headers<F> {
        fn set(&mut self, key: &str, value: String) {
            (self.0)(key, value)
        }
    }
    if span.is_disabled() {
        return;
    }
    TraceContextPropagator::new().inject_context(&span.context(), &mut Headers(set));
}

/// What a run span is about.
pub struct Run<'a> {
    pub account_id: &'a str,
    pub session_id: &'a str,
    pub run_id: &'a str,
    pub invocation_id: &'a str,
    pub model: &'a str,
    /// The client's A2A method (`message/send`, `SendStreamingMessage`, …).
    pub a2a_method: Option<&'a str>,
}

/// The `invoke_agent {agent}` span of a run, a child of the current span or trace context.
pub fn run(r: Run<'_>) -> Span {
    let Some(agent) = AGENT.get() else {
        return Span::none();
    };
    tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        otel.name = agent.span_name.as_str(),
        otel.kind = "client",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.provider.name = agent.provider,
        gen_ai.agent.name = agent.name.as_str(),
        gen_ai.conversation.id = r.session_id,
        gen_ai.request.model = r.model,
        server.address = agent.address.as_str(),
        server.port = agent.port,
        tether.account_id = r.account_id,
        tether.run_id = r.run_id,
        tether.invocation_id = r.invocation_id,
        a2a.method.name = r.a2a_method.filter(|_| agent.provider == "a2a"),
    )
}

/// The agent's handle for the run: an A2A task's id.
pub fn agent_ref(span: &Span, id: &str) {
    if !span.is_disabled() && AGENT.get().is_some_and(|a| a.provider == "a2a") {
        span.set_attribute("a2a.task.id", id.to_owned());
    }
}

/// What the agent recorded beside its answer: an A2A task's final state.
pub fn item_metadata(span: &Span, metadata: &Value) {
    if span.is_disabled() {
        return;
    }
    if let Some(state) = metadata["a2a"]["state"].as_str() {
        span.set_attribute("a2a.task.state", state.to_owned());
    }
}

/// How a run ended: its token usage when the agent reported it, and an error status for
/// a failed or interrupted run. An A2A task cut off by a cancel or shutdown never told
/// its final state: it is the run's.
pub fn run_ended(span: &Span, status: RunStatus, error: Option<&str>, usage: Option<&Value>) {
    if span.is_disabled() {
        return;
    }
    if let Some(usage) = usage.and_then(runtime_adapter::usage::Usage::read) {
        span.set_attribute("gen_ai.usage.input_tokens", usage.input as i64);
        span.set_attribute("gen_ai.usage.output_tokens", usage.output as i64);
    }
    span.set_attribute("tether.run.status", status.as_str());
    if matches!(status, RunStatus::Failed | RunStatus::Interrupted) {
        let kind = error.unwrap_or(status.as_str()).to_owned();
        span.set_status(Status::error(kind.clone()));
        span.set_attribute("error.type", kind);
    }
    let a2a = AGENT.get().is_some_and(|a| a.provider == "a2a");
    match status {
        RunStatus::Cancelled if a2a => span.set_attribute("a2a.task.state", "canceled"),
        RunStatus::Interrupted if a2a => span.set_attribute("a2a.task.state", "failed"),
        _ => {}
    }
}

/// One request to the agent (a run's turn, probe, restore or cancel), a child of the
/// current span; it ends when its response has been read.
pub fn agent_request(method: &str, path: &str) -> Span {
    let Some(agent) = AGENT.get() else {
        return Span::none();
    };
    tracing::info_span!(
        target: TARGET,
        "agent_request",
        otel.name = method,
        otel.kind = "client",
        http.request.method = method,
        url.path = path.split('?').next().unwrap_or(path),
        server.address = agent.address.as_str(),
        server.port = agent.port,
        http.response.status_code = Empty,
    )
}

/// One pass-through request, a child of the client's span when it sent one.
pub fn passthrough(method: &str, path: &str, headers: &HeaderMap) -> Span {
    let Some(agent) = AGENT.get() else {
        return Span::none();
    };
    let span = tracing::info_span!(
        target: TARGET,
        "passthrough",
        otel.name = method,
        otel.kind = "client",
        http.request.method = method,
        url.path = path,
        server.address = agent.address.as_str(),
        server.port = agent.port,
        http.response.status_code = Empty,
        tether.path = "passthrough",
    );
    if let Some(cx) = client_context(headers) {
        let _ = span.set_parent(cx);
    }
    span
}

/// The agent's HTTP status on a request span (5xx is an error).
pub fn http_status(span: &Span, status: u16) {
    span.record("http.response.status_code", i64::from(status));
    if status >= 500 {
        span.set_status(Status::error(status.to_string()));
    }
}

/// A request span whose exchange failed before (or while) the agent answered.
pub fn failed(span: &Span, error: &str) {
    if !span.is_disabled() {
        span.set_status(Status::error(error.to_owned()));
    }
}

/// A restore of a session the agent forgot, a child of the run's span.
pub fn restore(reason: &str) -> Span {
    if AGENT.get().is_none() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        "restore",
        otel.name = "restore_session",
        tether.restore.reason = reason,
    )
}

/// A commit of a run's events (`phase`: `run_start`, `run_end`), a child of the run's
/// span. The writer commits it with whatever else is queued (group commit).
pub fn commit(phase: &'static str, events: usize) -> Span {
    let Some(agent) = AGENT.get() else {
        return Span::none();
    };
    tracing::info_span!(
        target: TARGET,
        "commit",
        otel.name = "session_log commit",
        db.system.name = agent.store,
        tether.commit = phase,
        tether.events = events as i64,
    )
}
