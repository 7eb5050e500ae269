//! A run as its client sees it. `run_turn` starts a client's turn (its session
//! resolved, its attachments stored, its run started on the core runtime) and answers
//! from the run's committed events, as a stream or as the whole response; the rest reads
//! a run back from the log for a surface's retrieve, cancel and subscribe.

use std::time::Duration;

use pingora::proxy::Session;
use pingora::Result;
use runtime_adapter::reconcile::{carries_history, reconcile, split_instructions, Reconciled};
use runtime_adapter::{Item, RunInfo, SessionRef, Surface, TurnRequest};
use serde_json::Value;
use session_log::branch::INPUT_SUPERSEDED;
use session_log::checkpoints::Phase;
use session_log::history::ForkError;
use session_log::{
    Event, EventQuery, EventType, ForkPoint, Invocation, Lineage, RunStatus, Seq, StoreError,
    Subscription,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::client::reply::Reply;
use crate::client::stream::{self, render_step};
use crate::core::on_core;
use crate::digest::sha256_hex;
use crate::error::ApiError;
use crate::ids::{client_id, new_id};
use crate::metrics::{Limit, METRICS};
use crate::quota;
use crate::runs::{attachments, Seen, Start, StartError, StartedRun, REQUEST_DIGEST};
use crate::state::State;
use crate::telemetry::spans;

/// Starts a run for `turn` and answers the client: the run's stream, or its whole
/// response once it ends.
pub async fn run_turn(
    state: &State,
    session: &mut Session,
    reply: &mut Reply,
    account_id: &str,
    surface: &'static dyn Surface,
    turn: TurnRequest,
) -> Result<()> {
    // What the answer needs of the turn; the run's start takes the rest. The start is
    // boxed so that its future is not kept in this one while the run streams.
    let stream = turn.stream;
    let client = turn.extra.get("client").cloned().unwrap_or(Value::Null);
    let client_trace = spans::client_context(&session.req_header().headers);
    let asked = match &turn.session {
        SessionRef::Named(id) => Some(id.clone()),
        _ => None,
    };
    let key = match idempotency_key(session) {
        Ok(key) => key,
        Err(e) => return reply.error(session, &e, surface, &[]).await,
    };
    // A store that cannot write would hold the run's start until it can: refused at
    // once instead, before anything (a key, an attachment) is written.
    if let Err(why) = state.writer.health().writable() {
        return reply
            .error(session, &ApiError::store_unwritable(why), surface, &[])
            .await;
    }
    let run_id = new_id("run");
    if let Some(key) = &key {
        let digest = turn.request_digest.as_deref();
        let claim = claim_key(state, account_id, key, &run_id, asked.as_deref(), digest);
        match Box::pin(claim).await {
            Ok(None) => {}
            Ok(Some(first)) => {
                let repeat = answer_repeat(
                    state, session, reply, surface, account_id, &first, stream, client,
                );
                return Box::pin(repeat).await;
            }
            Err(e) => return reply.error(session, &e, surface, &[]).await,
        }
    }
    let prepared = prepare_run(
        state,
        account_id,
        surface,
        run_id.clone(),
        turn,
        client_trace,
    );
    let (started, mut events) = match Box::pin(prepared).await {
        Ok(started) => started,
        Err((e, session_id)) => {
            if let Some(key) = &key {
                release_key(state, account_id, key, &run_id).await;
            }
            let headers: Vec<(&str, &str)> = session_id
                .as_deref()
                .map(|s| ("x-session-id", s))
                .into_iter()
                .collect();
            let refused = runtime_adapter::Refused {
                status: e.status,
                code: e.code,
                message: &e.message,
                param: e.param.as_deref(),
            };
            if let Some((status, body)) = surface.refusal(&client, &refused) {
                return reply.json(session, status, &body, &headers).await;
            }
            return reply.error(session, &e, surface, &headers).await;
        }
    };
    let info = started.info(client);
    let response_id = surface.response_id(&started.run_id);
    let mut headers = vec![
        ("x-session-id", started.session_id.as_str()),
        ("x-run-id", started.run_id.as_str()),
        ("x-response-id", response_id.as_str()),
        ("x-invocation-id", started.invocation_id.as_str()),
    ];
    // The turn went to another session than the one named (its history diverged): say
    // which, beside the new one in x-session-id.
    if let Some(asked) = asked.as_deref().filter(|s| *s != started.session_id) {
        headers.push(("x-previous-session-id", asked));
    }
    if stream {
        let answered = Some(started.answered.subscribe());
        stream_run(
            session,
            reply,
            surface,
            &info,
            &mut events,
            &headers,
            answered,
        )
        .await;
        Ok(())
    } else {
        // Boxed too: the streaming path would otherwise carry its larger future.
        Box::pin(respond_when_done(
            session,
            reply,
            surface,
            &info,
            &mut events,
            &headers,
        ))
        .await
    }
}

/// Resolves the session and starts the run; returns it with the subscription its client
/// follows. On error, returns the error and the session id if one was resolved. Nothing
/// is written before every check has passed. The run's span continues `client_trace`.
async fn prepare_run(
    state: &State,
    account_id: &str,
    surface: &'static dyn Surface,
    run_id: String,
    turn: TurnRequest,
    client_trace: Option<opentelemetry::Context>,
) -> std::result::Result<(StartedRun, Subscription), (ApiError, Option<String>)> {
    let mut turn = turn;
    turn.system = split_instructions(&mut turn.input);
    let mut target = resolve_session(state, account_id, surface, &turn.session)
        .await
        .map_err(|e| (e, None))?;
    // Upload references first (they must be this account's), before reconciliation can
    // fork: a refused turn changes nothing.
    attachments::check_refs(&*state.store, account_id, &turn)
        .await
        .map_err(|e| (e, None))?;
    let resent = carries_history(&turn.input);
    if let (Target::Session(id, seen), SessionRef::Named(_), true) =
        (&target, &turn.session, resent)
    {
        // Boxed, as the fork below: rare steps whose state a common start need not carry.
        let reconciled = reconcile_history(state, account_id, id.clone(), seen.clone(), &mut turn);
        target = Box::pin(reconciled).await.map_err(|e| (e, None))?;
    }
    // Every inline attachment is checked before any is stored: a refused one writes nothing.
    let (turn, uploads) = attachments::extract(&state.attachments, turn).map_err(|e| (e, None))?;
    refuse_run_over_quota(state, account_id, &turn, &target, &uploads)
        .await
        .map_err(|e| (e, None))?;
    let (session_id, seen) = match target {
        Target::Session(id, seen) => (id, seen),
        Target::Fork(from) => {
            // At its cap the account gets 429 before the fork is made, as a resume does.
            drop(
                state
                    .limits
                    .try_acquire_run(account_id)
                    .map_err(|l| (ApiError::limited(&l), None))?,
            );
            let fork = Box::pin(fork_after(state, account_id, &from))
                .await
                .map_err(|e| (e, None))?;
            // Just made, so not archived; its row is read with its history.
            (fork, Seen::Read(None))
        }
    };
    attachments::save(&*state.store, account_id, uploads)
        .await
        .map_err(|e| (e, None))?;
    let runs = state.runs.clone();
    let follow =
        Subscription::before_append(state.store.clone(), &state.hub, account_id, &session_id);
    let start = Box::new(Start {
        account_id: account_id.to_owned(),
        session_id: session_id.clone(),
        run_id,
        turn,
        follow,
        seen,
        resume: None,
    });
    // Boxed once: the hop to the core runtime then moves a pointer, not the start's state.
    let start = Box::pin(spans::in_client_trace(client_trace, async move {
        runs.start(start).await
    }));
    on_core(&state.core, start).await.map_err(|e| {
        let err = match e {
            StartError::SessionBusy(_) => ApiError::new(
                409,
                "invalid_request_error",
                "conversation_busy",
                format!("{e}; wait for it to finish or cancel it"),
            ),
            StartError::Archived(_) => ApiError::new(
                409,
                "invalid_request_error",
                "session_archived",
                e.to_string(),
            ),
            StartError::ShuttingDown => {
                ApiError::new(503, "server_error", "shutting_down", e.to_string())
            }
            StartError::TooManyRuns(ref l) => {
                METRICS.rate_limited(Limit::Runs);
                ApiError::limited(l)
            }
            StartError::Store(_) | StartError::Write(_) => {
                ApiError::store_unavailable(&e, "cannot start a run")
            }
            StartError::Unwritable(why) => ApiError::store_unwritable(why),
        };
        (err, Some(session_id))
    })
}

/// How long a repeat of an `Idempotency-Key` answers with the first request's run.
pub const IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// Longest `Idempotency-Key` Tether takes.
const MAX_IDEMPOTENCY_KEY: usize = 255;

/// The request's `Idempotency-Key`, if it has one.
fn idempotency_key(session: &Session) -> std::result::Result<Option<String>, ApiError> {
    let Some(value) = session.req_header().headers.get("idempotency-key") else {
        return Ok(None);
    };
    let bad = |why: &str| {
        ApiError::new(
            400,
            "invalid_request_error",
            "invalid_idempotency_key",
            format!("Idempotency-Key {why}"),
        )
    };
    let key = value
        .to_str()
        .map_err(|_| bad("must be printable ASCII"))?
        .trim();
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY {
        return Err(bad("must be 1 to 255 characters long"));
    }
    Ok(Some(key.to_owned()))
}

/// How long a repeat of an `Idempotency-Key` waits for the run of a first request that
/// claimed the key but has not started it yet (its session is being resolved, its
/// attachments stored): past this, that request is taken to have ended without a run.
const START_WAIT: Duration = Duration::from_secs(5);

/// How often a repeat looks for that run meanwhile.
const START_POLL: Duration = Duration::from_millis(25);

/// SHA-256 (hex) of a request body: what a repeat of an `Idempotency-Key` must match (SDK
/// retries resend the same bytes). How the answer is delivered (`stream`,
/// `stream_options`) is not part of it, as a repeat may follow the run either way; a JSON
/// body is hashed without those fields, any other as its bytes.
fn body_digest(body: &[u8]) -> String {
    let canonical = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut fields)) => {
            fields.remove("stream");
            fields.remove("stream_options");
            serde_json::to_vec(&fields).ok()
        }
        _ => None,
    };
    sha256_hex(canonical.as_deref().unwrap_or(body))
}

