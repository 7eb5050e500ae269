//! A session's history as every reader sees it. A fork refers to its parent, it does not
//! copy it: the history of a fork is its parent's history up to the fork point, then its
//! own events, and so on up the chain (a fork of a fork too). `Lineage` is that chain,
//! resolved from the sessions' `session_fork` events, and the one place that reads it:
//! each session of the chain is read only up to its fork point, so a read of a fork
//! never walks the parent's later events.
//!
//! Events of a chain keep their own session and seq. To order them, each has a
//! *position*: its seq plus its session's base, the position of the event its session
//! was forked at (0 for a session that is not a fork). Positions are seqs in a session
//! that is not a fork; in a fork, the inherited events come first. Resumes' cuts
//! (`branch`) and compactions' ranges are positions.
//!
//! `Lineage::history` is what the agent's history is made of: the active branch, with
//! the transcript a compaction stands for left out and its summary given instead.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::branch::{Branch, DELETED_POSITION};
use crate::checkpoints::RESUMED_FROM;
use crate::event::{Event, EventType, ForkPoint, NewEvent, RunStatus, Seq, Session};
use crate::store::{EventQuery, Store, StoreError};

/// Longest fork chain Tether follows; longer is a corrupt log (a chain cannot loop).
const MAX_DEPTH: usize = 10_000;

/// One session of a chain.
#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    pub session_id: String,
    /// Read up to this seq (the next session's fork point); `None` for the session itself.
    pub upto: Option<Seq>,
    /// Added to the seqs of this session's events to place them in the history.
    pub base: Seq,
}

/// A session and the chain its history comes from, root first.
#[derive(Clone, Debug)]
pub struct Lineage {
    pub account_id: String,
    /// The session whose history this is.
    pub session: Session,
    links: Vec<Link>,
}

impl Lineage {
    /// The chain of `session_id`, or `None` when the account has no such session (or a
    /// client deleted it).
    pub async fn resolve(
        store: &dyn Store,
        account_id: &str,
        session_id: &str,
    ) -> Result<Option<Lineage>, StoreError> {
        let Some(session) = store.session(account_id, session_id).await? else {
            return Ok(None);
        };
        Self::of(store, session).await
    }

    /// `resolve` from the session's row as the caller already read it (`store.session`),
    /// so that a run's start reads it once: only a fork's parents are read here. A
    /// session's own row gives its fork point, which never changes once it is written.
    pub async fn of(store: &dyn Store, session: Session) -> Result<Option<Lineage>, StoreError> {
        if session.deleted {
            return Ok(None);
        }
        let (account_id, session_id) = (session.account_id.as_str(), session.session_id.as_str());
        let mut links = vec![(session_id.to_owned(), None)];
        let mut parent = session.forked_from.clone();
        while let Some(point) = parent {
            if links.len() > MAX_DEPTH || links.iter().any(|(s, _)| *s == point.session_id) {
                return Err(StoreError::Corrupt(format!(
                    "the fork chain of session {session_id:?} loops or is too long"
                )));
            }
            // A fork brought in without its parent (ImportSession from another log)
            // reads as a session of its own: its history starts at its own events.
            let Some(above) = store.session(account_id, &point.session_id).await? else {
                tracing::warn!(
                    account_id, session_id, parent_session_id = %point.session_id,
                    "a fork's parent is not in this account; reading the fork on its own"
                );
                break;
            };
            links.push((point.session_id, Some(point.seq)));
            parent = above.forked_from;
        }
        let mut base = 0;
        let links = links
            .into_iter()
            .rev()
            .map(|(session_id, upto)| {
                let link = Link {
                    session_id,
                    upto,
                    base,
                };
                base += upto.unwrap_or(0);
                link
            })
            .collect();
        Ok(Some(Lineage {
            account_id: account_id.to_owned(),
            session,
            links,
        }))
    }

    pub fn session_id(&self) -> &str {
        &self.session.session_id
    }

