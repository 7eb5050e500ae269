//! The run manager: starts runs, drives each one from a task of its own (never from the
//! client's connection), turns the agent's output into log events, and guarantees every
//! invocation ends with exactly one terminal `run_status`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runtime_adapter::{
    project, AgentRequest, Cancel, Item, Output, Probe, SessionRef, StreamParser, TurnCall,
    TurnRequest, Upstream,
};
use serde_json::{json, Value};
use session_log::checkpoints::{checkpoint_content, CheckpointPolicy, Phase, RESUMED_FROM};
use session_log::event::run_status_content;
use session_log::{
    BeforeAppend, Claim, Claimed, Event, EventQuery, EventType, NewEvent, RunStatus, Store,
    StoreError, Subscription, WriteError, Writer,
};
use tokio::sync::{oneshot, Notify};

use crate::agent::{Agent, AgentResponse};
use crate::metrics::METRICS;

/// Why a run could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("session {0:?} already has a run in progress")]
    SessionBusy(String),
    #[error("the gateway is shutting down")]
    ShuttingDown,
    /// The account is at its concurrent-run cap.
    #[error("{0}")]
    TooManyRuns(policies::Limited),
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
    /// The run's lease was lost (another replica closed it as abandoned while this one
    /// could not renew): `interrupted`, though the store keeps the first close.
    LeaseLost,
}

/// A run that has been started: its input and `in_progress` are committed.
#[derive(Clone, Debug)]
pub struct StartedRun {
    pub account_id: String,
    pub session_id: String,
    pub run_id: String,
    pub invocation_id: String,
    pub model: String,
}

struct ActiveRun {
    session_key: (String, String),
    run_id: String,
    /// Taken by the first stop request.
    stop: Option<oneshot::Sender<Stop>>,
    /// The run's end is being written: the session is about to be free.
    finishing: bool,
    /// Its invocation row is claimed in the store: the heartbeat renews its lease.
    leased: bool,
    /// The agent's own handle for the run, once the agent named it (an A2A task id).
    agent_ref: Option<String>,
}

pub struct Runs {
    store: Arc<dyn Store>,
    writer: Writer,
    agent: Arc<Agent>,
    upstream: &'static dyn Upstream,
    default_model: String,
    active: Mutex<Active>,
    /// Notified whenever a run leaves `active` (its end is committed).
    changed: Notify,
    /// How Tether's own `run_checkpoint` events are recorded.
    checkpoint_policy: Mutex<CheckpointPolicy>,
    /// Concurrent-run slots: every start and resume takes one, its supervisor holds it.
    limits: Arc<policies::RateLimits>,
    /// This replica's name as owner of run leases.
    owner: String,
    lease: Duration,
}

/// How this replica leases the runs it drives.
pub struct Ownership {
    /// This replica's name (`replica_id`).
    pub owner: String,
    /// Lease length; the heartbeat renews every third of it.
    pub lease: Duration,
}

/// What a resume adds to a start: the history cut at the checkpoint and where it came from.
pub struct ResumeFrom {
    pub run_id: String,
    pub checkpoint_id: String,
    pub resume_attempt_id: String,
    /// The projection up to the checkpoint (and replayed tool results), sent instead of
    /// the whole session.
    pub history: Vec<Item>,
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
            Stop::LeaseLost => Outcome {
                status: RunStatus::Interrupted,
                error: Some((
                    "run_lease_lost".into(),
                    "the gateway lost its lease on the run".into(),
                )),
                usage: None,
            },
        }
    }
}

/// What the agent is told of the session's past: the projection, and the events it came
/// from (where adapters find what they recorded earlier).
pub struct History {
    pub items: Vec<Item>,
    pub events: Vec<Event>,
}

/// How long a new run waits for the session's previous run to finish committing its end.
const FINISHING_WAIT: Duration = Duration::from_secs(10);

/// A new session, run, invocation or checkpoint id. Time-ordered (UUIDv7: milliseconds,
/// then 74 random bits), so the log's indexes, which lead with these ids, take new entries
/// at one edge instead of at random pages all over a large file.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