/// The digest ([`body_digest`]) a repeat of this request's `Idempotency-Key` must match,
/// for a request that has a key; a request without one is not hashed.
pub fn request_digest(session: &Session, body: &[u8]) -> Option<String> {
    let keyed = session.req_header().headers.contains_key("idempotency-key");
    keyed.then(|| body_digest(body))
}

/// The `Retry-After` (seconds) of a keyed request refused because the store cannot check
/// its key.
const KEY_RETRY_AFTER_SECS: u64 = 2;

/// Makes `key` (of the account) name the run `run_id` about to start, unless a request
/// with the same key started a run within [`IDEMPOTENCY_WINDOW`]: then that run's latest
/// invocation, which answers this repeat. A first request that claimed the key but has not
/// started its run yet is waited for (up to [`START_WAIT`]). A repeat whose body differs
/// from the first request's (`digest`, against the one its run recorded) is refused
/// (422 `idempotency_key_reused`). A first run that failed before the agent produced
/// anything (its input superseded), or that never started, is what a retry is for: the
/// key moves on to this run. With the store unavailable the request is refused (503,
/// `Retry-After`): running it as new could run a repeat twice.
async fn claim_key(
    state: &State,
    account_id: &str,
    key: &str,
    run_id: &str,
    session_id: Option<&str>,
    digest: Option<&str>,
) -> std::result::Result<Option<Invocation>, ApiError> {
    let store = &*state.store;
    let now = chrono::Utc::now();
    let since = now - chrono::Duration::from_std(IDEMPOTENCY_WINDOW).unwrap_or_default();
    let record = session_log::IdempotentRun {
        account_id: account_id.to_owned(),
        key: key.to_owned(),
        session_id: session_id.unwrap_or_default().to_owned(),
        run_id: run_id.to_owned(),
        created_at: now,
    };
    let mut replacing: Option<String> = None;
    for _ in 0..3 {
        let first = match store
            .claim_idempotency_key(&record, since, replacing.as_deref())
            .await
        {
            Ok(None) => return Ok(None),
            Ok(Some(first)) => first,
            // Refused, not run as new: the key asks for at most one run, and a request
            // whose key cannot be checked may well be the retry of one that ran (outages
            // are when clients retry). A replica's journal would not see the keys other
            // replicas took, so it cannot check them either. The client retries with the
            // same key once the store is back.
            Err(error) => {
                let mut refused =
                    ApiError::store_unavailable(&error, "cannot check an Idempotency-Key");
                refused
                    .headers
                    .push(("retry-after", KEY_RETRY_AFTER_SECS.to_string()));
                return Err(refused);
            }
        };
        let unavailable = |e: StoreError| ApiError::store_unavailable(&e, "cannot read a run");
        let inv = wait_for_run(state, &first).await.map_err(unavailable)?;
        let retry = match &inv {
            None => true,
            Some(inv) => {
                let statuses = EventQuery {
                    event_types: Some(vec![EventType::RunStatus]),
                    ..run_query(account_id, inv)
                };
                let statuses = store.events(&statuses).await.map_err(unavailable)?;
                let recorded = statuses
                    .iter()
                    .find_map(|e| e.metadata.get(REQUEST_DIGEST).and_then(Value::as_str));
                if let (Some(recorded), Some(digest)) = (recorded, digest) {
                    if recorded != digest {
                        return Err(ApiError::new(
                            422,
                            "invalid_request_error",
                            "idempotency_key_reused",
                            format!(
                                "Idempotency-Key {key:?} was already used with another request \
                                 body; use a new key for a new request"
                            ),
                        ));
                    }
                }
                inv.status == RunStatus::Failed
                    && statuses.last().is_some_and(|e| {
                        e.metadata.get(INPUT_SUPERSEDED).and_then(Value::as_bool) == Some(true)
                    })
            }
        };
        if !retry {
            tracing::info!(account_id, run_id = %first.run_id, "a repeat of an Idempotency-Key answers with its first run");
            return Ok(inv);
        }
        replacing = Some(first.run_id);
    }
    Ok(None)
}

