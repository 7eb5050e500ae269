//! Forks, branches and compaction as the store serves them (`session_log::history`):
//! run against both backends like the rest of the suite.

use serde_json::{json, Value};
use session_log::checkpoints::RESUMED_FROM;
use session_log::history::{fork, ContextCheckpoint, ForkError, Lineage};
use session_log::{Event, EventType, ForkPoint, NewEvent, RunStatus, Store};

use super::*;

store_suite!(
    forks_read_their_parent_up_to_the_fork_point,
    forks_are_refused_without_changing_anything,
    a_resume_supersedes_what_followed_its_checkpoint,
    a_compaction_stands_for_what_it_covers,
    checkpoints_are_found_by_id_or_latest,
    readable_view_shows_history_rows,
);

fn checkpoint(account: &str, session: &str, run: &str, inv: &str, id: &str) -> NewEvent {
    NewEvent::new(
        account,
        session,
        EventType::RunCheckpoint,
        json!({ "checkpoint_id": id, "phase": "turn_completed" }),
    )
    .in_run(run, inv)
}

/// One finished turn: the user's text, in_progress, the answer, a checkpoint, completed.
fn turn(account: &str, session: &str, n: usize, user: &str, answer: &str) -> Vec<NewEvent> {
    let (run, inv) = (format!("run{n}-{session}"), format!("inv{n}-{session}"));
    vec![
        message(account, session, "user", user).in_run(&run, &inv),
        status(account, session, &run, &inv, RunStatus::InProgress),
        delta(account, session, answer).in_run(&run, &inv),
        message(account, session, "assistant", answer).in_run(&run, &inv),
        checkpoint(account, session, &run, &inv, &format!("ckpt{n}-{session}")),
        status(account, session, &run, &inv, RunStatus::Completed),
    ]
}

fn texts(events: &[Event]) -> Vec<(String, i64, String)> {
    events
        .iter()
        .filter(|e| e.event_type == EventType::Message)
        .map(|e| (e.session_id.clone(), e.seq, e.text().to_owned()))
        .collect()
}

async fn append(store: &dyn Store, batch: Vec<NewEvent>) -> Vec<Event> {
    store
        .append(&batch)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.expect("committed"))
        .collect()
}

async fn lineage(store: &dyn Store, account: &str, session: &str) -> Lineage {
    Lineage::resolve(store, account, session)
        .await
        .unwrap()
        .expect("session exists")
}

