//! The webhook outbox as the store keeps it: rows written in the append that commits
//! their cause (a kept terminal status, an approval's answer), `session.idle` only when no
//! run of the session is left in progress, and deliveries leased to one worker at a time
//! across stores sharing the database. Run against both backends like the rest.

use std::time::Duration;

use session_log::outbox::{Attempt, DeliveryQuery, DeliveryStatus, Kind, Route};

use super::*;

store_suite!(
    outbox_rows_are_written_with_their_cause,
    deliveries_are_leased_to_one_worker_at_a_time,
);

fn route(endpoint: &str) -> Route {
    Route {
        endpoint: endpoint.to_owned(),
        kinds: Kind::ALL.to_vec(),
        accounts: None,
    }
}

async fn listed(store: &dyn Store, account: &str) -> Vec<(String, String)> {
    let query = DeliveryQuery {
        account_id: account.to_owned(),
        limit: 100,
        ..Default::default()
    };
    let (rows, total) = store.list_webhook_deliveries(&query).await.unwrap();
    assert_eq!(total as usize, rows.len());
    let mut kinds: Vec<(String, String)> = rows
        .into_iter()
        .map(|d| (d.kind, d.run_id.unwrap_or_default()))
        .collect();
    kinds.sort();
    kinds
}

fn pair(kind: &str, run: &str) -> (String, String) {
    (kind.to_owned(), run.to_owned())
}

async fn outbox_rows_are_written_with_their_cause(b: Backend) {
    let store = &*b.store;
    let (account, session) = (unique("acct"), unique("s"));
    // Nothing is written before routes are set.
    store
        .append(&[
            status(&account, &session, "r0", "i0", RunStatus::InProgress),
            status(&account, &session, "r0", "i0", RunStatus::Completed),
        ])
        .await
        .unwrap();
    assert!(listed(store, &account).await.is_empty());

    store.route_webhooks(vec![route(&unique("ep"))]);
    let mut waiting = status(&account, &session, "r1", "i1", RunStatus::RequiresAction);
    waiting.content["action"] = json!({"kind": "tool_approval", "request_id": "req-1",
                                       "tool": "deploy", "arguments": {"env": "prod"}});
    store
        .append(&[
            status(&account, &session, "r1", "i1", RunStatus::InProgress),
            delta(&account, &session, "hm"),
            waiting,
        ])
        .await
        .unwrap();
    // A second terminal status of the same invocation is dropped, and writes nothing.
    let again = store
        .append(&[status(&account, &session, "r1", "i1", RunStatus::Failed)])
        .await
        .unwrap();
    assert!(again[0].is_none());
    let resolved = NewEvent::new(
        &account,
        &session,
        EventType::ApprovalResolved,
        json!({"request_id": "req-1", "run_id": "r1", "decision": "approve",
               "by": {"subject": "ann"}}),
    );
    store.append(&[resolved]).await.unwrap();
    assert_eq!(
        listed(store, &account).await,
        vec![
            pair("approval.requested", "r1"),
            pair("approval.resolved", "r1"),
            pair("session.idle", "r1"),
        ]
    );

    // Two runs open at once: the first one's end leaves the session busy (no idle), the
    // second one's leaves it idle.
    store
        .append(&[
            status(&account, &session, "r2", "i2", RunStatus::InProgress),
            status(&account, &session, "r3", "i3", RunStatus::InProgress),
        ])
        .await
        .unwrap();
    store
        .append(&[status(&account, &session, "r2", "i2", RunStatus::Completed)])
        .await
        .unwrap();
    store
        .append(&[
            delta(&account, &session, "x"),
            status(&account, &session, "r3", "i3", RunStatus::Interrupted),
        ])
        .await
        .unwrap();
    let rows = listed(store, &account).await;
    assert_eq!(
        rows,
        vec![
            pair("approval.requested", "r1"),
            pair("approval.resolved", "r1"),
            pair("run.completed", "r2"),
            pair("run.failed", "r3"),
            pair("session.idle", "r1"),
            pair("session.idle", "r3"),
        ]
    );
    // The payload says what was asked, without its arguments.
    let query = DeliveryQuery {
        account_id: account.clone(),
        kind: Some("approval.requested".into()),
        limit: 10,
        ..Default::default()
    };
    let (rows, _) = store.list_webhook_deliveries(&query).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, "pending");
    // Another account sees none of them.
    assert!(listed(store, &unique("other")).await.is_empty());
    // Deleting the session deletes its deliveries.
    let removal = session_log::Removal {
        deletion_id: unique("del"),
        account_id: account.clone(),
        scope: session_log::Scope::Session(session.clone()),
        by: "test".into(),
    };
    let deleted = store.remove(&removal).await.unwrap();
    assert!(
        matches!(deleted, session_log::Deletion::Removed(_)),
        "{deleted:?}"
    );
    assert!(listed(store, &account).await.is_empty());
}

