//! The hub: per-session broadcast of committed events, and `Subscription`, which replays a
//! session from the store after a cursor and then follows the live broadcast with no gap
//! and no duplicate.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use tokio::sync::broadcast;

use crate::event::{Event, Seq};
use crate::health::{Health, OUTAGE_GRACE};
use crate::store::{EventQuery, Store, StoreError};

/// Live events of a session are buffered this deep per subscriber; a subscriber that
/// falls further behind re-reads the gap from the store. A commit carries what a run's
/// agent sent while the previous commit was written, a few events at the rates
/// benchmarked; a larger burst costs its subscribers one store read. Every followed
/// session pays for the ring (32 bytes a slot; idle streams are counted in KiB).
const CHANNEL_CAPACITY: usize = 32;
/// Replay reads the log in pages of this many events.
const REPLAY_PAGE: i64 = 1000;

/// A replay page being read.
type PageRead = Pin<Box<dyn Future<Output = Result<Vec<Event>, StoreError>> + Send>>;

/// Broadcasts committed events to the subscribers of their session. The writer publishes
/// what this process commits; across replicas, `tail` publishes what others commit. Two
/// sources may publish one session's events out of order or twice: subscribers detect
/// both (seqs are dense per session) and re-read the store over a gap.
#[derive(Clone, Default)]
pub struct Hub {
    /// Channels by account, then session: looked up by `&str` for every committed event,
    /// so publishing allocates nothing for sessions nobody follows.
    accounts: Arc<Mutex<Accounts>>,
    /// Whether the store writes: a subscriber waiting for the next event gives up once an
    /// outage has lasted [`OUTAGE_GRACE`] instead of hanging until the disk has room.
    health: Health,
}

type Accounts = HashMap<String, HashMap<String, Channel>>;

struct Channel {
    tx: broadcast::Sender<Arc<Event>>,
    /// Highest seq published to this channel (0: none yet).
    through: Seq,
}

impl Hub {
    pub fn new() -> Self {
        Self::default()
    }