/// Gives up this request's claim of `key` for `run_id`, refused before the run started:
/// a repeat is then handled at once as a new request (with the claim kept, it would wait
/// [`START_WAIT`] for a run that never comes). A store that cannot release it leaves the
/// claim to age past [`START_WAIT`], as before.
async fn release_key(state: &State, account_id: &str, key: &str, run_id: &str) {
    if let Err(error) = state
        .store
        .release_idempotency_key(account_id, key, run_id)
        .await
    {
        tracing::warn!(%error, account_id, run_id, "cannot release an Idempotency-Key of a refused request");
    }
}

/// The run a key's record names, waiting for it while the request that claimed the key
/// may still be starting it (the claim younger than [`START_WAIT`]).
async fn wait_for_run(
    state: &State,
    first: &session_log::IdempotentRun,
) -> std::result::Result<Option<Invocation>, StoreError> {
    let age = (chrono::Utc::now() - first.created_at)
        .to_std()
        .unwrap_or_default();
    let deadline = Instant::now() + START_WAIT.saturating_sub(age);
    loop {
        let inv = state.store.run(&first.account_id, &first.run_id).await?;
        if inv.is_some() || Instant::now() >= deadline {
            return Ok(inv);
        }
        tokio::time::sleep(START_POLL).await;
    }
}

