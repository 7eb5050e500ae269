//! The run manager: starts runs, drives each one from a task of its own (never from the
//! client's connection), turns the agent's output into log events, and guarantees every
//! invocation ends with exactly one terminal `run_status`. Driving one run is in
//! `drive`, leases and the ends of runs nobody drives in `leases`, the agent connection
//! in `agent`, a run's attachments in `attachments`.

pub mod agent;
pub mod attachments;
pub mod compaction;
mod drive;
mod faults;
mod leases;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runtime_adapter::compaction::estimate_tokens;
use runtime_adapter::{
    project, Cancel, Item, RunInfo, SessionRef, TurnRequest, Upstream, AGENT_PARAMS, REQUEST_PARAMS,
};
use serde_json::{json, Value};
use session_log::branch::INPUT_SUPERSEDED;
use session_log::checkpoints::{CheckpointPolicy, Phase, RESUMED_FROM};
use session_log::event::run_status_content;
use session_log::{
    BeforeAppend, Claim, Claimed, Event, EventQuery, EventType, Lineage, NewEvent, RunStatus,
    Store, StoreError, Subscription, WriteError, Writer,
};
use tokio::sync::{oneshot, watch, Notify};
use tracing::Instrument;

use crate::ids::new_id;
use crate::metrics::METRICS;
use crate::telemetry::spans;
use agent::Agent;
use compaction::{CompactError, Compactor};
use drive::{checkpoint_event, drive, AGENT_ANSWER_CAP};
pub use leases::close_as_interrupted;

/// Why a run could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("session {0:?} already has a run in progress")]
    SessionBusy(String),
    /// Archived sessions are read-only until unarchived.
    #[error(
        "session {0:?} is archived (read-only); unarchive it (UnarchiveSession) to continue it"
    )]
    Archived(String),
    #[error("the gateway is shutting down")]
    ShuttingDown,
    /// The account is at its concurrent-run cap.
    #[error("{0}")]
    TooManyRuns(policies::Limited),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The store cannot write now (see `session_log::health`).
    #[error(transparent)]
    Unwritable(#[from] session_log::Unwritable),
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
    /// The store could not write for longer than `session_log::health::OUTAGE_GRACE`:
    /// `failed`, recorded once the store is back.
    StoreOutage,
}

/// `in_progress` metadata: the run's system and developer messages (`role`, `content`),
/// taken out of its input; what the agent was told, never part of the history.
pub const SYSTEM: &str = "system";

/// `in_progress` metadata: SHA-256 (hex) of the request body that came with an
/// `Idempotency-Key`.
pub const REQUEST_DIGEST: &str = "request_sha256";

/// A run that has been started: its input and `in_progress` are committed.
#[derive(Clone, Debug)]
pub struct StartedRun {
    pub account_id: String,
    pub session_id: String,
    pub run_id: String,
    pub invocation_id: String,
    pub model: String,
    /// Becomes `true` once the agent has accepted the turn (a 2xx answer's head): a client
    /// stream waits for it before its own head, so that a run the agent never answered is
    /// refused with a plain error status, as without streaming.
    pub answered: Arc<watch::Sender<bool>>,
    /// When its `in_progress` was committed: the `created` every rendering of the run
    /// shows, live or read back, whatever the commit took.
    pub started_at: chrono::DateTime<chrono::Utc>,
}

impl StartedRun {
    /// What a renderer needs to know of the run, as it starts; `client` is what the
    /// client's request asked to see echoed.
    pub fn info(&self, client: Value) -> RunInfo {
        RunInfo {
            run_id: self.run_id.clone(),
            session_id: self.session_id.clone(),
            model: self.model.clone(),
            created_at: self.started_at.timestamp(),
            client,
        }
    }
}

