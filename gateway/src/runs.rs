//! The run manager: starts runs, drives each one from a task of its own (never from the
//! client's connection), turns the agent's output into log events, and guarantees every
//! invocation ends with exactly one terminal `run_status`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runtime_adapter::{project, Item, Output, TurnRequest, Upstream};
use serde_json::{json, Value};
use session_log::event::run_status_content;
use session_log::{
    EventQuery, EventType, NewEvent, RunStatus, Seq, Store, StoreError, WriteError, Writer,
};
use tokio::sync::{oneshot, Notify};

use crate::agent::Agent;

/// Why a run could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("session {0:?} already has a run in progress")]
    SessionBusy(String),
    #[error("the gateway is shutting down")]
    ShuttingDown,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// Why a run was stopped from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// CancelRun or a surface's cancel: `cancelled`.
    Cancel,
    /// The gateway is shutting down: `interrupted`.
    Shutdown,
}

/// A run that has been started: its input and `in_progress` are committed.
#[derive(Clone, Debug)]
pub struct StartedRun {
    pub account_id: String,
    pub session_id: String,
    pub run_id: String,
    pub invocation_id: String,
    /// Seq of the first event of this invocation.
    pub first_seq: Seq,
    pub model: String,
}

struct ActiveRun {
    session_key: (String, String),
    stop: oneshot::Sender<Stop>,
}

pub struct Runs {
    store: Arc<dyn Store>,
    writer: Writer,
    agent: Arc<Agent>,
    upstream: &'static dyn Upstream,
    default_model: String,
    active: Mutex<Active>,
    idle: Notify,
    /// Supervisors that have not yet recorded their run's end.
    supervising: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct Active {
    by_invocation: HashMap<String, ActiveRun>,
    closed: bool,
}

/// How a run ended, before it is written down.
struct Outcome {
    status: RunStatus,
    error: Option<(String, String)>,
    usage: Option<Value>,
}

impl Outcome {
    fn completed(usage: Option<Value>) -> Self {
        Outcome {
            status: RunStatus::Completed,
            error: None,
            usage,
        }
    }

    fn failed(code: &str, message: impl Into<String>) -> Self {
        Outcome {
            status: RunStatus::Failed,
            error: Some((code.to_owned(), message.into())),
            usage: None,
        }
    }

    fn stopped(stop: Stop) -> Self {
        match stop {
            Stop::Cancel => Outcome {
                status: RunStatus::Cancelled,
                error: None,
                usage: None,
            },
            Stop::Shutdown => Outcome {
                status: RunStatus::Interrupted,
                error: Some((
                    "gateway_shutdown".into(),
                    "the gateway shut down during the run".into(),
                )),
                usage: None,
            },
        }
    }
}

pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

impl Runs {
    pub fn new(
        store: Arc<dyn Store>,
        writer: Writer,
        agent: Arc<Agent>,
        upstream: &'static dyn Upstream,
        default_model: String,
    ) -> Arc<Self> {
        Arc::new(Runs {
            store,
            writer,
            agent,
            upstream,
            default_model,
            active: Mutex::new(Active::default()),
            idle: Notify::new(),
            supervising: Default::default(),
        })
    }

    fn active(&self) -> std::sync::MutexGuard<'_, Active> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn active_count(&self) -> usize {
        self.active().by_invocation.len()
    }