/// Answers a repeat of an `Idempotency-Key` with the first request's run: its stream from
/// the start (the same frames and ids), or its whole response once it ends; the run is
/// followed live while it goes on.
#[allow(clippy::too_many_arguments)] // run_turn's own, and the run it repeats
async fn answer_repeat(
    state: &State,
    session: &mut Session,
    reply: &mut Reply,
    surface: &'static dyn Surface,
    account_id: &str,
    inv: &Invocation,
    stream: bool,
    client: Value,
) -> Result<()> {
    let so_far = match run_events(state, account_id, inv).await {
        Ok(events) => events,
        Err(e) => return reply.error(session, &e, surface, &[]).await,
    };
    let info = run_info(inv, &so_far, client);
    drop(so_far);
    let response_id = surface.response_id(&inv.run_id);
    let headers = [
        ("x-session-id", inv.session_id.as_str()),
        ("x-run-id", inv.run_id.as_str()),
        ("x-response-id", response_id.as_str()),
        ("x-invocation-id", inv.invocation_id.as_str()),
        ("x-idempotent-replay", "true"),
    ];
    let query = run_query(account_id, inv);
    let mut events = Subscription::open(state.store.clone(), &state.hub, query);
    if stream {
        stream_run(session, reply, surface, &info, &mut events, &headers, None).await;
        Ok(())
    } else {
        respond_when_done(session, reply, surface, &info, &mut events, &headers).await
    }
}

/// Where a turn goes.
/// The account's quotas at a run's start, before anything of it is stored (the fork,
/// the uploads, the run's events): a run in progress is never cut by a quota.
async fn refuse_run_over_quota(
    state: &State,
    account_id: &str,
    turn: &TurnRequest,
    target: &Target,
    uploads: &[attachments::Upload],
) -> std::result::Result<(), ApiError> {
    let session = match (target, &turn.session) {
        (Target::Fork(_), _) | (_, SessionRef::New) => quota::Target::New,
        (Target::Session(id, _), SessionRef::Named(_)) => quota::Target::Named(id),
        (Target::Session(..), _) => quota::Target::Existing,
    };
    let adding = quota::Adding {
        session,
        upload_bytes: uploads.iter().map(|u| u.bytes.len() as u64).sum(),
        events: true,
    };
    quota::refuse_over_quota(state, account_id, adding).await
}