impl Runs {
    pub fn new(
        store: Arc<dyn Store>,
        writer: Writer,
        agent: Arc<Agent>,
        upstream: &'static dyn Upstream,
        default_model: String,
        limits: Arc<policies::RateLimits>,
        ownership: Ownership,
    ) -> Arc<Self> {
        Arc::new(Runs {
            store,
            writer,
            agent,
            upstream,
            default_model,
            active: Mutex::new(Active::default()),
            changed: Notify::new(),
            checkpoint_policy: Mutex::new(CheckpointPolicy::default()),
            limits,
            owner: ownership.owner,
            lease: ownership.lease,
        })
    }

    /// This replica's name as owner of run leases.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Sets how checkpoints are recorded from now on (TTL, replay policy).
    pub fn set_checkpoint_policy(&self, policy: CheckpointPolicy) {
        *self
            .checkpoint_policy
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = policy;
    }

    fn checkpoint_policy(&self) -> CheckpointPolicy {
        self.checkpoint_policy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The run and invocation in progress in a session on this gateway, if any.
    pub fn active_in_session(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Option<(String, String)> {
        self.active()
            .by_invocation
            .iter()
            .find(|(_, r)| r.session_key.0 == account_id && r.session_key.1 == session_id)
            .map(|(inv, r)| (r.run_id.clone(), inv.clone()))
    }

    /// A `run_checkpoint` event of `run` recorded by Tether.
    fn checkpoint_event(
        &self,
        run: &StartedRun,
        phase: Phase,
        tool_call_ids: &[String],
    ) -> NewEvent {
        checkpoint_event(
            run,
            phase,
            tool_call_ids,
            self.store.backend(),
            &self.checkpoint_policy(),
        )
    }

    fn active(&self) -> std::sync::MutexGuard<'_, Active> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn active_count(&self) -> usize {
        self.active().by_invocation.len()
    }

    /// Starts a run: records the turn's input and `in_progress`, then drives the agent
    /// from a task of its own. Must be called on the core runtime.
    ///
    /// `follow` is the client's view of the session, opened before the start: it comes
    /// back as the subscription of the run's events from its first one, which reads
    /// nothing from the store to get there.
    pub async fn start(
        self: &Arc<Self>,
        account_id: &str,
        session_id: &str,
        turn: TurnRequest,
        follow: BeforeAppend,
    ) -> Result<(StartedRun, Subscription), StartError> {
        self.launch(account_id, session_id, turn, None, follow)
            .await
    }

    /// Starts a new invocation of an existing run from a checkpoint: the agent gets
    /// `from.history` plus the turn's input (the resume instruction), and the
    /// invocation's `in_progress` names the checkpoint. Same rules as [`Runs::start`].
    pub async fn resume(
        self: &Arc<Self>,
        account_id: &str,
        session_id: &str,
        turn: TurnRequest,
        from: ResumeFrom,
        follow: BeforeAppend,
    ) -> Result<(StartedRun, Subscription), StartError> {
        self.launch(account_id, session_id, turn, Some(from), follow)
            .await
    }

    async fn launch(
        self: &Arc<Self>,
        account_id: &str,
        session_id: &str,
        turn: TurnRequest,
        resume: Option<ResumeFrom>,
        follow: BeforeAppend,
    ) -> Result<(StartedRun, Subscription), StartError> {
        let run_id = resume
            .as_ref()
            .map(|r| r.run_id.clone())
            .unwrap_or_else(|| new_id("run"));
        // Taken before anything is written, and held by the supervisor until the run's end
        // is committed: a client that leaves does not free the slot, the run ending does.
        let permit = self
            .limits
            .try_acquire_run(account_id)
            .map_err(StartError::TooManyRuns)?;
        let invocation_id = new_id("inv");
        let session_key = (account_id.to_owned(), session_id.to_owned());
        let (stop_tx, stop_rx) = oneshot::channel();
        // One run per session. A run whose end is being written frees the session within
        // a commit: wait for it rather than refuse a client that read the end already.
        let deadline = tokio::time::Instant::now() + FINISHING_WAIT;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut active = self.active();
                if active.closed {
                    return Err(StartError::ShuttingDown);
                }
                let busy = active
                    .by_invocation
                    .values()
                    .find(|r| r.session_key == session_key);
                match busy {
                    None => {
                        let run = ActiveRun {
                            session_key,
                            run_id: run_id.clone(),
                            stop: Some(stop_tx),
                            finishing: false,
                            leased: false,
                            agent_ref: None,
                        };
                        active.by_invocation.insert(invocation_id.clone(), run);
                        break;
                    }
                    Some(run) if !run.finishing => {
                        return Err(StartError::SessionBusy(session_id.to_owned()))
                    }
                    Some(_) => {}
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(StartError::SessionBusy(session_id.to_owned()));
            }
        }
        // Across replicas: the store refuses a second live run in the session.
        let claim = Claim {
            account_id,
            session_id,
            run_id: &run_id,
            invocation_id: &invocation_id,
            owner: &self.owner,
            lease: self.lease,
            fresh: resume.is_none() && turn.session == SessionRef::New,
        };
        match self.store.claim(&claim).await {
            Ok(Claimed::Granted) => {
                if let Some(run) = self.active().by_invocation.get_mut(&invocation_id) {
                    run.leased = true;
                }
            }
            Ok(Claimed::Busy {
                invocation_id: other,
                ..
            }) => {
                tracing::info!(account_id, session_id, busy_invocation_id = %other, "session busy on another replica");
                self.forget(&invocation_id);
                return Err(StartError::SessionBusy(session_id.to_owned()));
            }
            Err(e) => {
                self.forget(&invocation_id);
                return Err(e.into());
            }
        }
        let started = self
            .record_start(
                account_id,
                session_id,
                &run_id,
                &invocation_id,
                &turn,
                resume,
            )
            .await;
        let (history, committed) = match started {
            Ok(v) => v,
            Err(e) => {
                self.forget(&invocation_id);
                return Err(e);
            }
        };
        let query = EventQuery {
            after_seq: committed.first().map_or(0, |e| e.seq - 1),
            invocation_id: Some(invocation_id.clone()),
            ..EventQuery::session(account_id, session_id)
        };
        let events = follow.start(query, &committed);
        let run = StartedRun {
            account_id: account_id.to_owned(),
            session_id: session_id.to_owned(),
            run_id,
            invocation_id,
            model: turn
                .model
                .clone()
                .unwrap_or_else(|| self.default_model.clone()),
        };
        tracing::info!(account_id, session_id, run_id = %run.run_id, invocation_id = %run.invocation_id, "run started");
        METRICS.run_started();
        tokio::spawn(
            self.clone()
                .supervise(run.clone(), history, turn, stop_rx, permit),
        );
        Ok((run, events))
    }