/// When the invocation's `in_progress` was committed, among `events`: the `created` every
/// rendering of its run shows, live or read back (an invocation's own start time may be
/// its claim's, taken before the commit).
pub fn started_at(events: &[Event], invocation_id: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    events
        .iter()
        .find(|e| {
            e.run_status() == Some(RunStatus::InProgress)
                && e.invocation_id.as_deref() == Some(invocation_id)
        })
        .map(|e| e.created_at)
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
    /// When this replica last regained the store, for the lease sweeper's wait (see
    /// [`leases`]).
    contact: Mutex<leases::StoreContact>,
    /// Compacts histories: when a turn's would exceed its threshold, and on request.
    compactor: Compactor,
    /// How long a request a run ends waiting on stays pending before the timeout sweeper
    /// resolves it (`[approvals] timeout_seconds`); `None`: until a person resolves it.
    approval_timeout: Mutex<Option<Duration>>,
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

/// What a run's start is given: who starts it where, the turn, and what the caller knows
/// already. The caller boxes it once: the start's futures, moved as they are spawned and
/// awaited, then carry a pointer to it rather than its fields.
pub struct Start {
    pub account_id: String,
    pub session_id: String,
    /// The run's id, chosen by the caller (so that an idempotency key can name it before
    /// it exists); a resume's is the run it resumes.
    pub run_id: String,
    pub turn: TurnRequest,
    /// The client's view of the session, opened before the start: it comes back as the
    /// subscription of the run's events from its first one, which reads nothing from the
    /// store to get there.
    pub follow: BeforeAppend,
    /// The session as the caller read it.
    pub seen: Seen,
    /// What a resume adds; `None` for a start.
    pub resume: Option<ResumeFrom>,
}

impl Start {
    /// A new invocation of the run `from` names, from its checkpoint.
    pub fn resume(
        account_id: &str,
        session_id: &str,
        turn: TurnRequest,
        from: ResumeFrom,
        follow: BeforeAppend,
    ) -> Box<Self> {
        Box::new(Start {
            account_id: account_id.to_owned(),
            session_id: session_id.to_owned(),
            run_id: from.run_id.clone(),
            turn,
            follow,
            seen: Seen::Unread,
            resume: Some(from),
        })
    }
}

/// The session a run starts in, as the caller found it before the start: a turn reads
/// the session's row once, and the start takes its archived mark and fork point from it.
#[derive(Clone, Debug)]
pub enum Seen {
    /// Not read: the start reads the archived mark, and the row for the history.
    Unread,
    /// Read just before the start, its deleted mark checked by the caller: `None` when
    /// the account had no such session (its history is then looked up again after the
    /// claim). The history itself is always read after the claim.
    Read(Option<Box<session_log::Session>>),
}

/// A live run's key in the registry: (account_id, invocation_id). Every lookup names the
/// account, so an id that another account also holds (an imported copy) never reaches
/// this account's run.
type RunKey = (String, String);

fn key(account_id: &str, invocation_id: &str) -> RunKey {
    (account_id.to_owned(), invocation_id.to_owned())
}

#[derive(Default)]
struct Active {
    by_run: HashMap<RunKey, ActiveRun>,
    closed: bool,
}

/// How a run ended, before it is written down.
struct Outcome {
    status: RunStatus,
    error: Option<(String, String)>,
    usage: Option<Value>,
    /// Whether the agent produced anything (text, reasoning, an item) before the end.
    produced: bool,
    /// What the agent said it used for its answer (`Output::Answered`).
    agent_params: Option<Value>,
    /// What a `requires_action` run waits for (see `runtime_adapter::approval`).
    action: Option<Value>,
}

/// A run's driver task ended without an outcome: it panicked (logged and counted in
/// `tether_panics_total`) or was aborted. The run is closed `failed`; the panic's message
/// goes to the log, not to the client.
fn crashed(run: &StartedRun, e: tokio::task::JoinError) -> Outcome {
    if e.is_panic() {
        METRICS.panicked();
        let panic = e.into_panic();
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        tracing::error!(account_id = %run.account_id, session_id = %run.session_id, run_id = %run.run_id, invocation_id = %run.invocation_id, panic = %message, "a run panicked; closed as failed");
        Outcome::failed("internal_error", "the run failed inside the gateway")
    } else {
        Outcome::failed("internal_error", format!("the run task failed: {e}"))
    }
}

impl Outcome {
    fn completed(usage: Option<Value>) -> Self {
        Outcome {
            status: RunStatus::Completed,
            error: None,
            usage,
            produced: true,
            agent_params: None,
            action: None,
        }
    }

    fn failed(code: &str, message: impl Into<String>) -> Self {
        Outcome {
            status: RunStatus::Failed,
            error: Some((code.to_owned(), message.into())),
            usage: None,
            produced: false,
            agent_params: None,
            action: None,
        }
    }

    fn stopped(stop: Stop) -> Self {
        match stop {
            Stop::Cancel => Outcome {
                status: RunStatus::Cancelled,
                error: None,
                usage: None,
                produced: true,
                agent_params: None,
                action: None,
            },
            Stop::Shutdown => Outcome {
                status: RunStatus::Interrupted,
                error: Some((
                    "gateway_shutdown".into(),
                    "the gateway shut down during the run".into(),
                )),
                usage: None,
                produced: true,
                agent_params: None,
                action: None,
            },
            Stop::StoreOutage => Outcome {
                status: RunStatus::Failed,
                error: Some((
                    "session_store_unavailable".into(),
                    "the session store could not write; the run was stopped".into(),
                )),
                usage: None,
                produced: true,
                agent_params: None,
                action: None,
            },
            Stop::LeaseLost => Outcome {
                status: RunStatus::Interrupted,
                error: Some((
                    "run_lease_lost".into(),
                    "the gateway lost its lease on the run".into(),
                )),
                usage: None,
                produced: true,
                agent_params: None,
                action: None,
            },
        }
    }
}

/// What the agent is told of the session's past: the projection, and the events it came
/// from (where adapters find what they recorded earlier).
#[derive(Default)]
pub struct History {
    pub items: Vec<Item>,
    pub events: Vec<Event>,
    /// The events of a compaction made for this turn, still to commit.
    compaction: Option<[NewEvent; 2]>,
}

/// How long a new run waits for the session's previous run to finish committing its end.
const FINISHING_WAIT: Duration = Duration::from_secs(10);

/// How long a cancelled run's agent gets to take the cancel and end its stream.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

impl Runs {
    #[allow(clippy::too_many_arguments)] // the run manager's collaborators, each built once in main
    pub fn new(
        store: Arc<dyn Store>,
        writer: Writer,
        agent: Arc<Agent>,
        upstream: &'static dyn Upstream,
        default_model: String,
        limits: Arc<policies::RateLimits>,
        ownership: Ownership,
        compactor: Compactor,
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
            contact: Mutex::new(leases::StoreContact::new()),
            compactor,
            approval_timeout: Mutex::new(None),
        })
    }

    /// Who compacts this gateway's sessions.
    pub fn compactor(&self) -> &Compactor {
        &self.compactor
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

    /// Sets when requests that runs end waiting on time out (`None`: never).
    pub fn set_approval_timeout(&self, timeout: Option<Duration>) {
        *self
            .approval_timeout
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = timeout;
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
            .by_run
            .iter()
            .find(|(_, r)| r.session_key.0 == account_id && r.session_key.1 == session_id)
            .map(|((_, inv), r)| (r.run_id.clone(), inv.clone()))
    }

    /// Whether a run of the session is running on this gateway, not counting one whose
    /// end is being written (its client may have its answer already).
    pub fn running_in_session(&self, account_id: &str, session_id: &str) -> bool {
        self.active()
            .by_run
            .values()
            .any(|r| !r.finishing && r.session_key.0 == account_id && r.session_key.1 == session_id)
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
        self.active().by_run.len()
    }

    /// Starts a run: records the turn's input and `in_progress`, then drives the agent
    /// from a task of its own. Must be called on the core runtime. A resume (`start.resume`)
    /// starts a new invocation of an existing run from a checkpoint: the agent gets the
    /// history cut there plus the turn's input (the resume instruction), and the
    /// invocation's `in_progress` names the checkpoint.
    pub async fn start(
        self: &Arc<Self>,
        mut start: Box<Start>,
    ) -> Result<(StartedRun, Subscription), StartError> {
        let resume = start.resume.take();
        let seen = std::mem::replace(&mut start.seen, Seen::Unread);
        let (account_id, session_id) = (start.account_id.as_str(), start.session_id.as_str());
        let run_id = start.run_id.as_str();
        let turn = &start.turn;
        self.writer.health().writable()?;
        // Taken before anything is written, and held by the supervisor until the run's end
        // is committed: a client that leaves does not free the slot, the run ending does.
        let permit = self
            .limits
            .try_acquire_run(account_id)
            .map_err(StartError::TooManyRuns)?;
        let invocation_id = new_id("inv");
        let trace = spans::run(spans::Run {
            account_id,
            session_id,
            run_id,
            invocation_id: &invocation_id,
            model: turn.model.as_deref().unwrap_or(&self.default_model),
            a2a_method: turn
                .extra
                .get("client")
                .and_then(|c| c.get("method"))
                .and_then(Value::as_str),
        });
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
                    .by_run
                    .values()
                    .find(|r| r.session_key == session_key);
                match busy {
                    None => {
                        let run = ActiveRun {
                            session_key,
                            run_id: run_id.to_owned(),
                            stop: Some(stop_tx),
                            finishing: false,
                            leased: false,
                            agent_ref: None,
                        };
                        active.by_run.insert(key(account_id, &invocation_id), run);
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
            run_id,
            invocation_id: &invocation_id,
            owner: &self.owner,
            lease: self.lease,
            fresh: resume.is_none() && turn.session == SessionRef::New,
        };
        // An archived session takes no run: checked before the claim writes anything.
        // A session Tether just named cannot be archived; a row the caller read says.
        if !claim.fresh {
            let archived = match &seen {
                Seen::Read(session) => Ok(session.as_ref().and_then(|s| s.archived_at)),
                Seen::Unread => self.store.archived_at(account_id, session_id).await,
            };
            match archived {
                Ok(None) => {}
                Ok(Some(_)) => {
                    self.forget(account_id, &invocation_id);
                    return Err(StartError::Archived(session_id.to_owned()));
                }
                Err(e) => {
                    self.forget(account_id, &invocation_id);
                    return Err(e.into());
                }
            }
        }
        match self.store.claim(&claim).await {
            Ok(Claimed::Granted) => {
                if let Some(run) = self
                    .active()
                    .by_run
                    .get_mut(&key(account_id, &invocation_id))
                {
                    run.leased = true;
                }
            }
            Ok(Claimed::Busy {
                invocation_id: other,
                ..
            }) => {
                tracing::info!(account_id, session_id, busy_invocation_id = %other, "session busy on another replica");
                self.forget(account_id, &invocation_id);
                return Err(StartError::SessionBusy(session_id.to_owned()));
            }
            Err(e) => {
                self.forget(account_id, &invocation_id);
                return Err(e.into());
            }
        }
        let started = self
            .record_start(&start, &invocation_id, resume, seen)
            .instrument(trace.clone())
            .await;
        let (history, committed) = match started {
            Ok(v) => v,
            Err(e) => {
                self.forget(account_id, &invocation_id);
                return Err(e);
            }
        };
        self.settle_requests(account_id, session_id, &history.events)
            .await;
        let query = EventQuery {
            after_seq: committed.first().map_or(0, |e| e.seq - 1),
            invocation_id: Some(invocation_id.clone()),
            ..EventQuery::session(account_id, session_id)
        };
        let started_at = started_at(&committed, &invocation_id).unwrap_or_else(chrono::Utc::now);
        let model = turn
            .model
            .clone()
            .unwrap_or_else(|| self.default_model.clone());
        tracing::info!(account_id, session_id, run_id, %invocation_id, "run started");
        let Start {
            account_id,
            session_id,
            run_id,
            turn,
            follow,
            ..
        } = *start;
        let events = follow.start(query, &committed);
        let run = StartedRun {
            account_id,
            session_id,
            run_id,
            invocation_id,
            model,
            answered: Arc::new(watch::Sender::new(false)),
            started_at,
        };
        METRICS.run_started();
        tokio::spawn(
            self.clone()
                .supervise(run.clone(), history, turn, stop_rx, permit)
                .instrument(trace),
        );
        Ok((run, events))
    }

    /// Loads the history (a resume brings its own), then commits the new input,
    /// `in_progress`, and a checkpoint when the input carries tool results; returns the
    /// history and what was committed.
    async fn record_start(
        &self,
        start: &Start,
        invocation_id: &str,
        resume: Option<ResumeFrom>,
        seen: Seen,
    ) -> Result<(History, Vec<Event>), StartError> {
        let (account_id, session_id) = (start.account_id.as_str(), start.session_id.as_str());
        let (run_id, turn) = (start.run_id.as_str(), &start.turn);
        let mut metadata = json!({ "surface": turn.surface.as_str(), "stream": turn.stream });
        let mut history = match resume {
            Some(from) => {
                metadata[RESUMED_FROM] = json!(from.checkpoint_id);
                metadata["resume_attempt_id"] = json!(from.resume_attempt_id);
                History {
                    items: from.history,
                    ..History::default()
                }
            }
            // A session Tether just named has no history to read.
            None if turn.session == SessionRef::New => History::default(),
            // Boxed: a named session's history (its lineage, a compaction) is the largest
            // state of a start, which a new session's start would otherwise carry too.
            None => Box::pin(self.history(account_id, session_id, turn, seen)).await?,
        };
        // A compaction made for this turn is committed with its start, before it.
        let mut batch: Vec<NewEvent> = history.compaction.take().into_iter().flatten().collect();
        batch.extend(turn.input.iter().map(|item| {
            item.to_event(account_id, session_id)
                .in_run(run_id, invocation_id)
        }));
        let model = turn.model.as_deref().unwrap_or(&self.default_model);
        metadata["model"] = json!(model);
        // What the agent was told besides the history (system and developer messages,
        // `instructions`): run parameters, recorded here and never as history.
        if !turn.system.is_empty() {
            let told: Vec<Value> = turn
                .system
                .iter()
                .filter_map(|item| match item {
                    Item::Message { role, .. } => {
                        Some(json!({ "role": role, "content": item.text() }))
                    }
                    _ => None,
                })
                .collect();
            metadata[SYSTEM] = json!(told);
        }
        if let Some(instructions) = &turn.instructions {
            metadata["instructions"] = json!(instructions);
        }
        if !turn.echo.is_empty() {
            metadata[REQUEST_PARAMS] = Value::Object(turn.echo.clone());
        }
        if let Some(digest) = &turn.request_digest {
            metadata[REQUEST_DIGEST] = json!(digest);
        }
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
                answered: Arc::new(watch::Sender::new(false)),
                started_at: chrono::Utc::now(),
            };
            batch.push(self.checkpoint_event(&ids, Phase::AfterToolResult, &results));
        }
        let commit = spans::commit("run_start", batch.len());
        let append = self.writer.append(batch).instrument(commit);
        // An outage that starts meanwhile would hold the client until it ends. Its start
        // stays queued and is committed when the store is back; with no driver, it is
        // closed as abandoned once its lease runs out.
        let health = self.writer.health().clone();
        let committed = tokio::select! {
            committed = append => committed?,
            () = health.outage_lasting(session_log::health::OUTAGE_GRACE) => {
                let fault = health.outage().map_or(session_log::Fault::Unreachable, |o| o.fault);
                return Err(session_log::Unwritable::Outage(fault).into());
            }
        };
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

    /// What the agent is told of a session's past before `turn`: its history (a fork's
    /// inherited part, the active branch, a compaction's summary and tail) and the
    /// projection of it. Empty for a session that does not exist yet. A history that,
    /// with the turn's input, would exceed the turn's `compact_threshold` or
    /// `[compaction] trigger_tokens` is compacted first; a compaction that fails leaves the
    /// history whole (and says why in the log).
    async fn history(
        &self,
        account_id: &str,
        session_id: &str,
        turn: &TurnRequest,
        seen: Seen,
    ) -> Result<History, StoreError> {
        let store = &*self.store;
        // A session the caller found absent is read again: another request naming the
        // same new id may have created it since, and its history is this turn's too.
        let lineage = match seen {
            Seen::Read(Some(session)) => Lineage::of(store, *session).await?,
            Seen::Read(None) | Seen::Unread => {
                Lineage::resolve(store, account_id, session_id).await?
            }
        };
        let Some(lineage) = lineage else {
            return Ok(History::default());
        };
        let mut history = lineage.history(store, None).await?;
        let mut items = project(&history);
        let mut compaction = None;
        let (threshold, reason) = match turn.compact_threshold {
            Some(n) => (Some(n), "compact_threshold"),
            None => (self.compactor.trigger_tokens, "trigger_tokens"),
        };
        let estimated = estimate_tokens(&items) + estimate_tokens(&turn.input);
        if let Some(threshold) = threshold.filter(|t| estimated > *t) {
            let model = turn.model.as_deref().unwrap_or(&self.default_model);
            let boundary = serde_json::Map::from_iter([
                ("reason".to_owned(), json!(reason)),
                ("threshold".to_owned(), json!(threshold)),
                ("estimated_tokens".to_owned(), json!(estimated)),
            ]);
            let compacted = self
                .compactor
                .compact(
                    &lineage,
                    &history,
                    self.compactor.keep_last_turns,
                    None,
                    model,
                    boundary,
                )
                .await;
            match compacted {
                Ok(c) => {
                    tracing::info!(
                        account_id,
                        session_id,
                        reason,
                        threshold,
                        estimated_tokens = estimated,
                        seq_start = c.checkpoint.seq_start,
                        seq_end = c.checkpoint.seq_end,
                        "compacted the session's history before the turn"
                    );
                    history = c.history;
                    items = project(&history);
                    compaction = Some(c.events);
                }
                Err(CompactError::NothingToCompact(_)) => {
                    tracing::debug!(
                        account_id,
                        session_id,
                        reason,
                        threshold,
                        estimated_tokens = estimated,
                        "over the compaction threshold, but only the turns to keep are left"
                    );
                }
                Err(error) => {
                    tracing::error!(
                        account_id, session_id, reason, threshold, estimated_tokens = estimated,
                        %error, "compaction failed; the turn goes on with the whole history"
                    );
                }
            }
        }
        Ok(History {
            items,
            events: history.events,
            compaction,
        })
    }

    /// The adapter for the agent's protocol (as its card, last read, says it speaks it).
    pub fn upstream(&self) -> &'static dyn Upstream {
        self.agent.adapter(self.upstream)
    }

    /// The agent's handle for a run of this gateway, once the agent named it.
    pub fn agent_ref(&self, account_id: &str, invocation_id: &str) -> Option<String> {
        self.active()
            .by_run
            .get(&key(account_id, invocation_id))
            .and_then(|r| r.agent_ref.clone())
    }

    /// Whether an invocation with this id is live on this gateway in any account (an
    /// import must not adopt it).
    pub fn is_live_anywhere(&self, invocation_id: &str) -> bool {
        self.active()
            .by_run
            .keys()
            .any(|(_, id)| id == invocation_id)
    }

    /// Remembers the agent's handle for a run, here and in the store (where clients of
    /// any replica find the run by it).
    async fn set_agent_ref(&self, run: &StartedRun, agent_ref: &str) {
        if let Some(r) = self
            .active()
            .by_run
            .get_mut(&key(&run.account_id, &run.invocation_id))
        {
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

    fn forget(&self, account_id: &str, invocation_id: &str) {
        self.active().by_run.remove(&key(account_id, invocation_id));
        self.changed.notify_waiters();
    }

    fn mark_finishing(&self, account_id: &str, invocation_id: &str) {
        if let Some(run) = self
            .active()
            .by_run
            .get_mut(&key(account_id, invocation_id))
        {
            run.finishing = true;
        }
    }

    /// Stops a running invocation of the account on this gateway (idempotent), for a
    /// client, another replica or the gateway itself. Returns whether it is running here.
    /// The run stays active until its end is committed.
    pub fn stop(&self, account_id: &str, invocation_id: &str, why: Stop) -> bool {
        match self
            .active()
            .by_run
            .get_mut(&key(account_id, invocation_id))
        {
            Some(run) => {
                if let Some(stop) = run.stop.take() {
                    let _ = stop.send(why);
                }
                true
            }
            None => false,
        }
    }

    /// Drives a run on a task of its own and writes down how it ended. The driver's task
    /// is the run's crash boundary: a panic in the adapter, a parser or anything else it
    /// runs ends that task only, and the run is closed `failed` here (see `crashed`), once.
    async fn supervise(
        self: Arc<Self>,
        run: StartedRun,
        history: History,
        turn: TurnRequest,
        mut stop: oneshot::Receiver<Stop>,
        permit: policies::RunPermit,
    ) {
        // All a cancel needs of the turn, so the driver can own the rest of it.
        let cancel = self.upstream().cancel(&turn);
        let mut driver =
            tokio::spawn(drive(self.clone(), run.clone(), history, turn).in_current_span());
        // This future waits for as long as the run streams: the steps after the wait are
        // boxed, so it stays small (idle streams are counted in KiB each).
        // A store that cannot write holds every event the run makes: past the grace the
        // run stops, and its end is recorded when the store is back.
        let health = self.writer.health().clone();
        let outage = health.outage_lasting(session_log::health::OUTAGE_GRACE);
        let outcome = tokio::select! {
            joined = &mut driver => joined.unwrap_or_else(|e| crashed(&run, e)),
            Ok(why) = &mut stop => Box::pin(self.stop_driver(&run, cancel.as_ref(), why, &mut driver)).await,
            () = outage => Box::pin(self.stop_driver(&run, cancel.as_ref(), Stop::StoreOutage, &mut driver)).await,
        };
        // Pending before the run's end is written: whoever sees the end (the client's
        // answer) finds the request listed.
        if let Some(action) = outcome.action.clone() {
            Box::pin(self.record_request(&run, action)).await;
        }
        Box::pin(self.record_end(&run, outcome)).await;
        self.forget(&run.account_id, &run.invocation_id);
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
        let agent_ref = self.agent_ref(&run.account_id, &run.invocation_id);
        let cancel = cancel.zip(agent_ref).map(|(cancel, r)| cancel(&r));
        let mut ended = false;
        if let (Stop::Cancel, Some(request)) = (why, cancel) {
            tracing::debug!(protocol = self.upstream().protocol().as_str(), invocation_id = %run.invocation_id, "telling the agent to cancel");
            let told = Box::pin(
                self.agent
                    .exchange(&request, &run.account_id, AGENT_ANSWER_CAP),
            );
            if let Ok(Err(e)) = tokio::time::timeout(CANCEL_GRACE, told).await {
                tracing::warn!(error = %e, invocation_id = %run.invocation_id, "the agent did not take the cancel");
            }
            ended = match tokio::time::timeout(CANCEL_GRACE, &mut *driver).await {
                Ok(Err(e)) => {
                    crashed(run, e);
                    true
                }
                Ok(Ok(_)) => true,
                Err(_) => false,
            };
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
        if outcome.status.is_answered() {
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
        spans::run_ended(
            &tracing::Span::current(),
            outcome.status,
            reason,
            outcome.usage.as_ref(),
        );
        let mut metadata = serde_json::Map::new();
        if let Some(usage) = outcome.usage {
            metadata.insert("usage".into(), usage);
        }
        if let Some(params) = outcome.agent_params {
            metadata.insert(AGENT_PARAMS.into(), params);
        }
        // A run that failed before the agent produced anything leaves its input in the
        // log but out of later histories (see `session_log::branch`): a client's retry
        // after an outage does not stack copies of it.
        if outcome.status == RunStatus::Failed && !outcome.produced {
            metadata.insert(INPUT_SUPERSEDED.into(), json!(true));
        }
        // Where the next turn's adapter finds the agent's handle for this run.
        if let Some(agent_ref) = self.agent_ref(&run.account_id, &run.invocation_id) {
            metadata.insert("agent_ref".into(), json!(agent_ref));
        }
        let mut content = run_status_content(outcome.status, reason);
        if let Some(action) = &outcome.action {
            content["action"] = action.clone();
        }
        let mut terminal = event(EventType::RunStatus, content);
        if !metadata.is_empty() {
            terminal = terminal.with_metadata(Value::Object(metadata));
        }
        batch.push(terminal);
        self.mark_finishing(&run.account_id, &run.invocation_id);
        let commit = spans::commit("run_end", batch.len());
        if let Err(e) = self.writer.append(batch).instrument(commit).await {
            tracing::error!(error = %e, run_id = %run.run_id, "could not record the end of a run");
        }
        tracing::info!(
            account_id = %run.account_id, session_id = %run.session_id, run_id = %run.run_id,
            invocation_id = %run.invocation_id, status = outcome.status.as_str(), "run ended"
        );
        METRICS.run_ended(outcome.status);
    }

    /// A run starting after one that ended waiting (`requires_action`) goes on without
    /// that request's answer through Tether (an answer's own run is started after its
    /// request is resolved): the request is no longer pending, and no timeout answers it.
    async fn settle_requests(&self, account_id: &str, session_id: &str, history: &[Event]) {
        let last = history.iter().rev().find_map(Event::run_status);
        if last != Some(RunStatus::RequiresAction) {
            return;
        }
        match self
            .store
            .drop_pending_approvals(account_id, session_id)
            .await
        {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(
                    account_id,
                    session_id,
                    dropped = n,
                    "the session went on: its pending approvals are dropped"
                )
            }
            Err(error) => {
                tracing::warn!(%error, account_id, session_id, "could not drop a session's pending approvals")
            }
        }
    }

    /// Records the request a run ended waiting on as a pending approval (beside its
    /// `requires_action` status in the log), when it times out if `[approvals]` says so.
    /// A store that cannot take it now gets it again a few times: the run's status is in
    /// the log already, and without the row nobody finds the request to answer it.
    async fn record_request(&self, run: &StartedRun, action: Value) {
        let now = chrono::Utc::now();
        let timeout = *self
            .approval_timeout
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let approval = session_log::Approval {
            account_id: run.account_id.clone(),
            session_id: run.session_id.clone(),
            request_id: action["request_id"].as_str().unwrap_or_default().to_owned(),
            run_id: run.run_id.clone(),
            invocation_id: run.invocation_id.clone(),
            agent_id: Some(run.model.clone()),
            kind: action["kind"].as_str().unwrap_or("approval").to_owned(),
            action,
            requested_at: now,
            expires_at: timeout.and_then(|t| chrono::Duration::from_std(t).ok().map(|t| now + t)),
            decision: None,
            resolution: None,
            resolved_at: None,
        };
        for attempt in 1..=5u32 {
            match self.store.put_approval(&approval).await {
                Ok(()) => {
                    tracing::info!(account_id = %run.account_id, session_id = %run.session_id, run_id = %run.run_id, request_id = %approval.request_id, kind = %approval.kind, "run waits for an approval");
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, attempt, request_id = %approval.request_id, "could not record a pending approval");
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                }
            }
        }
    }
}