enum Target {
    /// A session, with its row as read here (the start reads it no more).
    Session(String, Seen),
    /// After an older response of a session: a fork of it at that response's
    /// checkpoint, made once the turn's other checks have passed.
    Fork(ForkPoint),
}

async fn resolve_session(
    state: &State,
    account_id: &str,
    surface: &dyn Surface,
    reference: &SessionRef,
) -> std::result::Result<Target, ApiError> {
    match reference {
        SessionRef::New => Ok(Target::Session(new_id("sess"), Seen::Read(None))),
        SessionRef::Named(id) => {
            client_id("conversation", id).map_err(|e| e.to_api())?;
            // A deleted conversation stays deleted: its id names nothing any more. The row
            // read here is the start's only read of it (its archived mark, its fork point).
            let session =
                state.store.session(account_id, id).await.map_err(|e| {
                    ApiError::store_unavailable(&e, "cannot resolve the conversation")
                })?;
            if session.as_ref().is_some_and(|s| s.deleted) {
                return Err(ApiError::new(
                    404,
                    "invalid_request_error",
                    "conversation_not_found",
                    format!("Conversation with id '{id}' not found."),
                )
                .with_param("conversation"));
            }
            Ok(Target::Session(
                id.clone(),
                Seen::Read(session.map(Box::new)),
            ))
        }
        SessionRef::AfterResponse(response_id) => {
            let run_id = surface
                .run_id(response_id)
                .ok_or_else(|| previous_response_not_found(response_id))?;
            let unavailable = |e: StoreError| {
                ApiError::store_unavailable(&e, "cannot resolve previous_response_id")
            };
            let run = state
                .store
                .run(account_id, &run_id)
                .await
                .map_err(unavailable)?
                .ok_or_else(|| previous_response_not_found(response_id))?;
            let session = state
                .store
                .session(account_id, &run.session_id)
                .await
                .map_err(unavailable)?;
            if session.as_ref().is_some_and(|s| s.deleted) {
                return Err(previous_response_not_found(response_id));
            }
            continue_after(state, account_id, &run, session)
                .await
                .map_err(unavailable)
        }
    }
}

/// Whether the account's session `session_id` was deleted (Conversations API): its runs
/// and its id then answer as unknown.
pub async fn session_deleted(
    state: &State,
    account_id: &str,
    session_id: &str,
) -> std::result::Result<bool, StoreError> {
    let session = state.store.session(account_id, session_id).await?;
    Ok(session.is_some_and(|s| s.deleted))
}

fn previous_response_not_found(response_id: &str) -> ApiError {
    ApiError::new(
        404,
        "invalid_request_error",
        "previous_response_not_found",
        format!("Previous response with id '{response_id}' not found."),
    )
    .with_param("previous_response_id")
}

/// Where a turn after `run`'s response goes: on in the run's session while no later run
/// followed it there (one that failed unanswered does not count: see [`answered_after`]);
/// otherwise into a fork at the checkpoint that ended the run, so the
/// later branch and this one both keep their history. A run that did not complete has
/// no such checkpoint: the turn goes on in its session, as before forks.
async fn continue_after(
    state: &State,
    account_id: &str,
    run: &Invocation,
    session: Option<session_log::Session>,
) -> std::result::Result<Target, StoreError> {
    let store = &*state.store;
    let checkpoints = EventQuery {
        event_types: Some(vec![EventType::RunCheckpoint]),
        ..run_query(account_id, run)
    };
    let checkpoints = store.events(&checkpoints).await?;
    let ended = checkpoints.iter().rev().find(|e| {
        e.content.get("phase").and_then(Value::as_str) == Some(Phase::TurnCompleted.as_str())
    });
    let Some(ended) = ended else {
        return Ok(Target::Session(
            run.session_id.clone(),
            Seen::Read(session.map(Box::new)),
        ));
    };
    let older = answered_after(store, account_id, &run.session_id, ended.seq).await?;
    let checkpoint_id = ended.content.get("checkpoint_id").and_then(Value::as_str);
    Ok(match (older, checkpoint_id) {
        (true, Some(checkpoint_id)) => Target::Fork(ForkPoint {
            session_id: run.session_id.clone(),
            seq: ended.seq,
            checkpoint_id: checkpoint_id.to_owned(),
        }),
        _ => Target::Session(run.session_id.clone(), Seen::Read(session.map(Box::new))),
    })
}