    /// Loads the history (a resume brings its own), then commits the new input,
    /// `in_progress`, and a checkpoint when the input carries tool results; returns the
    /// history and what was committed.
    async fn record_start(
        &self,
        account_id: &str,
        session_id: &str,
        run_id: &str,
        invocation_id: &str,
        turn: &TurnRequest,
        resume: Option<ResumeFrom>,
    ) -> Result<(History, Vec<Event>), StartError> {
        let mut metadata = json!({ "surface": turn.surface.as_str(), "stream": turn.stream });
        let history = match resume {
            Some(from) => {
                metadata[RESUMED_FROM] = json!(from.checkpoint_id);
                metadata["resume_attempt_id"] = json!(from.resume_attempt_id);
                History {
                    items: from.history,
                    events: Vec::new(),
                }
            }
            // A session Tether just named has no history to read.
            None if turn.session == SessionRef::New => History {
                items: Vec::new(),
                events: Vec::new(),
            },
            None => {
                // The projection needs only transcript events and compaction markers (and,
                // for stateful agents, run statuses, where their adapters keep the agent's
                // handles): a long session's deltas and teed traffic stay in the database.
                let keeps_handles = !self.upstream.protocol().sends_history();
                let query = EventQuery {
                    event_types: Some(
                        EventType::ALL
                            .into_iter()
                            .filter(|t| {
                                t.is_transcript()
                                    || *t == EventType::Compaction
                                    || (*t == EventType::RunStatus && keeps_handles)
                            })
                            .collect(),
                    ),
                    ..EventQuery::session(account_id, session_id)
                };
                let events = self.store.events(&query).await?;
                History {
                    items: project(&events),
                    events,
                }
            }
        };
        let mut batch: Vec<NewEvent> = turn
            .input
            .iter()
            .map(|item| {
                item.to_event(account_id, session_id)
                    .in_run(run_id, invocation_id)
            })
            .collect();
        let model = turn.model.as_deref().unwrap_or(&self.default_model);
        metadata["model"] = json!(model);
        batch.push(
            NewEvent::new(
                account_id,
                session_id,
                EventType::RunStatus,
                run_status_content(RunStatus::InProgress, None),
            )
            .in_run(run_id, invocation_id)
            .with_metadata(metadata),
        );
        // Tool results the client supplies (OpenAI-style tools run on the client) are tool
        // results within this run: the point before the model answers them is resumable.
        let results: Vec<String> = turn
            .input
            .iter()
            .filter_map(|item| match item {
                Item::ToolResult { call_id, .. } => Some(call_id.clone()),
                _ => None,
            })
            .collect();
        if !results.is_empty() {
            let ids = StartedRun {
                account_id: account_id.to_owned(),
                session_id: session_id.to_owned(),
                run_id: run_id.to_owned(),
                invocation_id: invocation_id.to_owned(),
                model: model.to_owned(),
            };
            batch.push(self.checkpoint_event(&ids, Phase::AfterToolResult, &results));
        }
        let committed = self.writer.append(batch).await?;
        // A store that checks the claim as it opens the invocation (SQLite) drops the
        // start's events when another live run holds the session after all.
        if !committed
            .iter()
            .any(|e| e.event_type == EventType::RunStatus)
        {
            return Err(StartError::SessionBusy(session_id.to_owned()));
        }
        Ok((history, committed))
    }