    /// The sessions of the chain, root first; the session itself is last.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    fn own(&self) -> &Link {
        &self.links[self.links.len() - 1]
    }

    /// Where an event of the chain stands in the history (its seq for an event of a
    /// session that is no part of it).
    pub fn position(&self, event: &Event) -> Seq {
        self.position_of(&event.session_id, event.seq)
    }

    fn position_of(&self, session_id: &str, seq: Seq) -> Seq {
        self.links
            .iter()
            .find(|l| l.session_id == session_id)
            .map_or(seq, |l| l.base + seq)
    }

    /// The position of the session's own event `seq`.
    pub fn own_position(&self, seq: Seq) -> Seq {
        self.own().base + seq
    }

    /// The position of the history's last event.
    pub fn last_position(&self) -> Seq {
        self.own_position(self.session.last_seq)
    }

    /// Whether an event comes from an earlier session of the chain.
    pub fn is_inherited(&self, event: &Event) -> bool {
        event.session_id != self.session.session_id
    }

    /// Events of the history at positions after `after` and up to `until`, of `types`
    /// (all when `None`), at most `limit`, in history order.
    pub async fn events(
        &self,
        store: &dyn Store,
        after: Seq,
        until: Option<Seq>,
        types: Option<&[EventType]>,
        limit: i64,
    ) -> Result<Vec<Event>, StoreError> {
        let mut out = Vec::new();
        for link in &self.links {
            let left = limit.saturating_sub(out.len() as i64);
            if left <= 0 {
                break;
            }
            let end = link.upto.map_or(Seq::MAX, |u| link.base + u);
            let Some(until_seq) = reach(link, until).filter(|_| end > after) else {
                continue;
            };
            let query = EventQuery {
                after_seq: (after - link.base).max(0),
                until_seq,
                event_types: types.map(<[EventType]>::to_vec),
                limit: left,
                ..EventQuery::session(&self.account_id, &link.session_id)
            };
            out.extend(store.events(&query).await?);
        }
        Ok(out)
    }

    /// The active branch of the history ending at `at` (its end when `None`), and the
    /// markers read for it, in history order up to `at`: run statuses (resumes name their
    /// checkpoint) and compaction markers. The checkpoints resumes name are looked up by
    /// id: the rest, one or more per turn and the bulk of the markers, are not read.
    pub async fn branch(
        &self,
        store: &dyn Store,
        at: Option<Seq>,
    ) -> Result<(Branch, Vec<Event>), StoreError> {
        const READ: [EventType; 3] = [
            EventType::RunStatus,
            EventType::Compaction,
            EventType::ContextCheckpoint,
        ];
        let markers = self.events(store, 0, at, Some(&READ), i64::MAX).await?;
        let mut checkpoints = HashMap::new();
        let resumed = markers
            .iter()
            .filter(|e| e.run_status() == Some(RunStatus::InProgress))
            .filter_map(|e| e.metadata.get(RESUMED_FROM)?.as_str());
        for id in resumed {
            if !checkpoints.contains_key(id) {
                if let Some(position) = self.checkpoint_position(store, id, at).await? {
                    checkpoints.insert(id.to_owned(), position);
                }
            }
        }
        let branch = Branch::derive(
            markers.iter().map(|e| (self.position(e), e)),
            &checkpoints,
            at,
        )
        .without_deleted(self.deleted_items(store).await?);
        Ok((branch, markers))
    }

    /// Positions of the items a client deleted from this history (its `item_deleted`
    /// events, wherever a read stops: a deleted item is in no read). A lookup in a
    /// partial index, empty for most sessions.
    pub async fn deleted_items(&self, store: &dyn Store) -> Result<HashSet<Seq>, StoreError> {
        let deletions = self
            .events(store, 0, None, Some(&[EventType::ItemDeleted]), i64::MAX)
            .await?;
        Ok(deletions
            .iter()
            .filter_map(|e| e.content.get(DELETED_POSITION)?.as_i64())
            .collect())
    }

    /// Where the history's checkpoint `id` is, up to position `at`.
    async fn checkpoint_position(
        &self,
        store: &dyn Store,
        id: &str,
        at: Option<Seq>,
    ) -> Result<Option<Seq>, StoreError> {
        for link in self.links.iter().rev() {
            let Some(until) = reach(link, at) else {
                continue;
            };
            let found = store
                .checkpoint_event(&self.account_id, &link.session_id, Some(id), until)
                .await?;
            if let Some(e) = found {
                return Ok(Some(link.base + e.seq));
            }
        }
        Ok(None)
    }

    /// What the agent's history is made of at position `at` (the end when `None`): the
    /// active branch's transcript after the latest compaction on it, that compaction's
    /// summary, and the branch's run statuses and older compaction markers (where
    /// adapters find the agent's handles and a deleted session's cut).
    pub async fn history(&self, store: &dyn Store, at: Option<Seq>) -> Result<History, StoreError> {
        let (branch, markers) = self.branch(store, at).await?;
        let active = |e: &Event| !e.is_late() && branch.is_active(self.position(e), e);
        let compaction = markers
            .iter()
            .rev()
            .filter(|e| active(e))
            .find_map(|e| self.compaction(e));
        let (summary, from, through) = compaction.unwrap_or((None, 0, 0));
        let transcript = self
            .events(store, through, at, Some(&EventType::TRANSCRIPT), i64::MAX)
            .await?;
        let mut events: Vec<(Seq, Event)> = markers
            .into_iter()
            .filter(|e| matches!(e.event_type, EventType::RunStatus | EventType::Compaction))
            .chain(transcript)
            .filter(|e| active(e))
            .map(|e| (self.position(&e), e))
            .collect();
        events.sort_by_key(|(position, _)| *position);
        Ok(History {
            events: events.into_iter().map(|(_, e)| e).collect(),
            summary,
            compacted_from: from,
            compacted_through: through,
        })
    }

    /// The summary and the first and last positions a compaction marker stands for.
    fn compaction(&self, e: &Event) -> Option<(Option<String>, Seq, Seq)> {
        match e.event_type {
            EventType::ContextCheckpoint => {
                let c = ContextCheckpoint::of(&e.content)?;
                Some((Some(c.summary), c.seq_start, c.seq_end))
            }
            // Written by older versions: it stands for its own session's transcript up
            // to `through_seq` (up to itself without one), summarised or simply cut (a
            // session the client deleted at the agent).
            EventType::Compaction => {
                let through = e.content.get("through_seq").and_then(Value::as_i64);
                let summary = e.content.get("summary").and_then(Value::as_str);
                Some((
                    summary.map(str::to_owned),
                    1,
                    self.position_of(&e.session_id, through.unwrap_or(e.seq)),
                ))
            }
            _ => None,
        }
    }
}

