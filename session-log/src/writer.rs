//! The writer: the single task that commits events in batches (one transaction per batch,
//! group commit) and only then publishes them to the hub, so nothing reaches a client
//! before it is durable.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, Notify};

use crate::event::{Event, NewEvent};
use crate::health::Health;
use crate::histogram::Histogram;
use crate::hub::Hub;
use crate::store::{Appended, Store};

#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// Most events committed in one transaction.
    pub max_batch: usize,
    /// Requests that may wait for the writer before senders are held back.
    pub queue: usize,
    /// How long events nobody waits for (the tee's records of pass-through exchanges) may
    /// wait for more before they are committed; any event somebody waits for ends the
    /// wait at once.
    pub linger: Duration,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            max_batch: 1024,
            queue: 8192,
            linger: Duration::from_millis(5),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WriteError {
    #[error("the session log writer has stopped")]
    Closed,
    #[error("the session log writer queue is full")]
    Full,
}

/// Bounds of the batch-size histogram, in events.
pub const BATCH_SIZE_BOUNDS: [u64; 9] = [1, 2, 5, 10, 50, 100, 500, 1000, 5000];
/// Bounds of the commit-latency histogram, in microseconds (0.5 ms to 5 s).
pub const COMMIT_LATENCY_BOUNDS_US: [u64; 12] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    5_000_000,
];

/// Counters a metrics endpoint or benchmark can read.
#[derive(Debug)]
pub struct WriterStats {
    pub events_committed: AtomicU64,
    pub batches_committed: AtomicU64,
    pub commit_failures: AtomicU64,
    /// Events `try_submit` could not queue.
    pub dropped: AtomicU64,
    /// Events the database refused even alone (never committed).
    pub rejected: AtomicU64,
    /// Duration of the last commit, in microseconds.
    pub last_commit_us: AtomicU64,
    /// Events per committed transaction.
    pub batch_size: Histogram,
    /// Time of each successful `append`, in microseconds.
    pub commit_latency_us: Histogram,
    /// The last commit attempt failed and nothing has committed since.
    pub failing: AtomicBool,
}

impl Default for WriterStats {
    fn default() -> Self {
        WriterStats {
            events_committed: AtomicU64::new(0),
            batches_committed: AtomicU64::new(0),
            commit_failures: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            last_commit_us: AtomicU64::new(0),
            batch_size: Histogram::new(&BATCH_SIZE_BOUNDS),
            commit_latency_us: Histogram::new(&COMMIT_LATENCY_BOUNDS_US),
            failing: AtomicBool::new(false),
        }
    }
}

type Reply = oneshot::Sender<Vec<Event>>;

/// Attempts at a batch the database refuses (as opposed to cannot be reached) before it is
/// split to find the event it refuses.
const REFUSALS_BEFORE_SPLIT: u32 = 3;