/// Whether a run of the session that started after `seq` got an answer, or is still going:
/// what makes a turn after an earlier response a branch. A later run that failed before
/// the agent produced anything (its input superseded) left nothing to branch from: a
/// retry of it, sent after the same response, continues the session.
async fn answered_after(
    store: &dyn session_log::Store,
    account_id: &str,
    session_id: &str,
    seq: Seq,
) -> std::result::Result<bool, StoreError> {
    const PAGE: i64 = 64;
    let mut after = seq;
    // Later invocations whose end has not been read yet. (The end of the run before them,
    // the first status after `seq`, has no start among these and is passed over.)
    let mut open = std::collections::HashSet::new();
    loop {
        let page = store
            .events(&EventQuery {
                after_seq: after,
                event_types: Some(vec![EventType::RunStatus]),
                limit: PAGE,
                ..EventQuery::session(account_id, session_id)
            })
            .await?;
        for e in &page {
            let Some(inv) = e.invocation_id.as_deref() else {
                continue;
            };
            if e.run_status() == Some(RunStatus::InProgress) {
                open.insert(inv.to_owned());
                continue;
            }
            let superseded =
                e.metadata.get(INPUT_SUPERSEDED).and_then(Value::as_bool) == Some(true);
            if open.remove(inv) && !superseded {
                return Ok(true);
            }
        }
        match page.last() {
            Some(last) if page.len() as i64 == PAGE => after = last.seq,
            _ => return Ok(!open.is_empty()),
        }
    }
}

/// Applies the history reconciliation rule (`runtime_adapter::reconcile`) to a turn in a
/// session that may exist: the turn keeps only its new input and goes on in the session
/// when its earlier turns match the end of the session's history; when they disagree, it
/// goes to a fork at the latest checkpoint of the session's active branch before the
/// first history item they disagree on, with the request's items from that checkpoint
/// on as its input. With no such checkpoint (they disagree within the session's first
/// turn), it starts a new session holding the request's items as sent.
async fn reconcile_history(
    state: &State,
    account_id: &str,
    session_id: String,
    seen: Seen,
    turn: &mut TurnRequest,
) -> std::result::Result<Target, ApiError> {
    // A turn while another runs in the session is refused as busy when it starts; its
    // history, without the running turn's answer, is no divergence.
    if state.runs.running_in_session(account_id, &session_id) {
        return Ok(Target::Session(session_id, seen));
    }
    let store = &*state.store;
    let unavailable = |e: StoreError| ApiError::store_unavailable(&e, "cannot read the history");
    let lineage = match &seen {
        Seen::Read(Some(session)) => Lineage::of(store, (**session).clone()).await,
        Seen::Read(None) | Seen::Unread => Lineage::resolve(store, account_id, &session_id).await,
    };
    let Some(lineage) = lineage.map_err(unavailable)? else {
        return Ok(Target::Session(session_id, seen));
    };
    let history = lineage.history(store, None).await.map_err(unavailable)?;
    let logged: Vec<(&Event, Item)> = history
        .events
        .iter()
        .filter(|e| e.event_type.is_transcript())
        .filter_map(|e| Item::from_event(e).map(|item| (e, item)))
        .collect();
    let items: Vec<Item> = logged.iter().map(|(_, item)| item.clone()).collect();
    let diverged = match reconcile(&items, history.summary.is_some(), &turn.input) {
        Reconciled::Append(new) => {
            turn.input = new;
            return Ok(Target::Session(session_id, seen));
        }
        Reconciled::Diverged(d) => d,
    };
    // The first history item they disagree on; the fork point comes before it.
    let limit = logged
        .get(diverged.agreed)
        .map_or(Seq::MAX, |(e, _)| lineage.position(e));
    let checkpoints = lineage
        .events(store, 0, None, Some(&[EventType::RunCheckpoint]), i64::MAX)
        .await
        .map_err(unavailable)?;
    let (branch, _) = lineage.branch(store, None).await.map_err(unavailable)?;
    let point = checkpoints.iter().rev().find(|e| {
        let position = lineage.position(e);
        position < limit && branch.is_active(position, e)
    });
    let checkpoint = point.and_then(|e| {
        let id = e.content.get("checkpoint_id")?.as_str()?;
        Some((e, id.to_owned()))
    });
    let Some((event, checkpoint_id)) = checkpoint else {
        tracing::info!(
            account_id,
            session_id,
            agreed = diverged.agreed,
            "the request's history disagrees with the session's first turn; a new session takes it"
        );
        turn.input = diverged.input_after(0);
        turn.session = SessionRef::New;
        return Ok(Target::Session(new_id("sess"), Seen::Read(None)));
    };
    let position = lineage.position(event);
    let kept = logged
        .iter()
        .take_while(|(e, _)| lineage.position(e) < position)
        .count();
    turn.input = diverged.input_after(kept);
    tracing::info!(
        account_id,
        session_id,
        agreed = diverged.agreed,
        kept,
        checkpoint_id,
        "the request's history disagrees with the session's; the turn goes to a fork"
    );
    Ok(Target::Fork(ForkPoint {
        session_id,
        seq: event.seq,
        checkpoint_id,
    }))
}

