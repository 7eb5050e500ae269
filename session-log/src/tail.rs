//! Live tail across replicas on PostgreSQL: after commits the writer NOTIFYs a pointer
//! (account, session, first and last seq) per session; every replica LISTENs and, for the
//! sessions its clients follow, reads the new rows and publishes them to its hub. The
//! payload is never the events themselves (NOTIFY carries at most 8000 bytes, and reading
//! the rows keeps one source of truth). The same connection carries cancel requests for
//! runs driven by another replica.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sqlx::postgres::PgListener;

use crate::event::{Event, Seq};
use crate::hub::Hub;
use crate::store::{EventQuery, Store, StoreError};

/// Channel of commit pointers.
pub const EVENTS_CHANNEL: &str = "tether_events";
/// Channel of cancel requests: `[account_id, invocation_id]`.
pub const CANCEL_CHANNEL: &str = "tether_cancel";

/// A payload PostgreSQL accepts is shorter than 8000 bytes; ids beyond that (an absurd
/// account id) are not announced, and followers of that session catch up at reconnect.
const MAX_PAYLOAD: usize = 7900;
/// Rows read per query when catching a session up.
const PAGE: i64 = 1000;

/// Commits waiting to be announced, as one span of seqs per session however many commits
/// they come from.
#[derive(Debug, Default)]
pub struct Spans {
    /// `(account, session)` → (first, last) seq.
    by_session: HashMap<(String, String), (Seq, Seq)>,
    /// Sessions in the order they were first added, so pointers go out in commit order.
    order: Vec<(String, String)>,
}

impl Spans {
    pub fn add<'a>(&mut self, events: impl IntoIterator<Item = &'a Event>) {
        for e in events {
            let key = (e.account_id.clone(), e.session_id.clone());
            match self.by_session.get_mut(&key) {
                Some(span) => *span = (span.0.min(e.seq), span.1.max(e.seq)),
                None => {
                    self.order.push(key.clone());
                    self.by_session.insert(key, (e.seq, e.seq));
                }
            }
        }
    }

    /// The pointers, `[account, session, first, last]` each, in the order the sessions
    /// were committed; leaves `self` empty.
    pub fn take_pointers(&mut self) -> Vec<String> {
        let mut spans = std::mem::take(&mut self.by_session);
        std::mem::take(&mut self.order)
            .into_iter()
            .filter_map(|key| {
                let (first, last) = spans.remove(&key)?;
                Some(json!([key.0, key.1, first, last]).to_string())
            })
            .filter(|p| p.len() <= MAX_PAYLOAD)
            .collect()
    }
}

/// One pointer per session of a committed batch: `[account, session, first, last]`.
pub fn commit_pointers<'a>(events: impl IntoIterator<Item = &'a Event>) -> Vec<String> {
    let mut spans = Spans::default();
    spans.add(events);
    spans.take_pointers()
}

/// A cancel request for the replica that drives `invocation_id`.
pub fn cancel_payload(account_id: &str, invocation_id: &str) -> String {
    json!([account_id, invocation_id]).to_string()
}

fn parse_pointer(payload: &str) -> Option<(String, String, Seq, Seq)> {
    serde_json::from_str(payload).ok()
}

fn parse_cancel(payload: &str) -> Option<(String, String)> {
    serde_json::from_str(payload).ok()
}