    /// The store's health, as the writer reports it.
    pub fn health(&self) -> &Health {
        &self.health
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Accounts> {
        self.accounts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn channels(accounts: &Accounts) -> impl Iterator<Item = (&str, &str, &Channel)> {
        accounts.iter().flat_map(|(a, sessions)| {
            sessions
                .iter()
                .map(move |(s, c)| (a.as_str(), s.as_str(), c))
        })
    }

    /// Hands committed events to current subscribers, in order.
    pub fn publish<'a>(&self, events: impl IntoIterator<Item = &'a Event>) {
        let mut accounts = self.lock();
        if accounts.is_empty() {
            return;
        }
        for event in events {
            let Some(sessions) = accounts.get_mut(&event.account_id) else {
                continue;
            };
            let Some(channel) = sessions.get_mut(&event.session_id) else {
                continue;
            };
            channel.through = channel.through.max(event.seq);
            if channel.tx.send(Arc::new(event.clone())).is_err() {
                // Nobody listens any more: forget the channel.
                sessions.remove(&event.session_id);
                if sessions.is_empty() {
                    accounts.remove(&event.account_id);
                }
            }
        }
    }

    fn receiver(&self, account_id: &str, session_id: &str) -> Live {
        let rx = self
            .lock()
            .entry(account_id.to_owned())
            .or_default()
            .entry(session_id.to_owned())
            .or_insert_with(|| Channel {
                tx: broadcast::channel(CHANNEL_CAPACITY).0,
                through: 0,
            })
            .tx
            .subscribe();
        Live {
            rx,
            _following: Following {
                hub: self.clone(),
                account_id: account_id.to_owned(),
                session_id: session_id.to_owned(),
            },
        }
    }

    /// Number of sessions the hub keeps a channel for (followed or not yet forgotten).
    pub fn channels_kept(&self) -> usize {
        self.lock().values().map(HashMap::len).sum()
    }

    /// For a session with live subscribers here: the highest seq published to them (0 if
    /// none yet). `None` when nobody here follows the session.
    pub fn followed_through(&self, account_id: &str, session_id: &str) -> Option<Seq> {
        let accounts = self.lock();
        let channel = accounts.get(account_id)?.get(session_id)?;
        (channel.tx.receiver_count() > 0).then_some(channel.through)
    }

    /// Every session with live subscribers here, with its `followed_through`.
    pub fn followed_sessions(&self) -> Vec<(String, String, Seq)> {
        Self::channels(&self.lock())
            .filter(|(_, _, c)| c.tx.receiver_count() > 0)
            .map(|(a, s, c)| (a.to_owned(), s.to_owned(), c.through))
            .collect()
    }

    /// Number of sessions with live subscribers.
    pub fn active_sessions(&self) -> usize {
        Self::channels(&self.lock())
            .filter(|(_, _, c)| c.tx.receiver_count() > 0)
            .count()
    }

    /// Number of live subscribers, over all sessions.
    pub fn subscribers(&self) -> usize {
        Self::channels(&self.lock())
            .map(|(_, _, c)| c.tx.receiver_count())
            .sum()
    }
}

/// One subscriber's receiver of its session's channel.
struct Live {
    rx: broadcast::Receiver<Arc<Event>>,
    /// Declared after `rx`, so dropped after it: see [`Following`].
    _following: Following,
}

/// A subscriber's hold on its session's channel: the last one to let go removes the
/// channel, so a session nobody follows any more costs the hub nothing (a channel was
/// otherwise kept until the session's next commit, for good after its last run).
struct Following {
    hub: Hub,
    account_id: String,
    session_id: String,
}

impl Drop for Following {
    fn drop(&mut self) {
        let mut accounts = self.hub.lock();
        let Some(sessions) = accounts.get_mut(&self.account_id) else {
            return;
        };
        // Under the lock nobody subscribes meanwhile: no receiver left means none.
        let unfollowed = sessions
            .get(&self.session_id)
            .is_some_and(|c| c.tx.receiver_count() == 0);
        if unfollowed {
            sessions.remove(&self.session_id);
            if sessions.is_empty() {
                accounts.remove(&self.account_id);
            }
        }
    }
}

/// Every committed event matching a query after a cursor: first what the store holds,
/// then what the hub broadcasts, each exactly once and in seq order.
pub struct Subscription {
    store: Arc<dyn Store>,
    live: Live,
    health: Health,
    query: EventQuery,
    pending: VecDeque<Arc<Event>>,
    replaying: bool,
    /// Every event of the session up to this seq, matching or not, has been handed out or
    /// skipped, as has every event up to the cursor. Live events must continue the higher
    /// of the two exactly: anything else is a duplicate (skipped) or a gap (re-read from
    /// the store, which holds every seq below a committed one).
    session_seen: Seq,
    /// While replaying over a gap: the live event that revealed it. Once the replay is
    /// done, everything up to it is covered.
    covers: Option<Seq>,
    /// The page after a full one, read while the full one is sent: the cursor it reads
    /// after, and the read.
    next_page: Option<(Seq, PageRead)>,
}

/// A session followed live from before an append, waiting to learn what was appended.
pub struct BeforeAppend {
    store: Arc<dyn Store>,
    live: Live,
    health: Health,
}

impl BeforeAppend {
    /// The subscription of `query` (same session; its cursor just before `appended`), where
    /// `appended` is what the caller committed after [`Subscription::before_append`]. Those
    /// that match are handed out first. When they are the session's events of one batch
    /// (consecutive seqs), everything after them arrives live: nothing is read from the
    /// store, where a subscription opened after the append reads it once.
    pub fn start(self, query: EventQuery, appended: &[Event]) -> Subscription {
        let mut subscription = Subscription::replaying(self.store, self.live, self.health, query);
        let mine: Vec<&Event> = appended
            .iter()
            .filter(|e| {
                e.account_id == subscription.query.account_id
                    && e.session_id == subscription.query.session_id
            })
            .collect();
        let after = subscription.query.after_seq;
        let consecutive = mine
            .iter()
            .enumerate()
            .all(|(i, e)| e.seq == after + 1 + i as Seq);
        if let (true, Some(last)) = (consecutive, mine.last()) {
            subscription.session_seen = last.seq;
            subscription.replaying = false;
            let matching = mine.into_iter().filter(|e| subscription.matches(e));
            subscription.pending = matching.map(|e| Arc::new(e.clone())).collect();
        }
        subscription
    }
}

impl Subscription {
    /// Subscribes to live events first, then replays, so nothing committed in between is
    /// missed. `query.after_seq` is the cursor; `query.limit` is ignored.
    pub fn open(store: Arc<dyn Store>, hub: &Hub, query: EventQuery) -> Self {
        let live = hub.receiver(&query.account_id, &query.session_id);
        Self::replaying(store, live, hub.health.clone(), query)
    }