/// Makes the fork a turn goes to (after an older response, or with a history that
/// diverged from the session's); returns its session id.
async fn fork_after(
    state: &State,
    account_id: &str,
    from: &ForkPoint,
) -> std::result::Result<String, ApiError> {
    let forked = session_log::history::fork(
        &*state.store,
        account_id,
        &from.session_id,
        Some(&from.checkpoint_id),
        &new_id("sess"),
    )
    .await;
    match forked {
        Ok(forked) => Ok(forked.session_id),
        Err(ForkError::Store(e)) => Err(ApiError::store_unavailable(&e, "cannot fork a session")),
        Err(ForkError::RunInProgress { run_id, .. }) => Err(ApiError::new(
            409,
            "invalid_request_error",
            "conversation_busy",
            format!("the run the fork point belongs to ({run_id}) is still in progress"),
        )),
        Err(e) => Err(ApiError::new(
            404,
            "invalid_request_error",
            "previous_response_not_found",
            e.to_string(),
        )
        .with_param("previous_response_id")),
    }
}

/// Streams the run to the client until its terminal event, or until the client leaves
/// (the run goes on without it). The SSE header waits for the first frame and, when
/// `answered` is given, for the agent to have accepted the turn: a run that fails before
/// then (the agent unreachable or refusing the turn, an A2A or ADK agent refusing it) is
/// answered with the surface's plain error response and status, as the same request
/// without streaming is, so that a client retries it as it retries any 5xx. The frames
/// rendered meanwhile (Responses' `response.created`) follow the header at once.
async fn stream_run(
    session: &mut Session,
    reply: &mut Reply,
    surface: &dyn Surface,
    info: &RunInfo,
    events: &mut Subscription,
    headers: &[(&str, &str)],
    mut answered: Option<watch::Receiver<bool>>,
) {
    let mut renderer = surface.stream_renderer(info);
    let mut watch_client = true;
    // What came before the header, for the plain response of a run that fails first.
    // Dropped when the stream starts: it would otherwise stay for the stream's life.
    let mut held = Vec::new();
    let mut pending = Vec::new();
    let last = loop {
        if answered.as_ref().is_some_and(|a| *a.borrow()) {
            answered = None;
        }
        if !pending.is_empty() && answered.is_none() {
            break Some(false);
        }
        let next = tokio::select! {
            next = stream::next_event(session, events, &mut watch_client, None) => next,
            // The agent accepted the turn (or its run ended: its end is the next event).
            _ = agent_answered(&mut answered) => continue,
        };
        let event = match next {
            Ok(event) => event,
            Err(stream::End::LogUnavailable) => break None,
            Err(_) => return, // the client left; the run goes on
        };
        let step = render_step(&mut *renderer, &event);
        held.push((*event).clone());
        if step.last
            && !event
                .run_status()
                .is_some_and(session_log::RunStatus::is_answered)
        {
            let (status, body) = surface.final_response(info, &held);
            let headers = with_retry_after(&held, headers);
            let _ = reply.json(session, status, &body, &headers).await;
            return;
        }
        pending.extend(step.frames);
        if step.last {
            break Some(true);
        }
    };
    drop(held);
    if reply.stream_start(session, headers).await.is_err() {
        return;
    }
    match last {
        Some(last) => {
            if reply.frames(session, &pending, last).await.is_err() || last {
                return;
            }
            drop(pending);
            reply
                .pump(session, surface, events, None, |event| {
                    render_step(&mut *renderer, event)
                })
                .await;
        }
        // Say so in the stream rather than hang; the client can resume from its last id.
        None => {
            if !pending.is_empty() && reply.frames(session, &pending, false).await.is_err() {
                return;
            }
            reply
                .fail_stream(session, &ApiError::log_unavailable(), surface)
                .await
        }
    }
}

