//! Driving one run: the agent called (restoring a session it forgot first), its answer
//! parsed by the adapter, and every output recorded as log events in order.

use std::sync::Arc;

use runtime_adapter::approval;
use runtime_adapter::{AgentRequest, Item, Output, Probe, StreamParser, TurnCall, TurnRequest};
use serde_json::{json, Value};
use session_log::checkpoints::{checkpoint_content, CheckpointPolicy, Phase};
use session_log::{EventType, NewEvent, RunStatus};
use tracing::Instrument;

use super::agent::{AgentError, AgentResponse};
use super::{History, Outcome, Runs, StartedRun};
use crate::ids::new_id;
use crate::telemetry::spans;

/// Calls the agent and records what it says. Returns how the run ended; the supervisor
/// writes that down.
pub(super) async fn drive(
    runs: Arc<Runs>,
    run: StartedRun,
    history: History,
    turn: TurnRequest,
) -> Outcome {
    super::faults::hit("drive", &run.session_id);
    // The log holds upload URIs; the agent gets the content (it cannot read our store).
    let History { items, events, .. } = history;
    // This future lives as long as the run streams, and is as large as its largest
    // state: the one-off steps (attachments, releasing the connection) are boxed.
    let (items, turn) = match Box::pin(super::attachments::resolve_for_agent(
        &*runs.store,
        &run.account_id,
        items,
        turn,
    ))
    .await
    {
        Ok(v) => v,
        Err(e) => return Outcome::failed("attachment_unavailable", e),
    };
    let call = TurnCall {
        account_id: &run.account_id,
        session_id: &run.session_id,
        run_id: &run.run_id,
        history: &items,
        events: &events,
        turn: &turn,
        default_model: &runs.default_model,
    };
    let answer = Box::pin(ask_agent(&runs, &run, &call)).await;
    // What answering a request this run may end with needs of its turn.
    let context = approval::context(runs.upstream().protocol(), &turn, &run.model);
    // The history is not needed while the answer streams, which may take minutes.
    drop((items, events, turn));
    let (answer, mut parser) = match answer {
        Ok(v) => v,
        Err(outcome) => return outcome,
    };
    if matches!(&answer, Answer::Streaming(r) if (200..300).contains(&r.status)) {
        run.answered.send_replace(true);
    }
    let mut recorder = Recorder {
        runs: &runs,
        run: &run,
        policy: runs.checkpoint_policy(),
        agent_ref: None,
        done: None,
        error: None,
        produced: false,
        answered: None,
        waiting: None,
        context,
        trace: tracing::Span::current(),
    };
    let mut response = match answer {
        Answer::Read(status, body) => {
            recorder.record(parser.feed(&body)).await;
            recorder.record(parser.finish()).await;
            return recorder.outcome(status, None);
        }
        Answer::Streaming(response) => response,
    };
    let mut broken = None;
    loop {
        match response.chunk().await {
            Ok(Some(bytes)) => {
                super::faults::hit("parser", &run.session_id);
                recorder.record(parser.feed(&bytes)).await
            }
            Ok(None) => break,
            Err(e) => {
                broken = Some(e);
                break;
            }
        }
    }
    // A body cut off is not an answer that ended: what it held is recorded, but it is not
    // finished (an agent without an end marker, ADK's or LangGraph's stream, would look done).
    if broken.is_none() {
        recorder.record(parser.finish()).await;
    }
    let status = response.status;
    if broken.is_none() {
        Box::pin(runs.agent.release(*response)).await;
    }
    recorder.outcome(status, broken)
}

/// The agent's answer to a turn: still to be read, or read already (an error answer).
enum Answer {
    Streaming(Box<AgentResponse>),
    Read(u16, Vec<u8>),
}