async fn forks_read_their_parent_up_to_the_fork_point(b: Backend) {
    let store = &*b.store;
    let account = unique("acct");
    let s = unique("s");
    append(
        store,
        turn(&account, &s, 1, "My project is named zebra42.", "OK."),
    )
    .await;
    append(
        store,
        turn(&account, &s, 2, "And the colour is teal.", "Noted."),
    )
    .await;

    // Forked at turn 1's checkpoint (seq 5), after turn 2 happened.
    let f = unique("f");
    let ckpt1 = format!("ckpt1-{s}");
    let forked = fork(store, &account, &s, Some(&ckpt1), &f).await.unwrap();
    let point = ForkPoint {
        session_id: s.clone(),
        seq: 5,
        checkpoint_id: ckpt1.clone(),
    };
    assert_eq!(forked.from, point);
    assert_eq!(
        (forked.event.seq, forked.event.event_type),
        (1, EventType::SessionFork)
    );
    let session = store.session(&account, &f).await.unwrap().unwrap();
    assert_eq!(session.forked_from.as_ref(), Some(&point));
    assert_eq!(session.last_seq, 1);
    assert_eq!(
        store
            .session(&account, &s)
            .await
            .unwrap()
            .unwrap()
            .forked_from,
        None
    );
    let (listed, _) = store
        .list_sessions(&account, &Default::default(), 0, 10)
        .await
        .unwrap();
    let listed_fork = listed.iter().find(|x| x.session_id == f).unwrap();
    assert_eq!(listed_fork.forked_from.as_ref(), Some(&point));

    // The fork and the original go on independently.
    append(
        store,
        turn(&account, &f, 3, "My project is now named koala7.", "OK."),
    )
    .await;
    append(store, turn(&account, &s, 4, "Still there?", "Yes.")).await;

    let lf = lineage(store, &account, &f).await;
    let all = lf.events(store, 0, None, None, i64::MAX).await.unwrap();
    assert_eq!(
        texts(&all),
        vec![
            (s.clone(), 1, "My project is named zebra42.".into()),
            (s.clone(), 4, "OK.".into()),
            (f.clone(), 2, "My project is now named koala7.".into()),
            (f.clone(), 5, "OK.".into()),
        ],
        "the fork's history is its parent's up to seq 5, then its own"
    );
    assert!(all.iter().all(|e| e.session_id == f || e.seq <= 5));
    let positions: Vec<i64> = all.iter().map(|e| lf.position(e)).collect();
    assert_eq!(
        positions,
        (1..=12).collect::<Vec<_>>(),
        "inherited 1..=5, own 6.."
    );
    assert_eq!(lf.last_position(), 12);
    assert!(lf.is_inherited(&all[0]) && !lf.is_inherited(&all[5]));
    // A cursor in the fork's positions, and a page across the fork point.
    let page = lf.events(store, 4, None, None, 3).await.unwrap();
    assert_eq!(
        page.iter()
            .map(|e| (e.session_id == f, e.seq))
            .collect::<Vec<_>>(),
        vec![(false, 5), (true, 1), (true, 2)]
    );

    // The original never sees the fork's events.
    let ls = lineage(store, &account, &s).await;
    let original = ls.events(store, 0, None, None, i64::MAX).await.unwrap();
    assert!(original.iter().all(|e| e.session_id == s));
    assert!(texts(&original)
        .iter()
        .any(|t| t.2 == "And the colour is teal."));
    assert!(!texts(&original).iter().any(|t| t.2.contains("koala7")));

    // A fork of the fork, at its own checkpoint, and one at a checkpoint it inherited.
    let g = unique("g");
    let ckpt3 = format!("ckpt3-{f}");
    let forked = fork(store, &account, &f, Some(&ckpt3), &g).await.unwrap();
    assert_eq!(
        (forked.from.session_id.as_str(), forked.from.seq),
        (f.as_str(), 6)
    );
    let lg = lineage(store, &account, &g).await;
    let texts_g: Vec<String> = texts(&lg.events(store, 0, None, None, i64::MAX).await.unwrap())
        .into_iter()
        .map(|t| t.2)
        .collect();
    assert_eq!(
        texts_g,
        [
            "My project is named zebra42.",
            "OK.",
            "My project is now named koala7.",
            "OK."
        ]
    );
    assert_eq!(lg.own_position(1), 5 + 6 + 1);

    let h = unique("h");
    let forked = fork(store, &account, &f, Some(&ckpt1), &h).await.unwrap();
    assert_eq!(
        forked.from, point,
        "an inherited checkpoint forks the session that holds it"
    );

    // Without a checkpoint id: the latest of the session's history.
    let latest = unique("latest");
    let forked = fork(store, &account, &f, None, &latest).await.unwrap();
    assert_eq!(
        (
            forked.from.session_id.as_str(),
            forked.from.checkpoint_id.as_str()
        ),
        (f.as_str(), ckpt3.as_str())
    );
    let fresh = unique("fresh");
    let forked = fork(store, &account, &h, None, &fresh).await.unwrap();
    assert_eq!(
        forked.from, point,
        "a fork with no checkpoint of its own: its fork point's"
    );

    // The history the agent gets: the fork's projection input.
    let history = lg.history(store, None).await.unwrap();
    assert_eq!(history.summary, None);
    assert_eq!(
        history
            .events
            .iter()
            .filter(|e| e.event_type == EventType::Message)
            .count(),
        4
    );
}