/// How far `link` is read for a history up to position `until`: `None` when none of it
/// is, `Some(None)` when all of it is.
fn reach(link: &Link, until: Option<Seq>) -> Option<Option<Seq>> {
    match (link.upto, until) {
        (_, Some(u)) if u <= link.base => None,
        (Some(upto), Some(u)) => Some(Some(upto.min(u - link.base))),
        (upto, None) => Some(upto),
        (None, Some(u)) => Some(Some(u - link.base)),
    }
}

/// What the agent's history is made of (see [`Lineage::history`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    /// In history order: the transcript events on the active branch after the
    /// compaction, and the branch's `run_status` and `compaction` markers.
    pub events: Vec<Event>,
    /// What stands for the transcript before them, when a compaction does.
    pub summary: Option<String>,
    /// The first and last positions the summary stands for (0 and 0: none).
    pub compacted_from: Seq,
    pub compacted_through: Seq,
}

/// The transcript a compaction would cover: what a new summary stands for.
#[derive(Clone, Debug, PartialEq)]
pub struct Covered {
    /// The transcript events before the turns kept (after an earlier summary, which the
    /// new one replaces and so covers too).
    pub events: Vec<Event>,
    pub seq_start: Seq,
    pub seq_end: Seq,
}

impl History {
    /// What a compaction keeping the last `keep` turns would cover: the transcript before
    /// them. A turn is a run (a resume is the same turn again): its events share a run id.
    /// `None` when nothing comes before them.
    pub fn before_last_turns(&self, lineage: &Lineage, keep: usize) -> Option<Covered> {
        let transcript: Vec<&Event> = self
            .events
            .iter()
            .filter(|e| e.event_type.is_transcript())
            .collect();
        let mut kept: Vec<Option<&str>> = Vec::new();
        let mut tail = transcript.len();
        for (i, e) in transcript.iter().enumerate().rev() {
            let run = e.run_id.as_deref();
            if !kept.contains(&run) {
                if kept.len() == keep {
                    break;
                }
                kept.push(run);
            }
            tail = i;
        }
        let covered = &transcript[..tail];
        let (first, last) = (covered.first()?, covered.last()?);
        let seq_start = match self.summary {
            Some(_) => self.compacted_from,
            None => lineage.position(first),
        };
        Some(Covered {
            events: covered.iter().map(|e| (*e).clone()).collect(),
            seq_start,
            seq_end: lineage.position(last),
        })
    }

