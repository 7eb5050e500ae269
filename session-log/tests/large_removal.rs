//! An account's erasure on PostgreSQL at a size one transaction cannot take: a removal
//! locks each session it purges (the lock a run's claim takes), and PostgreSQL's lock
//! table holds `max_locks_per_transaction` × connections locks in all, so an account of
//! 100,000 sessions removed in one transaction failed with `out of shared memory`. On a
//! private cluster whose lock table is small (10 per transaction), 2,000 sessions are
//! enough to show it; the removal purges a chunk of sessions per transaction instead.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;

use serde_json::json;
use session_log::postgres::PgStore;
use session_log::{Deletion, EventType, NewEvent, Removal, Scope, SessionFilter, Store};

const SESSIONS: usize = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_erasure_takes_more_sessions_than_the_lock_table_holds() {
    let Some(cluster) = pg_cluster::Cluster::start_with(&[
        ("max_locks_per_transaction", "10"),
        ("max_connections", "20"),
    ]) else {
        return;
    };
    let store = PgStore::connect(&cluster.url()).await.expect("connect");
    let account = "big";
    let batch: Vec<NewEvent> = (0..SESSIONS)
        .map(|i| {
            NewEvent::new(
                account,
                &format!("s{i:05}"),
                EventType::Message,
                json!({ "text": "a private question" }),
            )
            .with_role("user")
        })
        .collect();
    store.append(&batch).await.expect("seed");
    let removal = Removal {
        deletion_id: "del-big".into(),
        account_id: account.into(),
        scope: Scope::Account,
        by: "test".into(),
    };
    let outcome = store.remove(&removal).await.expect("the erasure succeeds");
    let Deletion::Removed(removed) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(removed.session_ids.len(), SESSIONS);
    assert_eq!(removed.events, SESSIONS as i64);
    let (_, total) = store
        .list_sessions(account, &SessionFilter::default(), 0, 1)
        .await
        .expect("list");
    assert_eq!(total, 0);
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE account_id = $1")
        .bind(account)
        .fetch_one(store.pool())
        .await
        .expect("count");
    assert_eq!(left, 0);
    let audit: i64 = sqlx::query_scalar("SELECT sessions FROM deletions WHERE deletion_id = $1")
        .bind("del-big")
        .fetch_one(store.pool())
        .await
        .expect("audit row");
    assert_eq!(audit, SESSIONS as i64);
}
