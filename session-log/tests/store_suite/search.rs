//! Finding sessions: every filter of the one listing (user, agent, times, last run's
//! status, metadata, archived, text), with stable pages; and the text index kept in step
//! with removals and deleted items (what is deleted cannot be found, and the index's own
//! tables no longer hold it). Run against both backends like the rest of the suite.

use chrono::{Duration, Utc};
use serde_json::json;
use session_log::{
    ArchivedFilter, Deletion, EventType, NewEvent, Removal, RunStatus, Scope, SessionFilter,
};

use super::*;

store_suite!(
    sessions_are_found_by_every_filter,
    removed_and_deleted_text_cannot_be_found,
);

/// An ADK event of `user` talking to `agent` (the metadata the ADK surface records).
fn adk(account: &str, session: &str, user: &str, agent: &str, text: &str) -> NewEvent {
    message(account, session, "user", text)
        .with_metadata(json!({ "adk": { "user_id": user, "app_name": agent, "author": "user" } }))
}

/// The ids a listing returns, in order, and its total.
async fn ids(store: &dyn Store, account: &str, filter: SessionFilter) -> (Vec<String>, i64) {
    let (sessions, total) = store.list_sessions(account, &filter, 0, 100).await.unwrap();
    (sessions.into_iter().map(|s| s.session_id).collect(), total)
}

async fn sessions_are_found_by_every_filter(b: Backend) {
    let store = &*b.store;
    let account = unique("acct");
    let other = unique("other");
    let start = Utc::now() - Duration::seconds(1);
    // Appended one at a time, so each is more recently active than the one before.
    let batches = vec![
        // s1: ADK, user u1 with agent a1, a completed run, about paris.
        vec![
            adk(
                &account,
                "s1",
                "u1",
                "a1",
                "What is the weather in Paris today?",
            ),
            status(&account, "s1", "r1", "i1", RunStatus::InProgress),
            message(&account, "s1", "assistant", "Sunny in Paris."),
            status(&account, "s1", "r1", "i1", RunStatus::Completed),
        ],
        // s2: user u2, agent a1, a failed run.
        vec![
            adk(&account, "s2", "u2", "a1", "book a flight to Rome"),
            status(&account, "s2", "r2", "i2", RunStatus::InProgress),
            status(&account, "s2", "r2", "i2", RunStatus::Failed),
        ],
        // s3: no ADK, metadata topic=travel, a run in progress.
        vec![
            NewEvent::new(
                &account,
                "s3",
                EventType::SessionMetadata,
                json!({ "metadata": { "topic": "travel", "tier": "gold" } }),
            ),
            message(&account, "s3", "user", "trains from Paris to Rome"),
            status(&account, "s3", "r3", "i3", RunStatus::InProgress),
        ],
        // s4: nothing but a message; archived below.
        vec![message(&account, "s4", "user", "paris archive")],
        // Another account's session of the same id says the same words, and one of its
        // own: never listed.
        vec![adk(&other, "s1", "u1", "a1", "Paris weather in Lagos")],
    ];
    for batch in batches {
        store.append(&batch).await.unwrap();
    }
    assert!(store
        .set_archived(&account, "s4", Some(Utc::now()))
        .await
        .unwrap());
    let all = SessionFilter::default();
    let f = |edit: fn(&mut SessionFilter)| {
        let mut filter = SessionFilter::default();
        edit(&mut filter);
        filter
    };
    let owned = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    assert_eq!(
        ids(store, &account, all.clone()).await,
        (owned(&["s3", "s2", "s1"]), 3)
    );
    let (listed, _) = store.list_sessions(&account, &all, 0, 10).await.unwrap();
    let s1 = listed.iter().find(|s| s.session_id == "s1").unwrap();
    assert_eq!(
        (
            s1.user_id.as_deref(),
            s1.agent_id.as_deref(),
            s1.last_run_status
        ),
        (Some("u1"), Some("a1"), Some(RunStatus::Completed))
    );
    let s3 = listed.iter().find(|s| s.session_id == "s3").unwrap();
    assert_eq!(
        s3.metadata,
        Some(json!({ "topic": "travel", "tier": "gold" }))
    );
    assert_eq!(s3.last_run_status, Some(RunStatus::InProgress));

    let cases: Vec<(SessionFilter, Vec<&str>)> = vec![
        (f(|f| f.user_id = Some("u1".into())), vec!["s1"]),
        (f(|f| f.agent_id = Some("a1".into())), vec!["s2", "s1"]),
        (f(|f| f.agent_id = Some("a2".into())), vec![]),
        (
            f(|f| f.last_run_status = Some(RunStatus::Failed)),
            vec!["s2"],
        ),
        (
            f(|f| f.last_run_status = Some(RunStatus::InProgress)),
            vec!["s3"],
        ),
        (
            f(|f| f.metadata = vec![("topic".into(), "travel".into())]),
            vec!["s3"],
        ),
        (
            f(|f| {
                f.metadata = vec![
                    ("topic".into(), "travel".into()),
                    ("tier".into(), "silver".into()),
                ]
            }),
            vec![],
        ),
        (f(|f| f.archived = ArchivedFilter::Only), vec!["s4"]),
        (
            f(|f| f.archived = ArchivedFilter::Include),
            vec!["s4", "s3", "s2", "s1"],
        ),
        // Words, in any order and case, all in one message.
        (f(|f| f.text = Some("paris".into())), vec!["s3", "s1"]),
        (f(|f| f.text = Some("ROME, trains".into())), vec!["s3"]),
        (f(|f| f.text = Some("sunny paris".into())), vec!["s1"]),
        (f(|f| f.text = Some("sunny rome".into())), vec![]),
        (f(|f| f.text = Some("lagos".into())), vec![]),
        (
            f(|f| {
                f.text = Some("paris".into());
                f.archived = ArchivedFilter::Include;
            }),
            vec!["s4", "s3", "s1"],
        ),
        (
            f(|f| {
                f.text = Some("paris".into());
                f.user_id = Some("u1".into());
            }),
            vec!["s1"],
        ),
    ];
    for (filter, expected) in cases {
        let (got, total) = ids(store, &account, filter.clone()).await;
        assert_eq!(got, owned(&expected), "{filter:?}");
        assert_eq!(total, expected.len() as i64, "{filter:?}");
    }

    // Times: all were created and active after `start`; none before it.
    let later = Utc::now() + Duration::seconds(1);
    for (filter, n) in [
        (
            SessionFilter {
                created_after: Some(start),
                ..all.clone()
            },
            3,
        ),
        (
            SessionFilter {
                created_before: Some(start),
                ..all.clone()
            },
            0,
        ),
        (
            SessionFilter {
                active_after: Some(later),
                ..all.clone()
            },
            0,
        ),
        (
            SessionFilter {
                active_before: Some(later),
                ..all.clone()
            },
            3,
        ),
    ] {
        assert_eq!(
            ids(store, &account, filter.clone()).await.1,
            n,
            "{filter:?}"
        );
    }
    let s2 = listed.iter().find(|s| s.session_id == "s2").unwrap();
    let since_s2 = SessionFilter {
        active_after: Some(s2.updated_at),
        ..all.clone()
    };
    assert_eq!(ids(store, &account, since_s2).await.0, owned(&["s3", "s2"]));

    // Pages of a filtered listing are stable: page by page is the whole listing.
    let paris = f(|f| {
        f.text = Some("paris".into());
        f.archived = ArchivedFilter::Include;
    });
    let mut paged = Vec::new();
    for offset in 0..3 {
        let (page, total) = store
            .list_sessions(&account, &paris, offset, 1)
            .await
            .unwrap();
        assert_eq!(total, 3);
        paged.extend(page.into_iter().map(|s| s.session_id));
    }
    assert_eq!(paged, owned(&["s4", "s3", "s1"]));
}