/// Follows other replicas' commits until the process ends: LISTENs on `url`, and
/// reconnects (catching every followed session up from the store) when the connection
/// drops, since notifications sent meanwhile are lost. `on_cancel(account, invocation)`
/// is called for every cancel request.
pub async fn follow(
    url: String,
    store: Arc<dyn Store>,
    hub: Hub,
    on_cancel: impl Fn(&str, &str) + Send + 'static,
) {
    let mut backoff = Duration::from_millis(200);
    loop {
        match listen(&url, &*store, &hub, &on_cancel).await {
            Ok(()) => return,
            Err(error) => {
                tracing::warn!(%error, "live tail connection lost; reconnecting");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

async fn listen(
    url: &str,
    store: &dyn Store,
    hub: &Hub,
    on_cancel: &(impl Fn(&str, &str) + Send),
) -> Result<(), StoreError> {
    let mut listener = PgListener::connect(url).await?;
    listener
        .listen_all([EVENTS_CHANNEL, CANCEL_CHANNEL])
        .await?;
    // Whatever was committed while we were not listening.
    catch_up_all(store, hub).await;
    loop {
        // `try_recv` reconnects by itself and says so with `None`: notifications sent in
        // between are lost, so every followed session is caught up from the store.
        match listener.try_recv().await? {
            None => catch_up_all(store, hub).await,
            Some(n) if n.channel() == CANCEL_CHANNEL => {
                if let Some((account, invocation)) = parse_cancel(n.payload()) {
                    on_cancel(&account, &invocation);
                }
            }
            Some(n) => {
                let Some((account, session, first, last)) = parse_pointer(n.payload()) else {
                    tracing::debug!(payload = n.payload(), "ignoring a malformed commit pointer");
                    continue;
                };
                let Some(through) = hub.followed_through(&account, &session) else {
                    continue; // nobody here follows this session
                };
                if last <= through {
                    continue; // published already (our own commit, or read before)
                }
                // With nothing published yet, start at the batch: older rows are what a
                // new subscriber replays itself.
                let after = if through == 0 { first - 1 } else { through };
                if let Err(error) = catch_up(store, hub, &account, &session, after).await {
                    tracing::warn!(%error, account_id = %account, session_id = %session, "cannot read another replica's events");
                }
            }
        }
    }
}

async fn catch_up_all(store: &dyn Store, hub: &Hub) {
    for (account, session, through) in hub.followed_sessions() {
        if let Err(error) = catch_up(store, hub, &account, &session, through).await {
            tracing::warn!(%error, account_id = %account, session_id = %session, "cannot catch a followed session up");
        }
    }
}

/// Publishes the session's events after `after`, in order.
async fn catch_up(
    store: &dyn Store,
    hub: &Hub,
    account_id: &str,
    session_id: &str,
    mut after: Seq,
) -> Result<(), StoreError> {
    loop {
        let query = EventQuery {
            after_seq: after,
            limit: PAGE,
            ..EventQuery::session(account_id, session_id)
        };
        let page = store.events(&query).await?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = last.seq;
        hub.publish(&page);
        if (page.len() as i64) < PAGE {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventType, NewEvent};

    /// A committed delta of account `acct`, session `s`.
    fn e(s: &str, seq: Seq) -> Event {
        let new = NewEvent::new("acct", s, EventType::TextDelta, json!({}));
        Event::committed(new, seq, chrono::Utc::now())
    }

    #[test]
    fn one_pointer_per_session_spanning_its_seqs() {
        let pointers = commit_pointers(&[e("x", 4), e("y", 1), e("x", 5), e("x", 6)]);
        assert_eq!(pointers, vec![r#"["acct","x",4,6]"#, r#"["acct","y",1,1]"#]);
        assert_eq!(
            parse_pointer(&pointers[0]),
            Some(("acct".into(), "x".into(), 4, 6))
        );
        assert_eq!(parse_pointer("nope"), None);
    }

    #[test]
    fn commits_announced_together_give_one_pointer_per_session() {
        let mut spans = Spans::default();
        spans.add(&[e("y", 7), e("x", 2)]);
        spans.add(&[e("x", 3), e("x", 4)]);
        spans.add(&[e("z", 1), e("y", 8)]);
        assert_eq!(
            spans.take_pointers(),
            vec![
                r#"["acct","y",7,8]"#,
                r#"["acct","x",2,4]"#,
                r#"["acct","z",1,1]"#
            ]
        );
        assert!(spans.take_pointers().is_empty(), "taken once");
    }
}