async fn forks_are_refused_without_changing_anything(b: Backend) {
    let store = &*b.store;
    let account = unique("acct");
    let s = unique("s");
    append(store, turn(&account, &s, 1, "hello", "hi")).await;
    let taken = unique("taken");
    append(store, vec![message(&account, &taken, "user", "mine")]).await;

    let refused = |r: Result<session_log::history::Forked, ForkError>| r.unwrap_err();
    let e = refused(fork(store, &account, &s, Some("ckpt-nope"), &unique("f")).await);
    assert!(matches!(e, ForkError::CheckpointNotFound { .. }), "{e}");
    let e = refused(fork(store, &account, "no-such", None, &unique("f")).await);
    assert!(matches!(e, ForkError::SessionNotFound(_)), "{e}");
    let e = refused(fork(store, &unique("other"), &s, None, &unique("f")).await);
    assert!(
        matches!(e, ForkError::SessionNotFound(_)),
        "another account's session: {e}"
    );
    let e = refused(fork(store, &account, &s, None, &taken).await);
    assert!(matches!(e, ForkError::SessionExists(_)), "{e}");
    let e = refused(fork(store, &account, &s, None, &s).await);
    assert!(matches!(e, ForkError::SessionExists(_)), "{e}");
    assert_eq!(all_events(store, &account, &taken).await.len(), 1);

    // A fork whose parent this account does not have (imported from another log) reads
    // as a session of its own.
    let orphan = unique("orphan");
    let point = ForkPoint {
        session_id: unique("elsewhere"),
        seq: 4,
        checkpoint_id: "ckpt-x".into(),
    };
    let first = NewEvent::new(&account, &orphan, EventType::SessionFork, point.content());
    store.create_session(&first).await.unwrap().unwrap();
    append(store, vec![message(&account, &orphan, "user", "mine")]).await;
    let lo = lineage(store, &account, &orphan).await;
    assert_eq!(lo.links().len(), 1);
    let own = lo.events(store, 0, None, None, i64::MAX).await.unwrap();
    assert_eq!(own.len(), 2);
    assert_eq!(
        store
            .session(&account, &taken)
            .await
            .unwrap()
            .unwrap()
            .forked_from,
        None
    );

    // A checkpoint of a run still running.
    let (run, inv) = (unique("run"), unique("inv"));
    append(
        store,
        vec![
            status(&account, &s, &run, &inv, RunStatus::InProgress),
            checkpoint(&account, &s, &run, &inv, "ckpt-open"),
        ],
    )
    .await;
    let f = unique("f");
    let e = refused(fork(store, &account, &s, Some("ckpt-open"), &f).await);
    match e {
        ForkError::RunInProgress {
            run_id,
            invocation_id,
            ..
        } => {
            assert_eq!((run_id, invocation_id), (run.clone(), inv.clone()));
        }
        other => panic!("{other}"),
    }
    let e = refused(fork(store, &account, &s, None, &f).await);
    assert!(
        matches!(e, ForkError::RunInProgress { .. }),
        "the latest is the open run's: {e}"
    );
    assert_eq!(
        store.session(&account, &f).await.unwrap(),
        None,
        "nothing was created"
    );
    let before = all_events(store, &account, &s).await.len();
    append(
        store,
        vec![status(&account, &s, &run, &inv, RunStatus::Completed)],
    )
    .await;
    assert!(fork(store, &account, &s, Some("ckpt-open"), &f)
        .await
        .is_ok());
    assert_eq!(
        all_events(store, &account, &s).await.len(),
        before + 1,
        "the parent is untouched"
    );
}

