//! The run manager: starts runs, drives each one from a task of its own (never from the
//! client's connection), turns the agent's output into log events, and guarantees every
//! invocation ends with exactly one terminal `run_status`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runtime_adapter::{project, Item, Output, TurnRequest, Upstream};
use serde_json::{json, Value};
use session_log::checkpoints::{checkpoint_content, CheckpointPolicy, Phase, RESUMED_FROM};
use session_log::event::run_status_content;
use session_log::{
    Claim, Claimed, EventQuery, EventType, NewEvent, RunStatus, Seq, Store, StoreError, WriteError,
    Writer,
};
use tokio::sync::{oneshot, Notify};

use crate::agent::Agent;
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
    /// Seq of the first event of this invocation.
    pub first_seq: Seq,
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

/// How long a new run waits for the session's previous run to finish committing its end.
const FINISHING_WAIT: Duration = Duration::from_secs(10);

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
    pub async fn start(
        self: &Arc<Self>,
        account_id: &str,
        session_id: &str,
        turn: TurnRequest,
    ) -> Result<StartedRun, StartError> {
        self.launch(account_id, session_id, turn, None).await
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
    ) -> Result<StartedRun, StartError> {
        self.launch(account_id, session_id, turn, Some(from)).await
    }

    async fn launch(
        self: &Arc<Self>,
        account_id: &str,
        session_id: &str,
        turn: TurnRequest,
        resume: Option<ResumeFrom>,
    ) -> Result<StartedRun, StartError> {
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
        METRICS.run_started();
        tokio::spawn(
            self.clone()
                .supervise(run.clone(), history, turn, stop_rx, permit),
        );
        Ok(run)
    }

    /// Loads the history (a resume brings its own), then commits the new input,
    /// `in_progress`, and a checkpoint when the input carries tool results.
    async fn record_start(
        &self,
        account_id: &str,
        session_id: &str,
        run_id: &str,
        invocation_id: &str,
        turn: &TurnRequest,
        resume: Option<ResumeFrom>,
    ) -> Result<(Vec<Item>, Seq), StartError> {
        let mut metadata = json!({ "surface": turn.surface.as_str(), "stream": turn.stream });
        let history = match resume {
            Some(from) => {
                metadata[RESUMED_FROM] = json!(from.checkpoint_id);
                metadata["resume_attempt_id"] = json!(from.resume_attempt_id);
                from.history
            }
            None => {
                // The projection needs only transcript events and compaction markers: a
                // long session's deltas and teed traffic stay in the database.
                let query = EventQuery {
                    event_types: Some(
                        EventType::ALL
                            .into_iter()
                            .filter(|t| t.is_transcript() || *t == EventType::Compaction)
                            .collect(),
                    ),
                    ..EventQuery::session(account_id, session_id)
                };
                project(&self.store.events(&query).await?)
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
                first_seq: 0,
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
        let first_seq = committed.first().map(|e| e.seq).unwrap_or_default();
        Ok((history.into_iter().collect(), first_seq))
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
        history: Vec<Item>,
        turn: TurnRequest,
        mut stop: oneshot::Receiver<Stop>,
        permit: policies::RunPermit,
    ) {
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
        let mut batch = Vec::with_capacity(3);
        if outcome.status == RunStatus::Completed {
            batch.push(self.checkpoint_event(&run, Phase::TurnCompleted, &[]));
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
        let mut terminal = event(
            EventType::RunStatus,
            run_status_content(outcome.status, reason),
        );
        if let Some(usage) = outcome.usage {
            terminal = terminal.with_metadata(json!({ "usage": usage }));
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
        self.forget(&run.invocation_id);
        drop(permit);
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
async fn drive(runs: Arc<Runs>, run: StartedRun, history: Vec<Item>, turn: TurnRequest) -> Outcome {
    let upstream = runs.upstream;
    // The log holds upload URIs; the agent gets the content (it cannot read our store).
    let (history, turn) =
        match crate::attachments::resolve_for_agent(&*runs.store, &run.account_id, history, turn)
            .await
        {
            Ok(v) => v,
            Err(e) => return Outcome::failed("attachment_unavailable", e),
        };
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
        backend: runs.store.backend(),
        policy: runs.checkpoint_policy(),
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
    backend: &'static str,
    policy: CheckpointPolicy,
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
                    self.backend,
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
            if let Err(e) = self.writer.submit(batch).await {
                self.error
                    .get_or_insert(("internal_error".into(), e.to_string()));
            }
        }
    }
}