/// Longest wait between two attempts at a batch the store failed.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Commits `events`, retrying until the store takes them, and returns where each went.
/// A store that cannot write (an outage: unreachable, busy, full, failing its disk,
/// read-only, corrupt; see [`crate::Fault`]) is retried for as long as it lasts, and never
/// costs an event: senders are held back by the bounded queue meanwhile, and `health`
/// tells everyone else so they refuse or end work instead of waiting. Only a batch the
/// database keeps refusing for what it holds (a constraint, a bad row) is split in
/// halves, so one bad event costs only itself — dropped, logged and counted — instead of
/// stalling every session.
fn append_with_retry<'a>(
    store: &'a dyn Store,
    events: &'a mut [NewEvent],
    stats: &'a WriterStats,
    health: &'a Health,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Appended> + Send + 'a>> {
    Box::pin(async move {
        let mut backoff = Duration::from_millis(50);
        let mut refusals = 0;
        loop {
            let started = Instant::now();
            match store.append_seqs(events).await {
                Ok(appended) => {
                    let us = started.elapsed().as_micros() as u64;
                    stats.last_commit_us.store(us, Ordering::Relaxed);
                    stats.commit_latency_us.observe(us);
                    stats.batch_size.observe(events.len() as u64);
                    stats.failing.store(false, Ordering::Relaxed);
                    health.committed();
                    return appended;
                }
                Err(error) => {
                    stats.failing.store(true, Ordering::Relaxed);
                    let failures = stats.commit_failures.fetch_add(1, Ordering::Relaxed) + 1;
                    let fault = error.fault();
                    tracing::error!(%error, fault = fault.as_str(), store = %store.describe(), events = events.len(), failures, "session log commit failed; retrying");
                    if fault.is_outage() {
                        health.commit_failed(fault);
                    } else {
                        refusals += 1;
                        if refusals >= REFUSALS_BEFORE_SPLIT {
                            if let [event] = &*events {
                                stats.rejected.fetch_add(1, Ordering::Relaxed);
                                tracing::error!(
                                    account_id = %event.account_id, session_id = %event.session_id,
                                    event_type = event.event_type.as_str(), "the store refuses this event; dropping it"
                                );
                                return Appended { placed: vec![None] };
                            }
                            let (left, right) = events.split_at_mut(events.len() / 2);
                            let mut appended = append_with_retry(store, left, stats, health).await;
                            let right = append_with_retry(store, right, stats, health).await;
                            appended.placed.extend(right.placed);
                            return appended;
                        }
                    }
                    tokio::time::sleep(backoff).await;
                    // Short enough that writes resume within a second or two of the store
                    // coming back (space freed, PostgreSQL up).
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    })
}

enum Request {
    Append {
        events: Vec<NewEvent>,
        reply: Option<Reply>,
        /// Nobody waits for these events: they may wait up to [`WriterConfig::linger`]
        /// for company.
        background: bool,
    },
    Flush(oneshot::Sender<()>),
}

impl Request {
    fn is_background(&self) -> bool {
        matches!(
            self,
            Request::Append {
                background: true,
                ..
            }
        )
    }
}

/// Handle to the writer task. Cheap to clone.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Request>,
    /// Rung after each request somebody waits for: it ends a wait for company (it wakes
    /// only a writer waiting then; one that is not finds the request queued).
    urgent: Arc<Notify>,
    stats: Arc<WriterStats>,
    health: Health,
}

impl Writer {
    /// Starts the writer task on the current runtime.
    pub fn spawn(store: Arc<dyn Store>, hub: Hub, config: WriterConfig) -> Writer {
        let (tx, rx) = mpsc::channel(config.queue.max(1));
        let stats = Arc::new(WriterStats::default());
        let urgent = Arc::new(Notify::new());
        let health = hub.health().clone();
        tokio::spawn(run(store, hub, config, rx, urgent.clone(), stats.clone()));
        Writer {
            tx,
            urgent,
            stats,
            health,
        }
    }

    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }

    /// Whether the store writes (see [`Health`]).
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Queues events and waits until they are committed; returns them with their seqs.
    /// Events the store dropped (a second terminal status) are absent.
    pub async fn append(&self, events: Vec<NewEvent>) -> Result<Vec<Event>, WriteError> {
        let (reply, committed) = oneshot::channel();
        self.send_urgent(Request::Append {
            events,
            reply: Some(reply),
            background: false,
        })
        .await?;
        committed.await.map_err(|_| WriteError::Closed)
    }

    /// Queues events without waiting for the commit; waits only for queue space.
    pub async fn submit(&self, events: Vec<NewEvent>) -> Result<(), WriteError> {
        self.send_urgent(Request::Append {
            events,
            reply: None,
            background: false,
        })
        .await
    }

    /// Queues events if there is room right now; never waits (for synchronous callers
    /// such as body filters). What cannot be queued is counted in `stats().dropped`.
    /// Nobody may wait for these events: they are committed within
    /// [`WriterConfig::linger`], with whatever else comes meanwhile.
    pub fn try_submit(&self, events: Vec<NewEvent>) -> Result<(), WriteError> {
        let n = events.len() as u64;
        self.tx
            .try_send(Request::Append {
                events,
                reply: None,
                background: true,
            })
            .map_err(|e| {
                self.stats.dropped.fetch_add(n, Ordering::Relaxed);
                match e {
                    mpsc::error::TrySendError::Full(_) => WriteError::Full,
                    mpsc::error::TrySendError::Closed(_) => WriteError::Closed,
                }
            })
    }

    /// Waits until everything queued before this call is committed.
    pub async fn flush(&self) -> Result<(), WriteError> {
        let (done, flushed) = oneshot::channel();
        self.send_urgent(Request::Flush(done)).await?;
        flushed.await.map_err(|_| WriteError::Closed)
    }

    /// Queues a request somebody waits for, and ends the writer's wait for company if it
    /// is in one.
    async fn send_urgent(&self, request: Request) -> Result<(), WriteError> {
        self.tx
            .send(request)
            .await
            .map_err(|_| WriteError::Closed)?;
        self.urgent.notify_waiters();
        Ok(())
    }
}

async fn run(
    store: Arc<dyn Store>,
    hub: Hub,
    config: WriterConfig,
    mut rx: mpsc::Receiver<Request>,
    urgent: Arc<Notify>,
    stats: Arc<WriterStats>,
) {
    let announcer = (store.backend() == "postgres").then(|| Announcer::spawn(store.clone()));
    let mut requests = Vec::with_capacity(256);
    let mut batch = Batch::default();
    let mut flushes = Vec::new();
    loop {
        if rx.recv_many(&mut requests, 256).await == 0 {
            return; // every handle dropped and the queue is empty
        }
        if requests.iter().all(Request::is_background) {
            wait_for_company(&mut rx, &mut requests, &urgent, config.linger).await;
        }
        for request in requests.drain(..) {
            match request {
                Request::Append { events, reply, .. } => {
                    if !batch.events.is_empty()
                        && batch.events.len() + events.len() > config.max_batch
                    {
                        batch.commit(&store, &hub, announcer.as_ref(), &stats).await;
                    }
                    batch.replies.push((reply, events.len()));
                    batch.events.extend(events);
                }
                Request::Flush(done) => flushes.push(done),
            }
        }
        batch.commit(&store, &hub, announcer.as_ref(), &stats).await;
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Lets records nobody waits for gather more for up to `linger`, so that at moderate load
/// the tee's exchanges share a transaction instead of paying one each (a commit costs
/// more than the few events in it). The writer sleeps meanwhile rather than waking for
/// each record as it comes; a request somebody waits for rings `urgent` and ends the wait
/// at once. Whatever is queued then joins the batch.
async fn wait_for_company(
    rx: &mut mpsc::Receiver<Request>,
    requests: &mut Vec<Request>,
    urgent: &Notify,
    linger: Duration,
) {
    // Listening before looking: a request queued after the look rings this.
    let rung = urgent.notified();
    tokio::pin!(rung);
    rung.as_mut().enable();
    let mut take_queued = |requests: &mut Vec<Request>| {
        while let Ok(request) = rx.try_recv() {
            requests.push(request);
        }
    };
    take_queued(requests);
    if requests.iter().all(Request::is_background) {
        tokio::select! {
            _ = tokio::time::sleep(linger) => {}
            _ = rung => {}
        }
        take_queued(requests);
    }
}

/// Tells other replicas about commits (a NOTIFY of pointers, see [`crate::tail`]) from a
/// task of its own, so the next batch never waits for it: one statement at a time, at most
/// one every [`ANNOUNCE_EVERY`], carrying every commit since the last, merged per session.
/// At a thousand commits a second, a statement per commit cost each delta about 0.3 ms at
/// 100 streams. A lost announcement only delays other replicas' subscribers until their
/// listener reconnects.
struct Announcer {
    shared: Arc<Announcements>,
}

#[derive(Default)]
struct Announcements {
    spans: std::sync::Mutex<crate::tail::Spans>,
    wake: tokio::sync::Notify,
    closed: AtomicBool,
}

impl Announcer {
    fn spawn(store: Arc<dyn Store>) -> Announcer {
        let shared = Arc::new(Announcements::default());
        tokio::spawn(announce(store, shared.clone()));
        Announcer { shared }
    }

    fn add<'a>(&self, events: impl IntoIterator<Item = &'a Event>) {
        if let Ok(mut spans) = self.shared.spans.lock() {
            spans.add(events);
        }
        self.shared.wake.notify_one();
    }
}

impl Drop for Announcer {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Relaxed);
        self.shared.wake.notify_one();
    }
}