/// What the text search can still find of a session, read raw: PostgreSQL's index rows,
/// SQLite's searchable message events.
async fn indexed(b: &Backend, account: &str, session: &str) -> i64 {
    match &b.raw {
        Raw::Sqlite(pool) => {
            // SQLite keeps no index of words (it would keep removed words in the file):
            // a search reads the message events a session still has, as counted here.
            let fts: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM sqlite_master WHERE sql LIKE '%USING fts%'",
            )
            .fetch_one(pool)
            .await
            .unwrap();
            assert_eq!(fts, 0, "no full-text index on SQLite");
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM events AS e WHERE e.account_id = $1 \
                 AND e.session_id = $2 AND e.event_type = 'message' \
                 AND NOT EXISTS (SELECT 1 FROM events AS d WHERE d.account_id = e.account_id \
                 AND d.session_id = e.session_id AND d.event_type = 'item_deleted' \
                 AND json_extract(d.content_json, '$.seq') = e.seq)",
            )
            .bind(account)
            .bind(session)
            .fetch_one(pool)
            .await
            .unwrap()
        }
        Raw::Postgres(pool) => sqlx::query_scalar(
            "SELECT COUNT(*) FROM message_text WHERE account_id = $1 AND session_id = $2",
        )
        .bind(account)
        .bind(session)
        .fetch_one(pool)
        .await
        .unwrap(),
    }
}

async fn removed_and_deleted_text_cannot_be_found(b: Backend) {
    let store = &*b.store;
    let account = unique("acct");
    let word = |w: &str| SessionFilter {
        text: Some(w.to_owned()),
        ..SessionFilter::default()
    };
    store
        .append(&[
            message(&account, "gone", "user", "zanzibar secret plans"),
            message(&account, "kept", "user", "zanzibar holiday"),
            message(&account, "kept", "assistant", "the password is swordfish"),
        ])
        .await
        .unwrap();
    assert_eq!(ids(store, &account, word("zanzibar")).await.1, 2);
    // Whole words on both stores: a part of one finds nothing.
    assert_eq!(ids(store, &account, word("zanzi")).await.1, 0);
    assert_eq!(ids(store, &account, word("Swordfish!")).await.1, 1);
    assert_eq!(indexed(&b, &account, "gone").await, 1);

    // A hard delete takes the session's text out of the index.
    let removal = Removal {
        deletion_id: unique("del"),
        account_id: account.clone(),
        scope: Scope::Session("gone".into()),
        by: "test".into(),
    };
    assert!(matches!(
        store.remove(&removal).await.unwrap(),
        Deletion::Removed(_)
    ));
    assert_eq!(ids(store, &account, word("zanzibar")).await.0, ["kept"]);
    assert_eq!(ids(store, &account, word("secret")).await.1, 0);
    assert_eq!(indexed(&b, &account, "gone").await, 0);

    // A deleted item (seq 2 of `kept`) is no longer found; the other message still is.
    store
        .append(&[NewEvent::new(
            &account,
            "kept",
            EventType::ItemDeleted,
            json!({ "item_id": "item_2", "position": 2, "seq": 2 }),
        )])
        .await
        .unwrap();
    assert_eq!(ids(store, &account, word("swordfish")).await.1, 0);
    assert_eq!(ids(store, &account, word("holiday")).await.0, ["kept"]);
    assert_eq!(indexed(&b, &account, "kept").await, 1);
}