    /// The agent's handle for a run of this gateway, once the agent named it.
    pub fn agent_ref(&self, invocation_id: &str) -> Option<String> {
        self.active()
            .by_invocation
            .get(invocation_id)
            .and_then(|r| r.agent_ref.clone())
    }

    /// Remembers the agent's handle for a run, here and in the store (where clients of
    /// any replica find the run by it).
    async fn set_agent_ref(&self, run: &StartedRun, agent_ref: &str) {
        if let Some(r) = self.active().by_invocation.get_mut(&run.invocation_id) {
            r.agent_ref = Some(agent_ref.to_owned());
        }
        if let Err(error) = self
            .store
            .set_agent_ref(&run.account_id, &run.invocation_id, agent_ref)
            .await
        {
            tracing::warn!(%error, invocation_id = %run.invocation_id, "could not record the agent's handle for a run");
        }
    }

    fn forget(&self, invocation_id: &str) {
        self.active().by_invocation.remove(invocation_id);
        self.changed.notify_waiters();
    }

    fn mark_finishing(&self, invocation_id: &str) {
        if let Some(run) = self.active().by_invocation.get_mut(invocation_id) {
            run.finishing = true;
        }
    }

    /// Stops a running invocation of this gateway (idempotent). Returns whether it is
    /// running here. The run stays active until its end is committed.
    pub fn stop(&self, invocation_id: &str, why: Stop) -> bool {
        match self.active().by_invocation.get_mut(invocation_id) {
            Some(run) => {
                if let Some(stop) = run.stop.take() {
                    let _ = stop.send(why);
                }
                true
            }
            None => false,
        }
    }

    /// Stops a run of this gateway on another replica's request (a cancel that reached the
    /// wrong replica); ignores ids of other accounts.
    pub fn stop_for(&self, account_id: &str, invocation_id: &str, why: Stop) -> bool {
        let mine = self
            .active()
            .by_invocation
            .get(invocation_id)
            .is_some_and(|r| r.session_key.0 == account_id);
        mine && self.stop(invocation_id, why)
    }