async fn announce(store: Arc<dyn Store>, shared: Arc<Announcements>) {
    loop {
        shared.wake.notified().await;
        let pointers = match shared.spans.lock() {
            Ok(mut spans) => spans.take_pointers(),
            Err(_) => return,
        };
        if !pointers.is_empty() {
            if let Err(error) = store.notify(crate::tail::EVENTS_CHANNEL, &pointers).await {
                tracing::warn!(%error, "could not announce commits to other replicas");
            }
        }
        if shared.closed.load(Ordering::Relaxed) {
            return;
        }
        // Commits meanwhile go out together, in the next statement.
        tokio::time::sleep(ANNOUNCE_EVERY).await;
    }
}

/// The least time between two announcements: a commit waits at most this long for its
/// NOTIFY when the one before was this recent.
const ANNOUNCE_EVERY: Duration = Duration::from_millis(5);

/// Events waiting for the next transaction, and who waits for which of them.
#[derive(Default)]
struct Batch {
    events: Vec<NewEvent>,
    /// One entry per request, in order: its reply (if it waits) and its event count.
    replies: Vec<(Option<Reply>, usize)>,
}

impl Batch {
    async fn commit(
        &mut self,
        store: &Arc<dyn Store>,
        hub: &Hub,
        announcer: Option<&Announcer>,
        stats: &WriterStats,
    ) {
        if self.events.is_empty() {
            // Requests with no events still wait for an answer; dropping their reply would
            // read as `WriteError::Closed` although the writer is alive.
            for (reply, _) in self.replies.drain(..) {
                if let Some(reply) = reply {
                    let _ = reply.send(Vec::new());
                }
            }
            return;
        }
        let appended = append_with_retry(&**store, &mut self.events, stats, hub.health()).await;
        // The events move into their committed form: nothing is copied unless a
        // subscriber is listening.
        let committed = appended.events(self.events.drain(..));
        let published = || committed.iter().flatten();
        let n = published().count();
        stats
            .events_committed
            .fetch_add(n as u64, Ordering::Relaxed);
        stats.batches_committed.fetch_add(1, Ordering::Relaxed);
        hub.publish(published());
        if let Some(announcer) = announcer.filter(|_| n > 0) {
            announcer.add(published());
        }

        let mut committed = committed.into_iter();
        for (reply, n) in self.replies.drain(..) {
            let mine: Vec<Event> = committed.by_ref().take(n).flatten().collect();
            if let Some(reply) = reply {
                let _ = reply.send(mine);
            }
        }
    }
}
