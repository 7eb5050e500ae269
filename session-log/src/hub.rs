//! The hub: per-session broadcast of committed events, and `Subscription`, which replays a
//! session from the store after a cursor and then follows the live broadcast with no gap
//! and no duplicate.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use crate::event::{Event, Seq};
use crate::store::{EventQuery, Store, StoreError};

/// Live events of a session are buffered this deep per subscriber; a subscriber that
/// falls further behind re-reads the gap from the store.
const CHANNEL_CAPACITY: usize = 1024;
/// Replay reads the log in pages of this many events.
const REPLAY_PAGE: i64 = 1000;

type SessionKey = (String, String);

/// Broadcasts committed events to the subscribers of their session. Only the writer (and,
/// across replicas, whatever learns of other replicas' commits) publishes.
#[derive(Clone, Default)]
pub struct Hub {
    sessions: Arc<Mutex<HashMap<SessionKey, broadcast::Sender<Arc<Event>>>>>,
}

impl Hub {
    pub fn new() -> Self {
        Self::default()
    }

    /// Hands committed events to current subscribers, in order.
    pub fn publish(&self, events: &[Event]) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        for event in events {
            let key = (event.account_id.clone(), event.session_id.clone());
            if let Some(tx) = sessions.get(&key) {
                if tx.send(Arc::new(event.clone())).is_err() {
                    // Nobody listens any more: forget the channel.
                    sessions.remove(&key);
                }
            }
        }
    }

    fn receiver(&self, account_id: &str, session_id: &str) -> broadcast::Receiver<Arc<Event>> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions
            .entry((account_id.to_owned(), session_id.to_owned()))
            .or_insert_with(|| broadcast::channel(CHANNEL_CAPACITY).0)
            .subscribe()
    }

    /// Number of sessions with live subscribers.
    pub fn active_sessions(&self) -> usize {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions
            .values()
            .filter(|tx| tx.receiver_count() > 0)
            .count()
    }
}

/// Every committed event matching a query after a cursor: first what the store holds,
/// then what the hub broadcasts, each exactly once and in seq order.
pub struct Subscription {
    store: Arc<dyn Store>,
    live: broadcast::Receiver<Arc<Event>>,
    query: EventQuery,
    pending: VecDeque<Arc<Event>>,
    replaying: bool,
}

impl Subscription {
    /// Subscribes to live events first, then replays, so nothing committed in between is
    /// missed. `query.after_seq` is the cursor; `query.limit` is ignored.
    pub fn open(store: Arc<dyn Store>, hub: &Hub, query: EventQuery) -> Self {
        let live = hub.receiver(&query.account_id, &query.session_id);
        Subscription {
            store,
            live,
            query,
            pending: VecDeque::new(),
            replaying: true,
        }
    }

    /// Seq of the last event handed out (or the starting cursor).
    pub fn cursor(&self) -> Seq {
        self.query.after_seq
    }

    /// The next event, waiting for one to be committed if needed. `None` only if the hub
    /// is gone.
    pub async fn next(&mut self) -> Result<Option<Arc<Event>>, StoreError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                self.query.after_seq = event.seq;
                return Ok(Some(event));
            }
            if self.replaying {
                self.replay_page().await?;
                continue;
            }
            match self.live.recv().await {
                Ok(event) => {
                    if event.seq > self.query.after_seq && self.matches(&event) {
                        self.query.after_seq = event.seq;
                        return Ok(Some(event));
                    }
                }
                // Fell behind the broadcast: the gap is in the store.
                Err(broadcast::error::RecvError::Lagged(_)) => self.replaying = true,
                Err(broadcast::error::RecvError::Closed) => return Ok(None),
            }
        }
    }

    fn matches(&self, event: &Event) -> bool {
        let q = &self.query;
        q.run_id
            .as_ref()
            .is_none_or(|r| event.run_id.as_ref() == Some(r))
            && q.invocation_id
                .as_ref()
                .is_none_or(|i| event.invocation_id.as_ref() == Some(i))
            && q.event_types
                .as_ref()
                .is_none_or(|types| types.contains(&event.event_type))
    }

    async fn replay_page(&mut self) -> Result<(), StoreError> {
        let query = EventQuery {
            limit: REPLAY_PAGE,
            ..self.query.clone()
        };
        let page = self.store.events(&query).await?;
        if (page.len() as i64) < REPLAY_PAGE {
            self.replaying = false;
        }
        self.pending.extend(page.into_iter().map(Arc::new));
        Ok(())
    }
}