    /// This history once `checkpoint` stands for the transcript it covers.
    pub fn compacted(mut self, lineage: &Lineage, checkpoint: &ContextCheckpoint) -> History {
        self.events
            .retain(|e| !e.event_type.is_transcript() || lineage.position(e) > checkpoint.seq_end);
        History {
            events: self.events,
            summary: Some(checkpoint.summary.clone()),
            compacted_from: checkpoint.seq_start,
            compacted_through: checkpoint.seq_end,
        }
    }
}

/// Content of a `context_checkpoint`: the summary standing for the transcript at
/// positions `seq_start..=seq_end` of the session's history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextCheckpoint {
    pub summary: String,
    pub seq_start: Seq,
    pub seq_end: Seq,
}

impl ContextCheckpoint {
    pub fn of(content: &Value) -> Option<ContextCheckpoint> {
        serde_json::from_value(content.clone()).ok()
    }

    /// The `compaction_boundary` and `context_checkpoint` events a compaction appends, in
    /// that order. `boundary` is the boundary's content (why, and what was asked).
    pub fn events(&self, account_id: &str, session_id: &str, boundary: Value) -> [NewEvent; 2] {
        let content = serde_json::to_value(self).unwrap_or(Value::Null);
        [
            NewEvent::new(
                account_id,
                session_id,
                EventType::CompactionBoundary,
                boundary,
            ),
            NewEvent::new(
                account_id,
                session_id,
                EventType::ContextCheckpoint,
                content,
            ),
        ]
    }
}

/// Why a fork was refused.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    #[error("session {0:?} not found")]
    SessionNotFound(String),
    #[error("{}", match .checkpoint_id {
        Some(id) => format!("checkpoint {id:?} not found in session {:?}", .session_id),
        None => format!("session {:?} has no checkpoint to fork at", .session_id),
    })]
    CheckpointNotFound {
        session_id: String,
        checkpoint_id: Option<String>,
    },
    #[error("checkpoint {checkpoint_id:?} belongs to run {run_id:?}, which is still running")]
    RunInProgress {
        checkpoint_id: String,
        run_id: String,
        invocation_id: String,
    },
    #[error("session {0:?} already exists")]
    SessionExists(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A fork made: the new session and the point its history comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct Forked {
    pub session_id: String,
    pub from: ForkPoint,
    /// Its `session_fork`, seq 1.
    pub event: Event,
}

/// Forks `session_id` at a checkpoint of its history (`checkpoint_id`, or the latest)
/// into the new session `new_session_id` of the same account. Nothing is copied: the
/// new session's seq 1 names the point, and reads follow it. A checkpoint the session
/// inherited from its own parent makes the new session a fork of that parent. Costs a
/// few lookups, whatever the size of the session.
pub async fn fork(
    store: &dyn Store,
    account_id: &str,
    session_id: &str,
    checkpoint_id: Option<&str>,
    new_session_id: &str,
) -> Result<Forked, ForkError> {
    let lineage = Lineage::resolve(store, account_id, session_id)
        .await?
        .ok_or_else(|| ForkError::SessionNotFound(session_id.to_owned()))?;
    let mut found = None;
    for link in lineage.links().iter().rev() {
        found = store
            .checkpoint_event(account_id, &link.session_id, checkpoint_id, link.upto)
            .await?;
        if found.is_some() {
            break;
        }
    }
    let checkpoint = found.ok_or_else(|| ForkError::CheckpointNotFound {
        session_id: session_id.to_owned(),
        checkpoint_id: checkpoint_id.map(str::to_owned),
    })?;
    let id = checkpoint
        .content
        .get("checkpoint_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let Some(run_id) = &checkpoint.run_id {
        if let Some(inv) = store.run(account_id, run_id).await? {
            if inv.status == RunStatus::InProgress {
                return Err(ForkError::RunInProgress {
                    checkpoint_id: id,
                    run_id: run_id.clone(),
                    invocation_id: inv.invocation_id,
                });
            }
        }
    }
    let from = ForkPoint {
        session_id: checkpoint.session_id.clone(),
        seq: checkpoint.seq,
        checkpoint_id: id,
    };
    let first = NewEvent::new(
        account_id,
        new_session_id,
        EventType::SessionFork,
        from.content(),
    );
    let event = store
        .create_session(&first)
        .await?
        .ok_or_else(|| ForkError::SessionExists(new_session_id.to_owned()))?;
    tracing::info!(
        account_id, session_id = new_session_id, parent_session_id = %from.session_id,
        parent_seq = from.seq, checkpoint_id = %from.checkpoint_id, "session forked"
    );
    Ok(Forked {
        session_id: new_session_id.to_owned(),
        from,
        event,
    })
}