    /// Renews the leases of this replica's runs every third of the lease, stops the runs
    /// whose lease was lost or whose cancel another replica requested, and closes open
    /// invocations nobody renews any more (their replica died) as `interrupted`. Runs
    /// until the process ends; must run on the core runtime.
    pub async fn keep_leases(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.lease / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.heartbeat().await;
            self.close_abandoned().await;
        }
    }

    async fn heartbeat(&self) {
        let ids: Vec<String> = self
            .active()
            .by_invocation
            .iter()
            .filter(|(_, r)| r.leased && !r.finishing)
            .map(|(id, _)| id.clone())
            .collect();
        if ids.is_empty() {
            return;
        }
        let renewed = match self.store.renew_leases(&self.owner, &ids, self.lease).await {
            Ok(r) => r,
            Err(error) => {
                // The runs go on: their events are queued for the writer, and the lease
                // is renewed at the next beat if the database is back by then.
                tracing::warn!(%error, runs = ids.len(), "could not renew run leases");
                return;
            }
        };
        for id in &ids {
            match renewed.iter().find(|r| &r.invocation_id == id) {
                Some(r) if r.cancel_requested => {
                    tracing::info!(invocation_id = %id, "cancel requested through another replica");
                    self.stop(id, Stop::Cancel);
                }
                Some(_) => {}
                // Closed under us (or finished between the listing and the update: then
                // the stop finds nothing to do).
                None => {
                    if self
                        .active()
                        .by_invocation
                        .get(id)
                        .is_some_and(|r| !r.finishing)
                    {
                        tracing::warn!(invocation_id = %id, "run lease lost; stopping the run");
                        self.stop(id, Stop::LeaseLost);
                    }
                }
            }
        }
    }

    async fn close_abandoned(&self) {
        match self.store.abandoned_invocations(None).await {
            Ok(open) => {
                // Ours are renewed by the heartbeat; one found here is being claimed or
                // finishing, never abandoned.
                let open: Vec<_> = {
                    let active = self.active();
                    open.into_iter()
                        .filter(|inv| !active.by_invocation.contains_key(&inv.invocation_id))
                        .collect()
                };
                if let Err(error) =
                    close_as_interrupted(&self.writer, &open, "run_owner_lost").await
                {
                    tracing::warn!(%error, "could not close abandoned runs");
                }
            }
            Err(error) => tracing::warn!(%error, "could not look for abandoned runs"),
        }
    }

    /// Waits until no run is active, or `timeout` passes; returns whether none is.
    async fn until_idle(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, async {
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if self.active_count() == 0 {
                    return;
                }
                changed.await;
            }
        })
        .await
        .is_ok()
    }

    /// Refuses new runs, waits up to `grace` for running ones to finish, then closes the
    /// rest as `interrupted` and waits until everything is committed.
    pub async fn drain(&self, grace: Duration) {
        self.active().closed = true;
        if !self.until_idle(grace).await {
            let ids: Vec<String> = self.active().by_invocation.keys().cloned().collect();
            tracing::warn!(
                runs = ids.len(),
                "closing runs still going at shutdown as interrupted"
            );
            for id in ids {
                self.stop(&id, Stop::Shutdown);
            }
            // Their supervisors write the terminal statuses.
            self.until_idle(Duration::from_secs(2)).await;
        }
        let _ = self.writer.flush().await;
    }

    async fn supervise(
        self: Arc<Self>,
        run: StartedRun,
        history: History,
        turn: TurnRequest,
        mut stop: oneshot::Receiver<Stop>,
        permit: policies::RunPermit,
    ) {
        // All a cancel needs of the turn, so the driver can own the rest of it.
        let cancel = self.upstream.cancel(&turn);
        let mut driver = tokio::spawn(drive(self.clone(), run.clone(), history, turn));
        // This future waits for as long as the run streams: the steps after the wait are
        // boxed, so it stays small (idle streams are counted in KiB each).
        let outcome = tokio::select! {
            joined = &mut driver => joined.unwrap_or_else(|e| Outcome::failed("internal_error", format!("the run task failed: {e}"))),
            Ok(why) = &mut stop => Box::pin(self.stop_driver(&run, cancel.as_ref(), why, &mut driver)).await,
        };
        Box::pin(self.record_end(&run, outcome)).await;
        self.forget(&run.invocation_id);
        drop(permit);
    }

    /// Stops a run's driver. A stateful agent is told to stop its own work first (A2A
    /// `tasks/cancel`) and gets a moment to end its stream, so its last words are
    /// recorded too.
    async fn stop_driver(
        &self,
        run: &StartedRun,
        cancel: Option<&Cancel>,
        why: Stop,
        driver: &mut tokio::task::JoinHandle<Outcome>,
    ) -> Outcome {
        let agent_ref = self.agent_ref(&run.invocation_id);
        let cancel = cancel.zip(agent_ref).map(|(cancel, r)| cancel(&r));
        let mut ended = false;
        if let (Stop::Cancel, Some(request)) = (why, cancel) {
            tracing::debug!(protocol = self.upstream.protocol().as_str(), invocation_id = %run.invocation_id, "telling the agent to cancel");
            let told = Box::pin(
                self.agent
                    .exchange(&request, &run.account_id, AGENT_ANSWER_CAP),
            );
            if let Ok(Err(e)) = tokio::time::timeout(CANCEL_GRACE, told).await {
                tracing::warn!(error = %e, invocation_id = %run.invocation_id, "the agent did not take the cancel");
            }
            ended = tokio::time::timeout(CANCEL_GRACE, &mut *driver)
                .await
                .is_ok();
        }
        if !ended {
            // Dropping the driver closes the agent connection; wait for it so none
            // of its events can land after the terminal status.
            driver.abort();
            let _ = (&mut *driver).await;
        }
        Outcome::stopped(why)
    }

    /// Writes how a run ended: its checkpoint, error and terminal status, in one batch.
    async fn record_end(&self, run: &StartedRun, outcome: Outcome) {
        let mut batch = Vec::with_capacity(3);
        if outcome.status == RunStatus::Completed {
            batch.push(self.checkpoint_event(run, Phase::TurnCompleted, &[]));
        }
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
        let mut metadata = serde_json::Map::new();
        if let Some(usage) = outcome.usage {
            metadata.insert("usage".into(), usage);
        }
        // Where the next turn's adapter finds the agent's handle for this run.
        if let Some(agent_ref) = self.agent_ref(&run.invocation_id) {
            metadata.insert("agent_ref".into(), json!(agent_ref));
        }
        let mut terminal = event(
            EventType::RunStatus,
            run_status_content(outcome.status, reason),
        );
        if !metadata.is_empty() {
            terminal = terminal.with_metadata(Value::Object(metadata));
        }
        batch.push(terminal);
        self.mark_finishing(&run.invocation_id);
        if let Err(e) = self.writer.append(batch).await {
            tracing::error!(error = %e, run_id = %run.run_id, "could not record the end of a run");
        }
        tracing::info!(
            account_id = %run.account_id, session_id = %run.session_id, run_id = %run.run_id,
            invocation_id = %run.invocation_id, status = outcome.status.as_str(), "run ended"
        );
        METRICS.run_ended(outcome.status);
    }
}

