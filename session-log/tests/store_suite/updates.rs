//! Session updates as the store serves them: a session's latest `session_metadata` is its
//! metadata, a `session_deleted` hides it from the listing and from history reads (the
//! events stay), and an `item_deleted` takes the item off every branch. Run against both
//! backends like the rest of the suite.

use serde_json::json;
use session_log::branch::DELETED_POSITION;
use session_log::history::Lineage;
use session_log::{EventType, NewEvent};

use super::*;

store_suite!(
    metadata_and_deletion_are_read_with_the_session,
    a_deleted_item_is_on_no_branch,
    migrations_are_dated,
);

/// What the gateway dates an earlier release's stream ids by.
async fn migrations_are_dated(b: Backend) {
    let store = &*b.store;
    let at = store.migrated_at("idempotency keys").await.unwrap();
    let at = at.expect("the store took it");
    let now = chrono::Utc::now();
    assert!(at <= now && at > now - chrono::Duration::days(3650), "{at}");
    assert_eq!(store.migrated_at("no such migration").await.unwrap(), None);
}

fn update(account: &str, session: &str, kind: EventType, content: serde_json::Value) -> NewEvent {
    NewEvent::new(account, session, kind, content).with_metadata(json!({ "actor": "key:a" }))
}

async fn metadata_and_deletion_are_read_with_the_session(b: Backend) {
    let store = &*b.store;
    let account = unique("acct");
    let (kept, gone) = (unique("kept"), unique("gone"));
    let first = json!({ "metadata": { "topic": "a" } });
    let second = json!({ "metadata": { "topic": "b" } });
    store
        .append(&[
            update(&account, &kept, EventType::SessionMetadata, first),
            message(&account, &kept, "user", "hello"),
            update(&account, &kept, EventType::SessionMetadata, second),
            message(&account, &gone, "user", "bye"),
        ])
        .await
        .unwrap();
    let session = store.session(&account, &kept).await.unwrap().unwrap();
    assert_eq!(
        session.metadata,
        Some(json!({ "topic": "b" })),
        "the latest wins"
    );
    assert!(!session.deleted);
    let plain = store.session(&account, &gone).await.unwrap().unwrap();
    assert_eq!(plain.metadata, None);
    assert_eq!(
        store
            .list_sessions(&account, &Default::default(), 0, 10)
            .await
            .unwrap()
            .1,
        2
    );

    store
        .append(&[update(
            &account,
            &gone,
            EventType::SessionDeleted,
            json!({}),
        )])
        .await
        .unwrap();
    let deleted = store.session(&account, &gone).await.unwrap().unwrap();
    assert!(deleted.deleted, "the store still knows it, as deleted");
    let (listed, total) = store
        .list_sessions(&account, &Default::default(), 0, 10)
        .await
        .unwrap();
    assert_eq!(total, 1);
    assert_eq!(
        listed
            .iter()
            .map(|s| s.session_id.as_str())
            .collect::<Vec<_>>(),
        [kept.as_str()]
    );
    assert!(
        Lineage::resolve(store, &account, &gone)
            .await
            .unwrap()
            .is_none(),
        "no history read finds it"
    );
    let events = store
        .events(&EventQuery::session(&account, &gone))
        .await
        .unwrap();
    assert_eq!(events.len(), 2, "the log keeps it");
}

async fn a_deleted_item_is_on_no_branch(b: Backend) {
    let store = &*b.store;
    let account = unique("acct");
    let session = unique("sess");
    let committed = store
        .append(&[
            message(&account, &session, "user", "one"),
            message(&account, &session, "user", "two"),
            message(&account, &session, "user", "three"),
        ])
        .await
        .unwrap();
    let two = committed[1].as_ref().unwrap().seq;
    store
        .append(&[update(
            &account,
            &session,
            EventType::ItemDeleted,
            json!({ "item_id": format!("item_{two}"), DELETED_POSITION: two }),
        )])
        .await
        .unwrap();
    let lineage = Lineage::resolve(store, &account, &session)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        lineage.deleted_items(store).await.unwrap(),
        std::iter::once(two).collect()
    );
    let history = lineage.history(store, None).await.unwrap();
    let texts: Vec<&str> = history
        .events
        .iter()
        .filter(|e| e.event_type == EventType::Message)
        .map(|e| e.text())
        .collect();
    assert_eq!(texts, ["one", "three"]);
}