async fn a_resume_supersedes_what_followed_its_checkpoint(b: Backend) {
    let store = &*b.store;
    let account = unique("acct");
    let s = unique("s");
    let (r1, i1) = ("run1", "inv1");
    let tool_call = NewEvent::new(
        &account,
        &s,
        EventType::ToolCall,
        json!({"call_id": "call_1", "name": "lookup", "arguments": "{}"}),
    )
    .with_role("assistant")
    .in_run(r1, i1);
    let tool_result = |output: &str, inv: &str| {
        NewEvent::new(
            &account,
            &s,
            EventType::ToolResult,
            json!({"call_id": "call_1", "output": output}),
        )
        .with_role("tool")
        .in_run(r1, inv)
    };
    append(
        store,
        vec![
            message(&account, &s, "user", "tool:lookup").in_run(r1, i1),
            status(&account, &s, r1, i1, RunStatus::InProgress),
            tool_call,
            checkpoint(&account, &s, r1, i1, "after-call"),
            tool_result("42", i1),
            message(&account, &s, "assistant", "superseded answer").in_run(r1, i1),
            status(&account, &s, r1, i1, RunStatus::Completed),
        ],
    )
    .await;
    append(
        store,
        turn(&account, &s, 2, "a later turn", "also superseded"),
    )
    .await;
    let mut resumed = status(&account, &s, r1, "inv3", RunStatus::InProgress);
    resumed.metadata = json!({ RESUMED_FROM: "after-call" });
    append(
        store,
        vec![
            tool_result("42", "inv3"),
            resumed,
            message(&account, &s, "assistant", "resumed answer").in_run(r1, "inv3"),
            status(&account, &s, r1, "inv3", RunStatus::Completed),
        ],
    )
    .await;
    append(store, turn(&account, &s, 4, "after the resume", "fine")).await;

    let ls = lineage(store, &account, &s).await;
    let history = ls.history(store, None).await.unwrap();
    let transcript: Vec<(i64, EventType, String)> = history
        .events
        .iter()
        .filter(|e| e.event_type.is_transcript())
        .map(|e| (e.seq, e.event_type, e.text().to_owned()))
        .collect();
    assert_eq!(
        transcript,
        vec![
            (1, EventType::Message, "tool:lookup".into()),
            (3, EventType::ToolCall, String::new()),
            (14, EventType::ToolResult, String::new()),
            (16, EventType::Message, "resumed answer".into()),
            (18, EventType::Message, "after the resume".into()),
            (21, EventType::Message, "fine".into()),
        ]
    );
    // Every event is still in the log; the branch says which are superseded.
    let all = ls.events(store, 0, None, None, i64::MAX).await.unwrap();
    assert_eq!(all.len(), 23);
    let (branch, _) = ls.branch(store, None).await.unwrap();
    let superseded: Vec<i64> = all
        .iter()
        .filter(|e| !branch.is_active(ls.position(e), e))
        .map(|e| e.seq)
        .collect();
    assert_eq!(superseded, (5..=13).collect::<Vec<_>>());
    // The history at the checkpoint is the branch it was on.
    let at = ls.history(store, Some(4)).await.unwrap();
    assert_eq!(
        at.events
            .iter()
            .filter(|e| e.event_type.is_transcript())
            .count(),
        2
    );

    // A fork at the resumed branch's end inherits the branch, not what it superseded.
    let f = unique("f");
    fork(store, &account, &s, Some(&format!("ckpt4-{s}")), &f)
        .await
        .unwrap();
    let lf = lineage(store, &account, &f).await;
    let inherited: Vec<String> = lf
        .history(store, None)
        .await
        .unwrap()
        .events
        .iter()
        .filter(|e| e.event_type == EventType::Message)
        .map(|e| e.text().to_owned())
        .collect();
    assert_eq!(
        inherited,
        ["tool:lookup", "resumed answer", "after the resume", "fine"]
    );
}

async fn a_compaction_stands_for_what_it_covers(b: Backend) {
    let store = &*b.store;
    let account = unique("acct");
    let s = unique("s");
    for n in 1..=3 {
        append(
            store,
            turn(
                &account,
                &s,
                n,
                &format!("question {n}"),
                &format!("answer {n}"),
            ),
        )
        .await;
    }
    // Covers turns 1 and 2 (seqs 1..=12): turn 3 is the uncompressed tail.
    let checkpoint = ContextCheckpoint {
        summary: "questions 1 and 2 were answered".into(),
        seq_start: 1,
        seq_end: 12,
    };
    let [boundary, marker] = checkpoint.events(&account, &s, json!({"reason": "manual"}));
    append(store, vec![boundary, marker]).await;
    append(store, turn(&account, &s, 4, "question 4", "answer 4")).await;

    let ls = lineage(store, &account, &s).await;
    let history = ls.history(store, None).await.unwrap();
    assert_eq!(
        history.summary.as_deref(),
        Some("questions 1 and 2 were answered")
    );
    assert_eq!(history.compacted_through, 12);
    let kept: Vec<&str> = history
        .events
        .iter()
        .filter(|e| e.event_type == EventType::Message)
        .map(Event::text)
        .collect();
    assert_eq!(kept, ["question 3", "answer 3", "question 4", "answer 4"]);
    // Nothing is deleted.
    assert_eq!(all_events(store, &account, &s).await.len(), 26);

    // A fork after the compaction inherits it; one from before does not.
    let (after, before) = (unique("after"), unique("before"));
    fork(store, &account, &s, Some(&format!("ckpt4-{s}")), &after)
        .await
        .unwrap();
    fork(store, &account, &s, Some(&format!("ckpt3-{s}")), &before)
        .await
        .unwrap();
    let h = lineage(store, &account, &after)
        .await
        .history(store, None)
        .await
        .unwrap();
    assert_eq!(
        h.summary.as_deref(),
        Some("questions 1 and 2 were answered")
    );
    let h = lineage(store, &account, &before)
        .await
        .history(store, None)
        .await
        .unwrap();
    assert_eq!(h.summary, None);
    assert_eq!(
        h.events
            .iter()
            .filter(|e| e.event_type == EventType::Message)
            .count(),
        6
    );

    // The marker older versions wrote still works: summary through its `through_seq`.
    let old = unique("old");
    append(store, turn(&account, &old, 1, "one", "two")).await;
    append(
        store,
        vec![NewEvent::new(
            &account,
            &old,
            EventType::Compaction,
            json!({"summary": "said one, two", "through_seq": 4}),
        )],
    )
    .await;
    append(store, vec![message(&account, &old, "user", "three")]).await;
    let h = lineage(store, &account, &old)
        .await
        .history(store, None)
        .await
        .unwrap();
    assert_eq!(h.summary.as_deref(), Some("said one, two"));
    let kept: Vec<&str> = h
        .events
        .iter()
        .filter(|e| e.event_type == EventType::Message)
        .map(Event::text)
        .collect();
    assert_eq!(kept, ["three"]);
}