    /// Starts a run: records the turn's input and `in_progress`, then drives the agent
    /// from a task of its own. Must be called on the core runtime.
    pub async fn start(
        self: &Arc<Self>,
        account_id: &str,
        session_id: &str,
        turn: TurnRequest,
    ) -> Result<StartedRun, StartError> {
        let run_id = new_id("run");
        let invocation_id = new_id("inv");
        let session_key = (account_id.to_owned(), session_id.to_owned());
        let (stop_tx, stop_rx) = oneshot::channel();
        {
            let mut active = self.active();
            if active.closed {
                return Err(StartError::ShuttingDown);
            }
            if active
                .by_invocation
                .values()
                .any(|r| r.session_key == session_key)
            {
                return Err(StartError::SessionBusy(session_id.to_owned()));
            }
            active.by_invocation.insert(
                invocation_id.clone(),
                ActiveRun {
                    session_key,
                    stop: stop_tx,
                },
            );
        }
        let started = self
            .record_start(account_id, session_id, &run_id, &invocation_id, &turn)
            .await;
        let (history, first_seq) = match started {
            Ok(v) => v,
            Err(e) => {
                self.forget(&invocation_id);
                return Err(e);
            }
        };
        let run = StartedRun {
            account_id: account_id.to_owned(),
            session_id: session_id.to_owned(),
            run_id,
            invocation_id,
            first_seq,
            model: turn
                .model
                .clone()
                .unwrap_or_else(|| self.default_model.clone()),
        };
        tracing::info!(account_id, session_id, run_id = %run.run_id, invocation_id = %run.invocation_id, "run started");
        tokio::spawn(self.clone().supervise(run.clone(), history, turn, stop_rx));
        Ok(run)
    }

    /// Loads the history, then commits the new input and `in_progress`.
    async fn record_start(
        &self,
        account_id: &str,
        session_id: &str,
        run_id: &str,
        invocation_id: &str,
        turn: &TurnRequest,
    ) -> Result<(Vec<Item>, Seq), StartError> {
        let events = self
            .store
            .events(&EventQuery::session(account_id, session_id))
            .await?;
        let history = project(&events);
        let mut batch: Vec<NewEvent> = turn
            .input
            .iter()
            .map(|item| {
                item.to_event(account_id, session_id)
                    .in_run(run_id, invocation_id)
            })
            .collect();
        let model = turn.model.as_deref().unwrap_or(&self.default_model);
        batch.push(
            NewEvent::new(
                account_id,
                session_id,
                EventType::RunStatus,
                run_status_content(RunStatus::InProgress, None),
            )
            .in_run(run_id, invocation_id)
            .with_metadata(
                json!({ "model": model, "surface": turn.surface.as_str(), "stream": turn.stream }),
            ),
        );
        let committed = self.writer.append(batch).await?;
        let first_seq = committed.first().map(|e| e.seq).unwrap_or_default();
        Ok((history.into_iter().collect(), first_seq))
    }

    fn forget(&self, invocation_id: &str) {
        let mut active = self.active();
        active.by_invocation.remove(invocation_id);
        if active.by_invocation.is_empty() {
            self.idle.notify_waiters();
        }
    }

    /// Stops a running invocation of this gateway. Returns whether it was running here.
    pub fn stop(&self, invocation_id: &str, why: Stop) -> bool {
        match self.active().by_invocation.remove(invocation_id) {
            Some(run) => {
                let _ = run.stop.send(why);
                true
            }
            None => false,
        }
    }