/// Sends the turn, first restoring the session if the agent says (asked before, or in
/// its answer) that it forgot it; a "forgot" answer gets one restore and one retry.
async fn ask_agent(
    runs: &Runs,
    run: &StartedRun,
    call: &TurnCall<'_>,
) -> Result<(Answer, Box<dyn StreamParser>), Outcome> {
    // The agent's card (read again now and then) says how it is called.
    runs.agent.card().await;
    let upstream = runs.upstream();
    let unreachable = |e: AgentError| Outcome::failed("agent_unreachable", e.to_string());
    let forgot = match upstream.probe(call) {
        Probe::Skip => None,
        Probe::Restore => Some("no_agent_handle"),
        Probe::Ask(request) => {
            let (status, _, body) = runs
                .agent
                .exchange(&request, &run.account_id, AGENT_ANSWER_CAP)
                .await
                .map_err(unreachable)?;
            upstream.forgot(status, &body).then_some("agent_forgot")
        }
    };
    let request = match forgot {
        Some(reason) => {
            restore(runs, run, call, reason)
                .instrument(spans::restore(reason))
                .await?
        }
        None => None,
    };
    let restored = forgot.is_some();
    let request = request.unwrap_or_else(|| upstream.request(call));
    let mut response = runs
        .agent
        .send(&request, &run.account_id)
        .await
        .map_err(unreachable)?;
    if restored || (200..300).contains(&response.status) {
        let parser = upstream.parser(call, &response.content_type);
        return Ok((Answer::Streaming(Box::new(response)), parser));
    }
    let (status, content_type) = (response.status, response.content_type.clone());
    let Ok(body) = response.read_to_end(AGENT_ANSWER_CAP).await else {
        return Err(Outcome::failed(
            "agent_error",
            format!("the agent answered HTTP {status}"),
        ));
    };
    runs.agent.release(response).await;
    let parser = upstream.parser(call, &content_type);
    let retry = match upstream.forgot(status, &body) {
        true => {
            restore(runs, run, call, "agent_forgot")
                .instrument(spans::restore("agent_forgot"))
                .await?
        }
        false => None,
    };
    let Some(request) = retry else {
        // Not forgotten, or nothing to restore: the agent's answer stands.
        return Ok((Answer::Read(status, body), parser));
    };
    let response = runs
        .agent
        .send(&request, &run.account_id)
        .await
        .map_err(unreachable)?;
    let parser = upstream.parser(call, &response.content_type);
    Ok((Answer::Streaming(Box::new(response)), parser))
}

/// Puts the session back into an agent that forgot it: sends the adapter's restore
/// requests, records that it did, and returns the turn's request to send next; `None`
/// when the adapter has nothing to restore.
async fn restore(
    runs: &Runs,
    run: &StartedRun,
    call: &TurnCall<'_>,
    reason: &str,
) -> Result<Option<AgentRequest>, Outcome> {
    let Some(plan) = runs.upstream().restore(call) else {
        return Ok(None);
    };
    for request in &plan.before {
        match runs
            .agent
            .exchange(request, &run.account_id, AGENT_ANSWER_CAP)
            .await
        {
            Ok((status, _, _)) if (200..300).contains(&status) => {}
            Ok((status, _, body)) => {
                let body = String::from_utf8_lossy(&body);
                return Err(Outcome::failed(
                    "restore_failed",
                    format!("the agent refused the restored session (HTTP {status}): {body}"),
                ));
            }
            Err(e) => return Err(Outcome::failed("agent_unreachable", e.to_string())),
        }
    }
    let mut content = json!({
        "reason": reason,
        "protocol": runs.upstream().protocol().as_str(),
        "items": call.history.len(),
        "requests": plan.before.len(),
    });
    let mut request = plan.request;
    if let Some(reask) = &plan.reask {
        let asked = Box::pin(ask_again(runs, run, call, reask)).await?;
        request = runs.upstream().readdress(call, &asked).ok_or_else(|| {
            Outcome::failed(
                "restore_failed",
                "the turn could not be addressed to the request the agent asked again",
            )
        })?;
        content["asked_again"] = json!({
            "request_id": reask.pending["request_id"],
            "as": asked["request_id"],
        });
    }
    tracing::info!(
        account_id = %run.account_id, session_id = %run.session_id, run_id = %run.run_id,
        reason, items = call.history.len(), asked_again = plan.reask.is_some(),
        "restored a session the agent had forgotten"
    );
    let note = NewEvent::new(
        &run.account_id,
        &run.session_id,
        EventType::SessionRestore,
        content,
    )
    .in_run(&run.run_id, &run.invocation_id);
    if let Err(e) = runs.writer.submit(vec![note]).await {
        return Err(Outcome::failed("internal_error", e.to_string()));
    }
    Ok(Some(request))
}