async fn checkpoints_are_found_by_id_or_latest(b: Backend) {
    let store = &*b.store;
    let account = unique("acct");
    let s = unique("s");
    assert_eq!(
        store
            .checkpoint_event(&account, &s, None, None)
            .await
            .unwrap(),
        None
    );
    append(store, turn(&account, &s, 1, "a", "b")).await;
    append(store, turn(&account, &s, 2, "c", "d")).await;
    let id = |e: Option<Event>| {
        e.and_then(|e| {
            e.content
                .get("checkpoint_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
    };
    let found = store
        .checkpoint_event(&account, &s, None, None)
        .await
        .unwrap();
    assert_eq!(found.as_ref().map(|e| e.seq), Some(11));
    assert_eq!(id(found), Some(format!("ckpt2-{s}")));
    let found = store
        .checkpoint_event(&account, &s, None, Some(10))
        .await
        .unwrap();
    assert_eq!(id(found), Some(format!("ckpt1-{s}")));
    let by_id = store
        .checkpoint_event(&account, &s, Some(&format!("ckpt1-{s}")), None)
        .await
        .unwrap();
    assert_eq!(
        by_id.as_ref().map(|e| (e.seq, e.session_id.as_str())),
        Some((5, s.as_str()))
    );
    let beyond = store
        .checkpoint_event(&account, &s, Some(&format!("ckpt2-{s}")), Some(10))
        .await
        .unwrap();
    assert_eq!(beyond, None, "not past `until_seq`");
    let other = store
        .checkpoint_event(&unique("other"), &s, Some(&format!("ckpt1-{s}")), None)
        .await
        .unwrap();
    assert_eq!(other, None, "another account's checkpoint is not found");
}

async fn readable_view_shows_history_rows(b: Backend) {
    let store = &*b.store;
    let account = unique("acct");
    let s = unique("s");
    append(store, turn(&account, &s, 1, "a", "b")).await;
    let checkpoint = ContextCheckpoint {
        summary: "a was said".into(),
        seq_start: 1,
        seq_end: 4,
    };
    append(
        store,
        checkpoint
            .events(&account, &s, json!({"reason": "manual"}))
            .into(),
    )
    .await;
    let f = unique("f");
    fork(store, &account, &s, None, &f).await.unwrap();
    let rows = b.readable(&account, &s).await;
    let last: Vec<_> = rows[rows.len() - 2..]
        .iter()
        .map(|r| (r.seq, r.event_type.as_str(), r.message_text.as_deref()))
        .collect();
    assert_eq!(
        last,
        vec![
            (7, "compaction_boundary", Some("manual")),
            (8, "context_checkpoint", Some("a was said")),
        ]
    );
    let rows = b.readable(&account, &f).await;
    assert_eq!(
        rows.iter()
            .map(|r| (r.seq, r.event_type.as_str(), r.message_text.as_deref()))
            .collect::<Vec<_>>(),
        vec![(1, "session_fork", Some(s.as_str()))]
    );
}