    /// Replays from the cursor, then follows `live` (opened before the replay's read).
    fn replaying(store: Arc<dyn Store>, live: Live, health: Health, query: EventQuery) -> Self {
        Subscription {
            store,
            live,
            health,
            query,
            pending: VecDeque::new(),
            replaying: true,
            session_seen: 0,
            covers: None,
            next_page: None,
        }
    }

    /// Starts following `account_id`'s session before the caller appends the events it
    /// will start from (a run's first events): see [`BeforeAppend::start`].
    pub fn before_append(
        store: Arc<dyn Store>,
        hub: &Hub,
        account_id: &str,
        session_id: &str,
    ) -> BeforeAppend {
        BeforeAppend {
            store,
            live: hub.receiver(account_id, session_id),
            health: hub.health.clone(),
        }
    }

    /// Seq of the last event handed out (or the starting cursor).
    pub fn cursor(&self) -> Seq {
        self.query.after_seq
    }

    /// The next event, waiting for one to be committed if needed. `None` only if the hub
    /// is gone. While the store cannot write, the wait ends with
    /// [`StoreError::Outage`] once the outage has lasted [`OUTAGE_GRACE`]: nothing can
    /// come until it ends, and the caller says so rather than hang.
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
            let received = tokio::select! {
                received = self.live.rx.recv() => received,
                () = self.health.outage_lasting(OUTAGE_GRACE) => {
                    let fault = self.health.outage().map_or(crate::Fault::Unreachable, |o| o.fault);
                    return Err(StoreError::Outage(fault));
                }
            };
            match received {
                Ok(event) => {
                    // A live event right after the cursor needs no store read either: a
                    // run's stream reads the store once, when it opens.
                    let seen = self.session_seen.max(self.query.after_seq);
                    match event.seq {
                        s if s <= seen => continue, // published twice, or before the cursor
                        s if s == seen + 1 => self.session_seen = s,
                        // After a gap: the store has everything up to this event, read
                        // from the cursor there.
                        _ => {
                            self.covers = Some(event.seq);
                            self.replaying = true;
                            continue;
                        }
                    }
                    if event.seq > self.query.after_seq && self.matches(&event) {
                        self.query.after_seq = event.seq;
                        return Ok(Some(event));
                    }
                }
                // Fell behind the broadcast: the gap is in the store.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    self.session_seen = 0;
                    self.replaying = true;
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(None),
            }
        }
    }

    /// The next event if one is already buffered (a replay page), without waiting, so a
    /// caller can send a page of events in one write.
    pub fn ready(&mut self) -> Option<Arc<Event>> {
        let event = self.pending.pop_front()?;
        self.query.after_seq = event.seq;
        Some(event)
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
        let page = match self.next_page.take() {
            Some((after, read)) if after == self.query.after_seq => read.await?,
            _ => self.read_page(self.query.after_seq).await?,
        };
        if (page.len() as i64) < REPLAY_PAGE {
            self.replaying = false;
            if let Some(covers) = self.covers.take() {
                self.session_seen = self.session_seen.max(covers);
            }
        } else if let Some(last) = page.last() {
            // More is likely: start reading it now, so the store works on the next page
            // while this one is rendered and sent. It is a read like any other, just
            // earlier: what is committed after it arrives live or is found over a gap.
            let mut read = self.read_page(last.seq);
            // Polled once here so that a store handing the query to another thread (sqlx's
            // SQLite worker, the gateway's core runtime) starts it now; `replay_page`
            // awaits it properly when this page is consumed.
            match read.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                Poll::Ready(result) => {
                    let ready: PageRead = Box::pin(std::future::ready(result));
                    self.next_page = Some((last.seq, ready));
                }
                Poll::Pending => self.next_page = Some((last.seq, read)),
            }
        }
        self.pending.extend(page.into_iter().map(Arc::new));
        Ok(())
    }

    fn read_page(&self, after_seq: Seq) -> PageRead {
        let store = self.store.clone();
        let query = EventQuery {
            after_seq,
            limit: REPLAY_PAGE,
            ..self.query.clone()
        };
        Box::pin(async move { store.events(&query).await })
    }
}