/// Resolves once the agent has accepted the run's turn (then `answered` is cleared); never
/// when there is nothing to wait for, or the run ended without it (its end is an event).
async fn agent_answered(answered: &mut Option<watch::Receiver<bool>>) {
    match answered {
        Some(rx) => {
            if rx.wait_for(|a| *a).await.is_err() {
                std::future::pending::<()>().await;
            }
            *answered = None;
        }
        None => std::future::pending().await,
    }
}

/// Waits for the run to end and answers with the whole response.
async fn respond_when_done(
    session: &mut Session,
    reply: &mut Reply,
    surface: &dyn Surface,
    info: &RunInfo,
    events: &mut Subscription,
    headers: &[(&str, &str)],
) -> Result<()> {
    let mut collected = Vec::new();
    let mut watch_client = true;
    loop {
        match stream::next_event(session, events, &mut watch_client, None).await {
            Ok(event) => {
                let last = event.is_terminal();
                collected.push((*event).clone());
                if last {
                    break;
                }
                if let Some((status, body)) = surface.early_response(info, &collected) {
                    return reply.json(session, status, &body, headers).await;
                }
            }
            Err(stream::End::LogUnavailable) => {
                return reply
                    .error(session, &ApiError::log_unavailable(), surface, headers)
                    .await;
            }
            Err(_) => return Ok(()), // the client left; the run goes on
        }
    }
    let (status, body) = surface.final_response(info, &collected);
    let headers = with_retry_after(&collected, headers);
    reply.json(session, status, &body, &headers).await
}

/// The `Retry-After` (seconds) of a run refused because the agent could not be reached. A
/// restarting agent listens again within seconds; SDKs that honour the header (the OpenAI
/// SDKs, the Vercel AI SDK) wait that long between their retries, where their own backoff
/// (0.5 s, then 1 s) would be spent before a restarted agent is back.
const AGENT_RETRY_AFTER_SECS: &str = "2";

/// `headers`, and `Retry-After` when the run whose `events` these are ended because the
/// agent was unreachable.
fn with_retry_after<'a>(
    events: &[Event],
    headers: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut headers = headers.to_vec();
    let terminal = events.last().and_then(Event::run_status);
    let (code, _) = runtime_adapter::surface::run_error(events, terminal);
    if code == "agent_unreachable" {
        headers.push(("retry-after", AGENT_RETRY_AFTER_SECS));
    }
    headers
}

/// Every event of the invocation's run (all its invocations), in seq order.
pub fn run_query(account_id: &str, inv: &Invocation) -> EventQuery {
    EventQuery {
        run_id: Some(inv.run_id.clone()),
        ..EventQuery::session(account_id, &inv.session_id)
    }
}

pub async fn run_events(
    state: &State,
    account_id: &str,
    inv: &Invocation,
) -> std::result::Result<Vec<Event>, ApiError> {
    state
        .store
        .events(&run_query(account_id, inv))
        .await
        .map_err(|e| ApiError::store_unavailable(&e, "cannot read a run"))
}

/// What a renderer needs to know about a run, from its invocation and events.
pub fn run_info(inv: &Invocation, events: &[Event], client: Value) -> RunInfo {
    let model = events
        .iter()
        .find_map(|e| {
            e.run_status()
                .and(e.metadata.get("model"))
                .and_then(Value::as_str)
        })
        .unwrap_or("agent")
        .to_owned();
    RunInfo {
        run_id: inv.run_id.clone(),
        session_id: inv.session_id.clone(),
        model,
        created_at: crate::runs::started_at(events, &inv.invocation_id)
            .unwrap_or(inv.started_at)
            .timestamp(),
        client,
    }
}

/// Cancels an invocation and returns its run's events once its end is recorded (or after
/// 5 s: a stateful agent gets a grace period to take the cancel, the end follows it).
pub async fn cancel_and_wait(
    state: &State,
    account_id: &str,
    inv: &Invocation,
) -> std::result::Result<Vec<Event>, ApiError> {
    crate::api::sessions::cancel(state, account_id, &inv.invocation_id)
        .await
        .map_err(|e| ApiError::new(e.status, "server_error", "cancel_failed", e.message))?;
    let ended = |events: &[Event]| {
        events.iter().any(|e| {
            e.is_terminal() && e.invocation_id.as_deref() == Some(inv.invocation_id.as_str())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let events = run_events(state, account_id, inv).await?;
        if ended(&events) || Instant::now() >= deadline {
            return Ok(events);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
