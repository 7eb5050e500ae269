//! The motivating scenario: an agent that forgets everything between processes still
//! answers turn 2 from turn 1, because Tether hands it the history.

use session_log::{EventType, RunStatus};

use crate::harness::*;

fn seed_scenario(surface: Surface, protocol: &str, kind: StoreKind, stream: bool) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), protocol, &store.url, &[]);
    let url = format!("{}{}", tether.url(), surface.path());

    // Turn 1, with no session: Tether creates one and says which.
    let turn1 = surface.body("My project is named zebra42. Reply with OK.", None, stream);
    let (session, text1) = if stream {
        let sse = SseStream::post(&url, &turn1);
        assert_eq!(sse.status, 200);
        let session = sse.session_id.clone().expect("x-session-id header");
        let text: String = sse.collect().iter().map(|e| surface.delta(e)).collect();
        (session, text)
    } else {
        let reply = post_json(&url, &turn1);
        assert_eq!(reply.status, 200, "{}", reply.body);
        (
            reply.session_id.clone().expect("x-session-id header"),
            surface.text(&reply.json()),
        )
    };
    assert_eq!(text1.trim(), "OK.");

    // The agent process is stopped and a new one starts: all its memory is gone.
    let port = agent.kill();
    let agent = FakeAgent::start_on(port);

    let turn2 = surface.body("What is my project named?", Some(&session), stream);
    let text2 = if stream {
        let sse = SseStream::post(&url, &turn2);
        assert_eq!(sse.session_id.as_deref(), Some(session.as_str()));
        sse.collect()
            .iter()
            .map(|e| surface.delta(e))
            .collect::<String>()
    } else {
        let reply = post_json(&url, &turn2);
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.session_id.as_deref(), Some(session.as_str()));
        if surface == Surface::Responses {
            assert_eq!(reply.json()["conversation"]["id"], session.as_str());
        }
        surface.text(&reply.json())
    };
    assert!(text2.contains("zebra42"), "turn 2 answered {text2:?}");

    // What the new agent process was sent: the whole conversation, then the new question.
    let requests = agent.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        history_sent(&requests[0]),
        vec![
            (
                "user".to_owned(),
                "My project is named zebra42. Reply with OK.".to_owned()
            ),
            ("assistant".to_owned(), "OK.".to_owned()),
            ("user".to_owned(), "What is my project named?".to_owned()),
        ]
    );
    let body = &requests[0]["body"];
    assert!(
        body.get("previous_response_id").is_none() && body.get("conversation").is_none(),
        "the agent must not need memory: {body}"
    );

    // The log: per turn, user message, in_progress, deltas, assistant message, completed.
    let events = store.wait_for_terminal("local", &session, 2);
    assert!(
        events.windows(2).all(|w| w[0].seq < w[1].seq),
        "seqs strictly increase"
    );
    assert_eq!(events[0].seq, 1);
    let statuses: Vec<RunStatus> = events.iter().filter_map(|e| e.run_status()).collect();
    assert_eq!(
        statuses,
        [
            RunStatus::InProgress,
            RunStatus::Completed,
            RunStatus::InProgress,
            RunStatus::Completed
        ]
    );
    let transcript: Vec<(String, String)> = events
        .iter()
        .filter(|e| e.event_type == EventType::Message)
        .map(|e| {
            (
                e.role.clone().unwrap_or_default(),
                e.text().trim().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        transcript[0],
        (
            "user".into(),
            "My project is named zebra42. Reply with OK.".into()
        )
    );
    assert_eq!(transcript[1], ("assistant".into(), "OK.".into()));
    assert_eq!(
        transcript[2],
        ("user".into(), "What is my project named?".into())
    );
    assert!(transcript[3].1.contains("zebra42"));
    assert!(events.iter().any(|e| e.event_type == EventType::TextDelta));
}

macro_rules! seed_tests {
    ($($name:ident: $surface:expr, $protocol:expr, $store:expr, $stream:expr;)*) => {
        $(#[test] fn $name() { seed_scenario($surface, $protocol, $store, $stream) })*
    };
}

seed_tests! {
    chat_on_chat_agent_sqlite: Surface::Chat, "openai-chat", StoreKind::Sqlite, false;
    chat_on_chat_agent_sqlite_streaming: Surface::Chat, "openai-chat", StoreKind::Sqlite, true;
    responses_on_responses_agent_sqlite: Surface::Responses, "openai-responses", StoreKind::Sqlite, false;
    responses_on_responses_agent_sqlite_streaming: Surface::Responses, "openai-responses", StoreKind::Sqlite, true;
    responses_on_chat_agent_sqlite: Surface::Responses, "openai-chat", StoreKind::Sqlite, true;
    chat_on_responses_agent_sqlite: Surface::Chat, "openai-responses", StoreKind::Sqlite, false;
    chat_on_chat_agent_postgres: Surface::Chat, "openai-chat", StoreKind::Postgres, true;
    responses_on_responses_agent_postgres: Surface::Responses, "openai-responses", StoreKind::Postgres, false;
    responses_on_chat_agent_postgres: Surface::Responses, "openai-chat", StoreKind::Postgres, false;
    chat_on_responses_agent_postgres: Surface::Chat, "openai-responses", StoreKind::Postgres, true;
}

/// Every SSE event Tether sends on the OpenAI surfaces has an id of its own: its number
/// in the run's stream (several frames can come from one log event), distinct and
/// increasing, the cursor a reconnect resumes after (see tests/e2e/clients.rs).
#[test]
fn every_streamed_event_has_a_distinct_increasing_id() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    for (surface, protocol) in [
        (Surface::Chat, "openai-chat"),
        (Surface::Responses, "openai-responses"),
    ] {
        let tether = Tether::start(&agent.url(), protocol, &store.url, &[]);
        let sse = SseStream::post(
            &format!("{}{}", tether.url(), surface.path()),
            &surface.body("hello there you", None, true),
        );
        let session = sse.session_id.clone().unwrap();
        let frames = sse.collect();
        let events = store.wait_for_terminal("local", &session, 1);
        assert!(events.last().unwrap().is_terminal());
        let ids: Vec<i64> = frames
            .iter()
            .map(|f| {
                let id =
                    f.id.as_deref()
                        .unwrap_or_else(|| panic!("frame without id: {f:?}"));
                // A `v1.<seq>.<frame>` id (runtime-adapter's cursor module): its frame number.
                let (form, frame) = (id.split('.').next(), id.rsplit('.').next());
                assert_eq!(form, Some("v1"), "a self-describing id: {id}");
                frame.unwrap().parse().unwrap()
            })
            .collect();
        assert_eq!(
            ids,
            (0..frames.len() as i64).collect::<Vec<_>>(),
            "frames are numbered from 0, one id each"
        );
    }
}