/// Sends a restore's re-ask (the waiting run's message again) and returns what the agent
/// asks in its answer, which must be the request the turn answers, asked anew. Its
/// answer is not recorded: the run that asked is in the log already.
async fn ask_again(
    runs: &Runs,
    run: &StartedRun,
    call: &TurnCall<'_>,
    reask: &runtime_adapter::Reask,
) -> Result<Value, Outcome> {
    let (status, content_type, body) = runs
        .agent
        .exchange(&reask.request, &run.account_id, AGENT_ANSWER_CAP)
        .await
        .map_err(|e| Outcome::failed("agent_unreachable", e.to_string()))?;
    if !(200..300).contains(&status) {
        let body = String::from_utf8_lossy(&body);
        return Err(Outcome::failed(
            "restore_failed",
            format!("the agent refused the waiting turn asked again (HTTP {status}): {body}"),
        ));
    }
    let upstream = runs.upstream();
    let mut parser = upstream.parser(call, &content_type);
    let mut asked = None;
    let mut outputs = parser.feed(&body);
    outputs.extend(parser.finish());
    for output in &outputs {
        approval::track(upstream.protocol(), &mut asked, output);
    }
    match asked {
        Some(asked) if approval::same_request(&reask.pending, &asked) => Ok(asked),
        asked => Err(Outcome::failed(
            "restore_failed",
            format!(
                "asked again, the agent did not ask for what was answered ({} {}): it asked {}",
                reask.pending["tool"],
                reask.pending["arguments"],
                asked.map_or_else(
                    || "nothing".to_owned(),
                    |a| json!({"tool": a["tool"], "arguments": a["arguments"]}).to_string()
                )
            ),
        )),
    }
}

/// How much of an agent answer Tether reads when it only needs to judge it (a probe, a
/// restore, an error body).
pub(super) const AGENT_ANSWER_CAP: usize = 256 * 1024;

/// Turns parser outputs into events and queues them in order.
struct Recorder<'a> {
    runs: &'a Runs,
    run: &'a StartedRun,
    policy: CheckpointPolicy,
    agent_ref: Option<String>,
    done: Option<Option<Value>>,
    error: Option<(String, String)>,
    /// Whether the agent produced any text, reasoning or item.
    produced: bool,
    /// What the agent said it used for its answer (`Output::Answered`).
    answered: Option<serde_json::Map<String, Value>>,
    /// What the answer, so far, ends waiting for (see `runtime_adapter::approval`).
    waiting: Option<Value>,
    /// Added to a waiting run's action (`approval::context`) where it names nothing else.
    context: Value,
    /// The run's span (see `telemetry::spans::run`).
    trace: tracing::Span,
}

/// A `run_checkpoint` event Tether records in `run`.
pub(super) fn checkpoint_event(
    run: &StartedRun,
    phase: Phase,
    tool_call_ids: &[String],
    backend: &str,
    policy: &CheckpointPolicy,
) -> NewEvent {
    let content = checkpoint_content(
        &new_id("ckpt"),
        phase,
        tool_call_ids,
        backend,
        policy,
        chrono::Utc::now(),
    );
    NewEvent::new(
        &run.account_id,
        &run.session_id,
        EventType::RunCheckpoint,
        content,
    )
    .in_run(&run.run_id, &run.invocation_id)
}

