//! Removals larger than one transaction, and the tombstones removals leave: an erasure
//! of more sessions than a transaction takes is purged in chunks, never shows a session
//! half-removed, and finishes when asked again after an interruption; the retention
//! sweep prunes tombstones past their keep. Run against both backends like the rest.

use session_log::event::ForkPoint;
use session_log::retention::{self, RetentionConfig};
use session_log::{ArchivedFilter, Deletion, Removal, Scope, SessionFilter};

use super::*;

store_suite!(
    an_erasure_larger_than_a_transaction_is_never_half_visible_and_a_rerun_finishes_it,
    the_sweep_prunes_tombstones_older_than_their_keep,
);

/// More sessions than one transaction of a removal purges (`removal::CHUNK`, 100).
const SESSIONS: usize = 250;

async fn raw_execute(b: &Backend, sql: &str) {
    match &b.raw {
        Raw::Sqlite(pool) => sqlx::raw_sql(sql).execute(pool).await.map(|_| ()),
        Raw::Postgres(pool) => sqlx::raw_sql(sql).execute(pool).await.map(|_| ()),
    }
    .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn raw_count(b: &Backend, sql: &str, account: &str) -> i64 {
    match &b.raw {
        Raw::Sqlite(pool) => sqlx::query_scalar(sql).bind(account).fetch_one(pool).await,
        Raw::Postgres(pool) => sqlx::query_scalar(sql).bind(account).fetch_one(pool).await,
    }
    .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

async fn listed(store: &dyn Store, account: &str, archived: ArchivedFilter) -> i64 {
    let filter = SessionFilter {
        archived,
        ..Default::default()
    };
    store
        .list_sessions(account, &filter, 0, 1)
        .await
        .expect("list")
        .1
}

async fn an_erasure_larger_than_a_transaction_is_never_half_visible_and_a_rerun_finishes_it(
    b: Backend,
) {
    let store = &*b.store;
    let account = unique("acct");
    let ids: Vec<String> = (0..SESSIONS).map(|i| format!("s{i:03}")).collect();
    let mut batch = Vec::new();
    for id in &ids {
        batch.push(message(&account, id, "user", "a private question"));
        batch.push(message(&account, id, "assistant", "a private answer"));
    }
    store.append(&batch).await.expect("seed");
    // A fork of the first session, purged before it (a fork never outlives its parent).
    let fork = "s999-fork".to_owned();
    let point = ForkPoint {
        session_id: ids[0].clone(),
        seq: 2,
        checkpoint_id: "c".into(),
    };
    store
        .create_session(&NewEvent::new(
            &account,
            &fork,
            EventType::SessionFork,
            point.content(),
        ))
        .await
        .expect("fork")
        .expect("a new fork");

    // The removal fails half-way: deleting the session `s150` (the second chunk) aborts.
    let trigger = format!("stop_{}", account.replace('-', "_"));
    let poison = "s150";
    match &b.raw {
        Raw::Sqlite(_) => {
            raw_execute(
                &b,
                &format!(
                    "CREATE TRIGGER {trigger} BEFORE DELETE ON sessions \
                     WHEN old.account_id = '{account}' AND old.session_id = '{poison}' \
                     BEGIN SELECT RAISE(ABORT, 'interrupted'); END"
                ),
            )
            .await
        }
        Raw::Postgres(_) => {
            raw_execute(
                &b,
                &format!(
                    "CREATE FUNCTION {trigger}() RETURNS trigger LANGUAGE plpgsql AS $$ \
                     BEGIN IF old.account_id = '{account}' AND old.session_id = '{poison}' \
                     THEN RAISE EXCEPTION 'interrupted'; END IF; RETURN old; END $$; \
                     CREATE TRIGGER {trigger} BEFORE DELETE ON sessions \
                     FOR EACH ROW EXECUTE FUNCTION {trigger}()"
                ),
            )
            .await
        }
    }
    let removal = |id: &str| Removal {
        deletion_id: id.to_owned(),
        account_id: account.clone(),
        scope: Scope::Account,
        by: "test".into(),
    };
    let first = store.remove(&removal(&unique("del"))).await;
    assert!(first.is_err(), "the removal was interrupted: {first:?}");

    // Half-way: some sessions are gone, whole; none of the rest is in the default
    // listing; every session left is whole (its two messages, or the fork's one event).
    let left = listed(store, &account, ArchivedFilter::Include).await;
    assert!(
        0 < left && left < SESSIONS as i64,
        "interrupted half-way: {left} left"
    );
    assert_eq!(listed(store, &account, ArchivedFilter::Exclude).await, 0);
    let per_session = raw_count(
        &b,
        "SELECT COUNT(*) FROM (SELECT session_id FROM events WHERE account_id = $1 \
         GROUP BY session_id HAVING COUNT(*) <> 2 AND session_id <> 's999-fork') AS x",
        &account,
    )
    .await;
    assert_eq!(per_session, 0, "no session is half-removed");
    let fork_left = all_events(store, &account, &fork).await;
    assert!(fork_left.is_empty(), "the fork went in the first chunk");
    assert_eq!(
        raw_count(
            &b,
            "SELECT COUNT(*) FROM deletions WHERE account_id = $1",
            &account
        )
        .await,
        0,
        "the audit row is written last"
    );

    // Asked again, it finishes: nothing of the account is left, and the audit row counts
    // what this run removed.
    match &b.raw {
        Raw::Sqlite(_) => raw_execute(&b, &format!("DROP TRIGGER {trigger}")).await,
        Raw::Postgres(_) => {
            raw_execute(
                &b,
                &format!("DROP TRIGGER {trigger} ON sessions; DROP FUNCTION {trigger}()"),
            )
            .await
        }
    }
    let again = store.remove(&removal("del-again")).await.expect("rerun");
    let Deletion::Removed(removed) = again else {
        panic!("{again:?}")
    };
    assert_eq!(removed.session_ids.len() as i64, left);
    assert_eq!(removed.events, 2 * left);
    for table in ["sessions", "events", "invocations"] {
        let sql = format!("SELECT COUNT(*) FROM {table} WHERE account_id = $1");
        assert_eq!(raw_count(&b, &sql, &account).await, 0, "{table}");
    }
    assert_eq!(
        raw_count(
            &b,
            "SELECT COUNT(*) FROM removed_sessions WHERE account_id = $1",
            &account
        )
        .await,
        SESSIONS as i64 + 1,
        "a tombstone per session"
    );
    assert_eq!(listed(store, &account, ArchivedFilter::Include).await, 0);
}

async fn the_sweep_prunes_tombstones_older_than_their_keep(b: Backend) {
    let store = &*b.store;
    let account = unique("acct");
    let (old, recent) = ("old", "recent");
    store
        .append(&[
            message(&account, old, "user", "hi"),
            message(&account, recent, "user", "hi"),
        ])
        .await
        .expect("seed");
    for (i, session) in [old, recent].into_iter().enumerate() {
        let removal = Removal {
            deletion_id: format!("del-{i}-{account}"),
            account_id: account.clone(),
            scope: Scope::Session(session.into()),
            by: "test".into(),
        };
        let outcome = store.remove(&removal).await.expect("remove");
        assert!(matches!(outcome, Deletion::Removed(_)), "{outcome:?}");
    }
    // One removed three days ago, as its tombstone says.
    let three_days_ago = chrono::Utc::now() - chrono::Duration::days(3);
    match &b.raw {
        Raw::Sqlite(pool) => {
            // As the store writes times (the text sqlx gives a `DateTime<Utc>`).
            sqlx::query(
                "UPDATE removed_sessions SET removed_at = ? WHERE account_id = ? AND session_id = ?",
            )
            .bind(three_days_ago)
            .bind(&account)
            .bind(old)
            .execute(pool)
            .await
            .map(|_| ())
        }
        Raw::Postgres(pool) => sqlx::query(
            "UPDATE removed_sessions SET removed_at = $1 WHERE account_id = $2 AND session_id = $3",
        )
        .bind(three_days_ago)
        .bind(&account)
        .bind(old)
        .execute(pool)
        .await
        .map(|_| ()),
    }
    .expect("age the tombstone");
    // The sweeper's lease may be held by an earlier run's owner (a benchmark's, for
    // hours): free it, as its expiry would.
    raw_execute(&b, "UPDATE retention_sweeper SET until_ms = 0").await;
    let config = RetentionConfig {
        // Nothing is idle that long: the sweep removes no session, it only prunes.
        max_idle: Duration::from_secs(100 * 365 * 86_400),
        accounts: Default::default(),
        interval: Duration::from_secs(60),
        batch: 100,
        tombstones: Duration::from_secs(2 * 86_400),
    };
    let swept = retention::sweep(
        store,
        &unique("sweeper"),
        &config,
        &|| unique("del"),
        &|_| {},
    )
    .await
    .expect("sweep");
    assert_eq!(swept, 0);
    let kept: Vec<String> = match &b.raw {
        Raw::Sqlite(pool) => {
            sqlx::query_scalar("SELECT session_id FROM removed_sessions WHERE account_id = ?")
                .bind(&account)
                .fetch_all(pool)
                .await
        }
        Raw::Postgres(pool) => {
            sqlx::query_scalar("SELECT session_id FROM removed_sessions WHERE account_id = $1")
                .bind(&account)
                .fetch_all(pool)
                .await
        }
    }
    .expect("read tombstones");
    assert_eq!(
        kept,
        [recent],
        "the 3-day-old tombstone is pruned, the new one kept"
    );
}