async fn deliveries_are_leased_to_one_worker_at_a_time(b: Backend) {
    let stores = b.replicas(2).await;
    let endpoint = unique("ep");
    for s in &stores {
        s.route_webhooks(vec![route(&endpoint)]);
    }
    let account = unique("acct");
    for i in 0..10 {
        let session = format!("s{i}");
        let (run, inv) = (format!("r{i}"), format!("i{i}"));
        stores[i % 2]
            .append(&[
                status(&account, &session, &run, &inv, RunStatus::InProgress),
                status(&account, &session, &run, &inv, RunStatus::Completed),
            ])
            .await
            .unwrap();
    }
    // 20 rows (run.completed and session.idle of each run), claimed by two workers at
    // once: each row by exactly one of them.
    let lease = Duration::from_secs(30);
    let (a, b2) = tokio::join!(
        stores[0].claim_webhook_deliveries(&endpoint, "w-a", lease, 8),
        stores[1].claim_webhook_deliveries(&endpoint, "w-b", lease, 8),
    );
    let (a, b2) = (a.unwrap(), b2.unwrap());
    let mut ids: Vec<&str> = a.iter().chain(&b2).map(|c| c.event_id.as_str()).collect();
    ids.sort();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "no row went to both workers");
    let rest = stores[0]
        .claim_webhook_deliveries(&endpoint, "w-a", lease, 50)
        .await
        .unwrap();
    assert_eq!(n + rest.len(), 20, "every row is claimed once");

    let now = chrono::Utc::now().timestamp_millis();
    let delivered = Attempt {
        at_ms: now,
        status: DeliveryStatus::Delivered,
        next_attempt_ms: now,
        status_code: Some(204),
        error: None,
    };
    let first = &a.first().or(b2.first()).unwrap().event_id;
    let holder = if !a.is_empty() { "w-a" } else { "w-b" };
    let other = if holder == "w-a" { "w-b" } else { "w-a" };
    assert!(!stores[0]
        .finish_webhook_delivery(&endpoint, first, other, &delivered)
        .await
        .unwrap());
    assert!(stores[0]
        .finish_webhook_delivery(&endpoint, first, holder, &delivered)
        .await
        .unwrap());

    // A retry is not due before its time; a released lease makes a row due at once.
    let retry = Attempt {
        status: DeliveryStatus::Pending,
        next_attempt_ms: now + 60_000,
        status_code: Some(500),
        error: Some("answered 500".into()),
        ..delivered.clone()
    };
    let second = &rest[0].event_id;
    assert!(stores[0]
        .finish_webhook_delivery(&endpoint, second, "w-a", &retry)
        .await
        .unwrap());
    stores[1].release_webhook_leases("w-a").await.unwrap();
    stores[1].release_webhook_leases("w-b").await.unwrap();
    let again = stores[1]
        .claim_webhook_deliveries(&endpoint, "w-c", Duration::from_millis(1), 50)
        .await
        .unwrap();
    assert_eq!(
        again.len(),
        18,
        "all but the delivered one and the one waiting to retry"
    );
    assert!(again
        .iter()
        .all(|c| &c.event_id != first && &c.event_id != second));
    // A lease that ran out is taken over; its holder's record is refused.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let taken = stores[0]
        .claim_webhook_deliveries(&endpoint, "w-d", lease, 1)
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    assert!(!stores[0]
        .finish_webhook_delivery(&endpoint, &taken[0].event_id, "w-c", &delivered)
        .await
        .unwrap());
    let query = DeliveryQuery {
        account_id: account.clone(),
        status: Some("delivered".into()),
        limit: 50,
        ..Default::default()
    };
    let (rows, total) = stores[0].list_webhook_deliveries(&query).await.unwrap();
    assert_eq!(total, 1);
    assert_eq!(rows[0].attempts, 1);
    assert_eq!(rows[0].last_status_code, Some(204));
    assert!(rows[0].delivered_at.is_some());
    let query = DeliveryQuery {
        status: Some("pending".into()),
        ..query
    };
    let (rows, _) = stores[0].list_webhook_deliveries(&query).await.unwrap();
    let waiting = rows.iter().find(|d| &d.event_id == second).unwrap();
    assert_eq!(waiting.attempts, 1);
    assert_eq!(waiting.last_error.as_deref(), Some("answered 500"));
    assert!(waiting.next_attempt_at.is_some());
}