    /// Refuses new runs, waits up to `grace` for running ones to finish, then closes the
    /// rest as `interrupted` and waits until everything is committed.
    pub async fn drain(&self, grace: Duration) {
        self.active().closed = true;
        let waited = tokio::time::timeout(grace, async {
            loop {
                let idle = self.idle.notified();
                if self.active_count() == 0 {
                    return;
                }
                idle.await;
            }
        })
        .await;
        if waited.is_err() {
            let ids: Vec<String> = self.active().by_invocation.keys().cloned().collect();
            tracing::warn!(
                runs = ids.len(),
                "closing runs still going at shutdown as interrupted"
            );
            for id in ids {
                self.stop(&id, Stop::Shutdown);
            }
            // The supervisors write the terminal statuses; give them a moment to queue.
            let _ = tokio::time::timeout(Duration::from_secs(2), async {
                while self.supervising.load(std::sync::atomic::Ordering::Acquire) > 0 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
        }
        let _ = self.writer.flush().await;
    }

    async fn supervise(
        self: Arc<Self>,
        run: StartedRun,
        history: Vec<Item>,
        turn: TurnRequest,
        mut stop: oneshot::Receiver<Stop>,
    ) {
        self.supervising
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let mut driver = tokio::spawn(drive(self.clone(), run.clone(), history, turn));
        let outcome = tokio::select! {
            joined = &mut driver => joined.unwrap_or_else(|e| Outcome::failed("internal_error", format!("the run task failed: {e}"))),
            Ok(why) = &mut stop => {
                // Dropping the driver closes the agent connection; wait for it so none of
                // its events can land after the terminal status.
                driver.abort();
                let _ = (&mut driver).await;
                Outcome::stopped(why)
            }
        };
        let mut batch = Vec::with_capacity(2);
        let event = |t: EventType, content: Value| {
            NewEvent::new(&run.account_id, &run.session_id, t, content)
                .in_run(&run.run_id, &run.invocation_id)
        };
        if let Some((code, message)) = &outcome.error {
            batch.push(event(
                EventType::Error,
                json!({ "code": code, "message": message }),
            ));
        }
        let reason = outcome.error.as_ref().map(|(code, _)| code.as_str());
        let mut terminal = event(
            EventType::RunStatus,
            run_status_content(outcome.status, reason),
        );
        if let Some(usage) = outcome.usage {
            terminal = terminal.with_metadata(json!({ "usage": usage }));
        }
        batch.push(terminal);
        if let Err(e) = self.writer.append(batch).await {
            tracing::error!(error = %e, run_id = %run.run_id, "could not record the end of a run");
        }
        tracing::info!(
            account_id = %run.account_id, session_id = %run.session_id, run_id = %run.run_id,
            invocation_id = %run.invocation_id, status = outcome.status.as_str(), "run ended"
        );
        self.forget(&run.invocation_id);
        self.supervising
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Calls the agent and records what it says. Returns how the run ended; the supervisor
/// writes that down.
async fn drive(runs: Arc<Runs>, run: StartedRun, history: Vec<Item>, turn: TurnRequest) -> Outcome {
    let upstream = runs.upstream;
    let body = upstream.build_request(&history, &turn, &runs.default_model);
    let body = match serde_json::to_vec(&body) {
        Ok(b) => b,
        Err(e) => return Outcome::failed("internal_error", e.to_string()),
    };
    let mut response = match runs
        .agent
        .post_json(upstream.protocol().path(), body, &run.account_id)
        .await
    {
        Ok(r) => r,
        Err(e) => return Outcome::failed("agent_unreachable", e.to_string()),
    };
    let mut parser = upstream.parser(&response.content_type);
    let mut recorder = Recorder {
        run: &run,
        writer: &runs.writer,
        done: None,
        error: None,
    };
    let mut broken = None;
    loop {
        match response.chunk().await {
            Ok(Some(bytes)) => recorder.record(parser.feed(&bytes)).await,
            Ok(None) => break,
            Err(e) => {
                broken = Some(e);
                break;
            }
        }
    }
    recorder.record(parser.finish()).await;
    let Recorder { done, error, .. } = recorder;
    let status = response.status;
    if broken.is_none() {
        runs.agent.release(response).await;
    }
    match (error, done, broken) {
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
    }
}

/// Turns parser outputs into events and queues them in order.
struct Recorder<'a> {
    run: &'a StartedRun,
    writer: &'a Writer,
    done: Option<Option<Value>>,
    error: Option<(String, String)>,
}

impl Recorder<'_> {
    async fn record(&mut self, outputs: Vec<Output>) {
        let run = self.run;
        let event = |t: EventType, content: Value| {
            NewEvent::new(&run.account_id, &run.session_id, t, content)
                .in_run(&run.run_id, &run.invocation_id)
        };
        let mut batch = Vec::with_capacity(outputs.len());
        for output in outputs {
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
                Output::Error { code, message } => {
                    self.error.get_or_insert((code, message));
                }
                Output::Done { usage } => self.done = Some(usage),
            }
        }
        if !batch.is_empty() {
            // Waits only for queue space: the client sees these once they are committed.
            if let Err(e) = self.writer.submit(batch).await {
                self.error
                    .get_or_insert(("internal_error".into(), e.to_string()));
            }
        }
    }
}