/// Appends an `interrupted` terminal status for each invocation (the store drops the ones
/// someone closed meanwhile, so racing replicas close each run once).
pub async fn close_as_interrupted(
    writer: &Writer,
    open: &[session_log::Invocation],
    reason: &str,
) -> Result<(), WriteError> {
    if open.is_empty() {
        return Ok(());
    }
    let batch: Vec<NewEvent> = open
        .iter()
        .map(|inv| {
            NewEvent::new(
                &inv.account_id,
                &inv.session_id,
                EventType::RunStatus,
                run_status_content(RunStatus::Interrupted, Some(reason)),
            )
            .in_run(&inv.run_id, &inv.invocation_id)
        })
        .collect();
    let closed = writer.append(batch).await?;
    for event in &closed {
        tracing::warn!(
            account_id = %event.account_id, session_id = %event.session_id,
            run_id = event.run_id.as_deref().unwrap_or_default(),
            invocation_id = event.invocation_id.as_deref().unwrap_or_default(),
            reason, "closed an abandoned run as interrupted"
        );
    }
    Ok(())
}

/// Calls the agent and records what it says. Returns how the run ended; the supervisor
/// writes that down.
async fn drive(runs: Arc<Runs>, run: StartedRun, history: History, turn: TurnRequest) -> Outcome {
    // The log holds upload URIs; the agent gets the content (it cannot read our store).
    let History { items, events } = history;
    // This future lives as long as the run streams, and is as large as its largest
    // state: the one-off steps (attachments, releasing the connection) are boxed.
    let (items, turn) = match Box::pin(crate::attachments::resolve_for_agent(
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
    // The history is not needed while the answer streams, which may take minutes.
    drop((items, events, turn));
    let (answer, mut parser) = match answer {
        Ok(v) => v,
        Err(outcome) => return outcome,
    };
    let mut recorder = Recorder {
        runs: &runs,
        run: &run,
        policy: runs.checkpoint_policy(),
        agent_ref: None,
        done: None,
        error: None,
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
            Ok(Some(bytes)) => recorder.record(parser.feed(&bytes)).await,
            Ok(None) => break,
            Err(e) => {
                broken = Some(e);
                break;
            }
        }
    }
    recorder.record(parser.finish()).await;
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
    let upstream = runs.upstream;
    let unreachable =
        |e: crate::agent::AgentError| Outcome::failed("agent_unreachable", e.to_string());
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
        Some(reason) => restore(runs, run, call, reason).await?,
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
        true => restore(runs, run, call, "agent_forgot").await?,
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
    let Some(plan) = runs.upstream.restore(call) else {
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
    tracing::info!(
        account_id = %run.account_id, session_id = %run.session_id, run_id = %run.run_id,
        reason, items = call.history.len(), "restored a session the agent had forgotten"
    );
    let note = NewEvent::new(
        &run.account_id,
        &run.session_id,
        EventType::SessionRestore,
        json!({
            "reason": reason,
            "protocol": runs.upstream.protocol().as_str(),
            "items": call.history.len(),
            "requests": plan.before.len(),
        }),
    )
    .in_run(&run.run_id, &run.invocation_id);
    if let Err(e) = runs.writer.submit(vec![note]).await {
        return Err(Outcome::failed("internal_error", e.to_string()));
    }
    Ok(Some(plan.request))
}

/// How much of an agent answer Tether reads when it only needs to judge it (a probe, a
/// restore, an error body).
const AGENT_ANSWER_CAP: usize = 256 * 1024;

/// How long a cancelled run's agent gets to take the cancel and end its stream.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// Turns parser outputs into events and queues them in order.
struct Recorder<'a> {
    runs: &'a Runs,
    run: &'a StartedRun,
    policy: CheckpointPolicy,
    agent_ref: Option<String>,
    done: Option<Option<Value>>,
    error: Option<(String, String)>,
}

/// A `run_checkpoint` event Tether records in `run`.
fn checkpoint_event(
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
    fn outcome(self, status: u16, broken: Option<crate::agent::AgentError>) -> Outcome {
        match (self.error, self.done, broken) {
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
        for output in outputs {
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
                Output::ItemWith(item, metadata) => batch.push(
                    item.to_event(&run.account_id, &run.session_id)
                        .in_run(&run.run_id, &run.invocation_id)
                        .with_metadata(metadata),
                ),
                Output::Frame(frame) => batch.push(event(EventType::AgentEvent, frame)),
                Output::AgentRef(agent_ref) => {
                    if self.agent_ref.as_deref() != Some(agent_ref.as_str()) {
                        self.runs.set_agent_ref(run, &agent_ref).await;
                        self.agent_ref = Some(agent_ref);
                    }
                }
                Output::Error { code, message } => {
                    self.error.get_or_insert((code, message));
                }
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