impl Recorder<'_> {
    /// How the agent's answer ended, from what was recorded, its HTTP status and whether
    /// the connection broke.
    fn outcome(self, status: u16, broken: Option<AgentError>) -> Outcome {
        let produced = self.produced;
        let mut outcome = match (self.error, self.done, broken) {
            (Some((code, message)), _, _) => Outcome::failed(&code, message),
            (None, _, _) if !(200..300).contains(&status) => {
                Outcome::failed("agent_error", format!("the agent answered HTTP {status}"))
            }
            (None, Some(usage), _) => Outcome::completed(usage),
            (None, None, Some(e)) => Outcome::failed("agent_connection_lost", e.to_string()),
            (None, None, None) => Outcome::failed(
                "agent_closed_early",
                "the agent ended its response before the turn was complete",
            ),
        };
        outcome.produced |= produced;
        outcome.agent_params = self.answered.map(Value::Object);
        if outcome.status == RunStatus::Completed {
            if let Some(mut action) = self.waiting {
                if let (Some(a), Value::Object(context)) = (action.as_object_mut(), self.context) {
                    for (k, v) in context {
                        a.entry(k).or_insert(v);
                    }
                }
                outcome.status = RunStatus::RequiresAction;
                outcome.action = Some(action);
            }
        }
        outcome
    }

    async fn record(&mut self, outputs: Vec<Output>) {
        let run = self.run;
        let event = |t: EventType, content: Value| {
            NewEvent::new(&run.account_id, &run.session_id, t, content)
                .in_run(&run.run_id, &run.invocation_id)
        };
        let mut batch = Vec::with_capacity(outputs.len());
        // Consecutive tool calls (or results) share one checkpoint after the last of them,
        // so parallel calls never leave a checkpoint between siblings.
        let mut pending: Option<(Phase, Vec<String>)> = None;
        let flush = |pending: &mut Option<(Phase, Vec<String>)>, batch: &mut Vec<NewEvent>| {
            if let Some((phase, ids)) = pending.take() {
                batch.push(checkpoint_event(
                    run,
                    phase,
                    &ids,
                    self.runs.store.backend(),
                    &self.policy,
                ));
            }
        };
        let protocol = self.runs.upstream().protocol();
        for output in outputs {
            approval::track(protocol, &mut self.waiting, &output);
            self.produced |= matches!(
                output,
                Output::TextDelta(_)
                    | Output::ReasoningDelta(_)
                    | Output::Item(_)
                    | Output::ItemWith(..)
            );
            let step = match &output {
                Output::Item(Item::ToolCall { call_id, .. }) => {
                    Some((Phase::AfterToolCall, call_id.clone()))
                }
                Output::Item(Item::ToolResult { call_id, .. }) => {
                    Some((Phase::AfterToolResult, call_id.clone()))
                }
                _ => None,
            };
            if pending.as_ref().map(|p| p.0) != step.as_ref().map(|s| s.0) {
                flush(&mut pending, &mut batch);
            }
            match output {
                Output::TextDelta(delta) => {
                    batch.push(event(EventType::TextDelta, json!({ "delta": delta })))
                }
                Output::ReasoningDelta(delta) => {
                    batch.push(event(EventType::ReasoningDelta, json!({ "delta": delta })))
                }
                Output::Item(item) => batch.push(
                    item.to_event(&run.account_id, &run.session_id)
                        .in_run(&run.run_id, &run.invocation_id),
                ),
                Output::ItemWith(item, metadata) => {
                    spans::item_metadata(&self.trace, &metadata);
                    batch.push(
                        item.to_event(&run.account_id, &run.session_id)
                            .in_run(&run.run_id, &run.invocation_id)
                            .with_metadata(metadata),
                    )
                }
                Output::Frame(frame) => batch.push(event(EventType::AgentEvent, frame)),
                Output::AgentRef(agent_ref) => {
                    if self.agent_ref.as_deref() != Some(agent_ref.as_str()) {
                        spans::agent_ref(&self.trace, &agent_ref);
                        self.runs.set_agent_ref(run, &agent_ref).await;
                        self.agent_ref = Some(agent_ref);
                    }
                }
                Output::Error { code, message } => {
                    self.error.get_or_insert((code, message));
                }
                Output::Answered(params) => self.answered = Some(params),
                Output::Done { usage } => self.done = Some(usage),
            }
            if let Some((phase, id)) = step {
                pending
                    .get_or_insert_with(|| (phase, Vec::new()))
                    .1
                    .push(id);
            }
        }
        flush(&mut pending, &mut batch);
        if !batch.is_empty() {
            // Waits only for queue space: the client sees these once they are committed.
            if let Err(e) = self.runs.writer.submit(batch).await {
                self.error
                    .get_or_insert(("internal_error".into(), e.to_string()));
            }
        }
    }
}
