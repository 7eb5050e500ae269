//! Session history end to end, with the fake agent (which remembers nothing): a fork at a
//! checkpoint keeps both branches, a resume supersedes what followed its checkpoint, and
//! a Responses turn after an older response forks. What the agent received is the proof.

use serde_json::{json, Value};
use session_log::EventType;

use crate::harness::*;

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

const QUESTION: &str = "What is my project named?";

/// One Chat Completions turn in `session`; the assistant's text.
fn say(tether: &Tether, session: &str, text: &str) -> String {
    let body = Surface::Chat.body(text, Some(session), false);
    let reply = post_json(&format!("{}/v1/chat/completions", tether.url()), &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    Surface::Chat.text(&reply.json())
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(r, t)| ((*r).to_owned(), (*t).to_owned()))
        .collect()
}

/// Every event of a session's history as ListSessionEvents pages it.
fn listed(api: &Api, session: &str, active_only: bool) -> Vec<Value> {
    let mut events: Vec<Value> = Vec::new();
    loop {
        let offset = events.last().map_or(0, |e| e["Position"].as_i64().unwrap());
        let page = api.ok(
            "ListSessionEvents",
            json!({ "SessionId": session, "Offset": offset, "Limit": 7, "ActiveOnly": active_only }),
        );
        let got = page["Events"].as_array().unwrap().clone();
        let done = got.len() < 7;
        events.extend(got);
        if done {
            return events;
        }
    }
}

/// The seed's scenario with a fork: turn 1 in S, S forked at its latest checkpoint, the
/// agent killed and restarted, then both sessions remember; a later turn in the fork
/// changes only the fork.
fn a_fork_keeps_both_branches(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let api = Api::of(&tether);
    let s = unique("hist-s");
    assert_eq!(
        say(&tether, &s, "My project is named zebra42. Reply with OK."),
        "OK."
    );
    store.wait_for_terminal("local", &s, 1);
    let latest = api.checkpoints(&s).last().cloned().unwrap();

    let forked = api.ok("ForkSession", json!({ "SessionId": s }));
    let f = forked["SessionId"].as_str().unwrap().to_owned();
    assert!(f.starts_with("sess_"), "{forked}");
    assert_eq!(
        forked["ForkedFrom"],
        json!({ "SessionId": s, "CheckpointId": latest["CheckpointId"], "SeqId": latest["SeqId"] })
    );

    let port = agent.kill();
    let agent = FakeAgent::start_on(port);
    assert_eq!(say(&tether, &f, QUESTION), "zebra42", "the fork remembers");
    assert_eq!(
        say(&tether, &s, QUESTION),
        "zebra42",
        "the original remembers"
    );
    say(&tether, &f, "My project is now named koala7.");
    assert_eq!(say(&tether, &f, QUESTION), "koala7");
    assert_eq!(
        say(&tether, &s, QUESTION),
        "zebra42",
        "the original is untouched"
    );

    // What the agent got for the fork's last question: S's turn 1, then the fork's own.
    let requests = agent.requests();
    assert_eq!(requests.len(), 5);
    assert_eq!(
        history_sent(&requests[3]),
        owned(&[
            ("user", "My project is named zebra42. Reply with OK."),
            ("assistant", "OK."),
            ("user", QUESTION),
            ("assistant", "zebra42"),
            ("user", "My project is now named koala7."),
            ("assistant", "You said: My project is now named koala7."),
            ("user", QUESTION),
        ])
    );
    // ...and for the original's: never the fork's.
    let original = history_sent(&requests[4]);
    assert_eq!(original.len(), 5, "{original:?}");
    assert!(original.iter().all(|(_, t)| !t.contains("koala7")));

    // Nothing was copied: the fork's log starts with its session_fork.
    let own = store.wait_for_terminal("local", &f, 3);
    assert_eq!((own[0].seq, own[0].event_type), (1, EventType::SessionFork));
    assert_eq!(own[0].content["parent_session_id"], s.as_str());
    assert_eq!(own[0].content["parent_seq"], latest["SeqId"]);
    assert!(own.iter().all(|e| e.session_id == f));
    assert!(store
        .events("local", &s)
        .iter()
        .all(|e| !e.text().contains("koala7")));

    // ListSessions and ListSessionEvents agree.
    let sessions = api.ok("ListSessions", json!({}))["Sessions"].clone();
    let row = |id: &str| {
        sessions
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["SessionId"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(row(&f)["ForkedFrom"], forked["ForkedFrom"]);
    assert_eq!(row(&s)["ForkedFrom"], Value::Null);
    let events = listed(&api, &f, false);
    let n = latest["SeqId"].as_i64().unwrap();
    let inherited: Vec<i64> = events
        .iter()
        .take_while(|e| e["Inherited"] == true)
        .map(|e| e["SeqId"].as_i64().unwrap())
        .collect();
    assert_eq!(
        inherited,
        (1..=n).collect::<Vec<_>>(),
        "S up to the fork point"
    );
    assert!(events[..n as usize]
        .iter()
        .all(|e| e["SessionId"] == s.as_str()));
    let rest = &events[n as usize..];
    assert_eq!(rest.len(), own.len());
    assert!(rest
        .iter()
        .all(|e| e["SessionId"] == f.as_str() && e["Inherited"] == false));
    assert_eq!(rest[0]["EventType"], "session_fork");
    let positions: Vec<i64> = events
        .iter()
        .map(|e| e["Position"].as_i64().unwrap())
        .collect();
    assert_eq!(positions, (1..=events.len() as i64).collect::<Vec<_>>());
    let page = api.ok("ListSessionEvents", json!({ "SessionId": f, "Limit": 1 }));
    assert_eq!(page["Total"], events.len() as i64);
    assert_eq!(page["ForkedFrom"], forked["ForkedFrom"]);
}

#[test]
fn a_fork_keeps_both_branches_sqlite() {
    a_fork_keeps_both_branches(StoreKind::Sqlite);
}

#[test]
fn a_fork_keeps_both_branches_postgres() {
    a_fork_keeps_both_branches(StoreKind::Postgres);
}

/// A fork at the checkpoint that ended turn 1, taken after turn 2, does not know turn 2.
#[test]
fn a_fork_at_an_earlier_checkpoint_does_not_know_what_came_after() {
    let (_store, agent, tether) = chat_gateway(&[]);
    let api = Api::of(&tether);
    let s = unique("hist-s");
    say(&tether, &s, "My project is named zebra42. Reply with OK.");
    say(&tether, &s, "My project is now named koala7.");
    assert_eq!(say(&tether, &s, QUESTION), "koala7");
    let turn1 = api
        .checkpoints(&s)
        .into_iter()
        .find(|c| c["Phase"] == "turn_completed")
        .unwrap();
    let f = unique("hist-f");
    let forked = api.ok(
        "ForkSession",
        json!({ "SessionId": s, "CheckpointId": turn1["CheckpointId"], "NewSessionId": f }),
    );
    assert_eq!(forked["SessionId"], f.as_str());
    assert_eq!(forked["ForkedFrom"]["SeqId"], turn1["SeqId"]);
    assert_eq!(say(&tether, &f, QUESTION), "zebra42");
    let last = agent.requests().pop().unwrap();
    assert_eq!(
        history_sent(&last),
        owned(&[
            ("user", "My project is named zebra42. Reply with OK."),
            ("assistant", "OK."),
            ("user", QUESTION),
        ])
    );
    // The fork's checkpoints include the one it was forked at; a fork of the fork at it
    // is a fork of S.
    let cps = api.checkpoints(&f);
    assert!(cps
        .iter()
        .any(|c| c["CheckpointId"] == turn1["CheckpointId"] && c["SessionId"] == s.as_str()));
    let again = api.ok(
        "ForkSession",
        json!({ "SessionId": f, "CheckpointId": turn1["CheckpointId"] }),
    );
    assert_eq!(again["ForkedFrom"], forked["ForkedFrom"]);
}

/// A run with a tool call, resumed from the checkpoint after the call: the turns that
/// followed the checkpoint are superseded, listed as such, and never sent again.
fn a_resume_supersedes_what_followed_its_checkpoint(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let api = Api::of(&tether);
    let s = unique("hist-resume");
    let chat = |messages: Value| {
        let body = json!({ "model": "fake", "session_id": s, "messages": messages });
        let reply = post_json(&format!("{}/v1/chat/completions", tether.url()), &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()
    };
    let reply = chat(json!([{ "role": "user", "content": "tool:lookup" }]));
    assert_eq!(
        reply["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "lookup"
    );
    let reply = chat(json!([{ "role": "tool", "tool_call_id": "call_1", "content": "42" }]));
    assert_eq!(Surface::Chat.text(&reply), "tool said: 42");
    store.wait_for_terminal("local", &s, 2);
    let after_call = api
        .checkpoints(&s)
        .into_iter()
        .find(|c| c["Phase"] == "after_tool_call")
        .unwrap();
    let before = listed(&api, &s, false).len();

    let resumed = api.ok(
        "ResumeRun",
        json!({
            "SessionId": s, "RunId": after_call["RunId"], "CheckpointId": after_call["CheckpointId"],
            "ResumeInstructionEnabled": true, "ResumeInstruction": "Reply with OK",
        }),
    );
    assert_eq!(resumed["output"][0]["content"][0]["text"], "OK.");
    say(&tether, &s, QUESTION);

    let requests = agent.requests();
    assert_eq!(
        history_sent(&requests[2]),
        owned(&[
            ("user", "tool:lookup"),
            ("assistant", ""),
            ("tool", "42"),
            ("user", "Reply with OK"),
        ]),
        "the resume: the history before the checkpoint, the recorded result replayed"
    );
    assert_eq!(
        history_sent(&requests[3]),
        owned(&[
            ("user", "tool:lookup"),
            ("assistant", ""),
            ("tool", "42"),
            ("user", "Reply with OK"),
            ("assistant", "OK."),
            ("user", QUESTION),
        ]),
        "a later turn: the resumed branch, not what it superseded"
    );

    // Nothing is deleted: the superseded events are listed, flagged, and left out with
    // ActiveOnly.
    store.wait_for_terminal("local", &s, 4);
    let all = listed(&api, &s, false);
    let active = listed(&api, &s, true);
    let seq = after_call["SeqId"].as_i64().unwrap();
    let superseded: Vec<&Value> = all.iter().filter(|e| e["Superseded"] == true).collect();
    assert!(superseded.iter().all(
        |e| e["SeqId"].as_i64().unwrap() > seq && e["SeqId"].as_i64().unwrap() <= before as i64
    ));
    assert!(superseded
        .iter()
        .any(|e| e["EventType"] == "message" && e["Content"]["text"] == "tool said: 42"));
    assert_eq!(active.len() + superseded.len(), all.len());
    assert!(active.iter().all(|e| e["Superseded"] == false));
    assert_eq!(
        all.len() as i64,
        api.ok("ListSessionEvents", json!({ "SessionId": s }))["Total"]
            .as_i64()
            .unwrap()
    );
}

#[test]
fn a_resume_supersedes_what_followed_its_checkpoint_sqlite() {
    a_resume_supersedes_what_followed_its_checkpoint(StoreKind::Sqlite);
}

#[test]
fn a_resume_supersedes_what_followed_its_checkpoint_postgres() {
    a_resume_supersedes_what_followed_its_checkpoint(StoreKind::Postgres);
}

/// A Responses turn after an older response of a session continues from there in a fork;
/// after the latest one it continues the session itself.
#[test]
fn previous_response_id_of_an_older_response_forks() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-responses", &store.url, &[]);
    let url = format!("{}/v1/responses", tether.url());
    let respond = |body: Value| {
        let reply = post_json(&url, &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()
    };
    let first = respond(json!({ "model": "fake", "input": "My project is named zebra42." }));
    let s = first["conversation"]["id"].as_str().unwrap().to_owned();
    let second = respond(
        json!({ "model": "fake", "conversation": s, "input": "My project is now named koala7." }),
    );
    store.wait_for_terminal("local", &s, 2);

    let forked =
        respond(json!({ "model": "fake", "previous_response_id": first["id"], "input": QUESTION }));
    assert_eq!(Surface::Responses.text(&forked), "zebra42");
    let f = forked["conversation"]["id"].as_str().unwrap().to_owned();
    assert_ne!(f, s, "the older response's turn went to a fork");
    let own = store.wait_for_terminal("local", &f, 1);
    assert_eq!(own[0].event_type, EventType::SessionFork);
    assert_eq!(own[0].content["parent_session_id"], s.as_str());

    // After the latest response, the session itself goes on: both keep their history.
    let latest = respond(
        json!({ "model": "fake", "previous_response_id": second["id"], "input": QUESTION }),
    );
    assert_eq!(latest["conversation"]["id"], s.as_str());
    assert_eq!(Surface::Responses.text(&latest), "koala7");
    let in_fork = respond(
        json!({ "model": "fake", "previous_response_id": forked["id"], "input": QUESTION }),
    );
    assert_eq!(in_fork["conversation"]["id"], f.as_str());
    assert_eq!(Surface::Responses.text(&in_fork), "zebra42");
}

/// A fork's subscription from the start replays what it inherited, then its own events,
/// every frame with its position as its id; a client that lost the stream in the middle of
/// the inherited part resumes after the last id it saw, losing and repeating nothing. An
/// inherited run is replayed on its own, resumable the same way.
#[test]
fn subscribing_to_a_fork_follows_its_parent() {
    let (store, _agent, tether) = chat_gateway(&["--subscribe-timeout-seconds", "1"]);
    let api = Api::of(&tether);
    let s = unique("hist-sub");
    say(&tether, &s, "My project is named zebra42. Reply with OK.");
    let parent = store.wait_for_terminal("local", &s, 1);
    let forked = api.ok("ForkSession", json!({ "SessionId": s }));
    let f = forked["SessionId"].as_str().unwrap().to_owned();
    let n = forked["ForkedFrom"]["SeqId"].as_i64().unwrap();
    say(&tether, &f, QUESTION);
    let own = store.wait_for_terminal("local", &f, 1);
    let base = format!("{}/agentengine/api/v1/SubscribeRunEvents", tether.url());

    let frames = SseStream::get(&format!("{base}?SessionId={f}"), &[]).collect();
    let id = |e: &SseEvent| -> i64 {
        e.id.as_deref()
            .unwrap_or_else(|| panic!("a frame without id: {e:?}"))
            .parse()
            .unwrap()
    };
    let inherited: Vec<i64> = frames
        .iter()
        .filter(|e| e.json()["Inherited"] == true)
        .map(|e| {
            assert_eq!(e.json()["SessionId"], s.as_str(), "{e:?}");
            assert_eq!(e.json()["Position"].as_i64(), Some(id(e)), "{e:?}");
            e.json()["SeqId"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(inherited, (1..=n).collect::<Vec<_>>());
    let ids: Vec<i64> = frames.iter().map(id).collect();
    let positions: Vec<i64> = (1..=n).chain(own.iter().map(|e| n + e.seq)).collect();
    assert_eq!(ids, positions, "the history's positions, inherited first");

    // Dropped in the middle of the inherited part: resumed after the last id seen, by
    // Last-Event-ID (what EventSource sends) and by AfterSeqId, it is the rest exactly.
    let k = n / 2;
    assert!(k >= 1);
    let data = |frames: &[SseEvent]| frames.iter().map(|e| e.data.clone()).collect::<Vec<_>>();
    let by_header = SseStream::get(
        &format!("{base}?SessionId={f}"),
        &[("last-event-id", &k.to_string())],
    )
    .collect();
    let by_query = SseStream::get(&format!("{base}?SessionId={f}&AfterSeqId={k}"), &[]).collect();
    for resumed in [&by_header, &by_query] {
        assert_eq!(
            resumed.iter().map(id).collect::<Vec<_>>(),
            positions[k as usize..]
        );
        assert_eq!(data(resumed), data(&frames[k as usize..]));
    }

    // From a cursor in the fork's own part: only its own events after it.
    let frames =
        SseStream::get(&format!("{base}?SessionId={f}&AfterSeqId={}", n + 2), &[]).collect();
    assert!(frames.iter().all(|e| e.json()["SessionId"] == f.as_str()));
    assert_eq!(frames.first().map(id), Some(n + 3));
    assert_eq!(frames.first().unwrap().json()["SeqId"], 3);

    // The CLI pages a fork by position: every event once, in history order.
    let mut cli = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["events", &f, "--json", "--url", &tether.url()])
        .env_remove("TETHER_URL")
        .env_remove("TETHER_API_KEY")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while cli.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = cli.kill();
            panic!("`tether events` on a fork did not finish");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut printed = String::new();
    std::io::Read::read_to_string(&mut cli.stdout.take().unwrap(), &mut printed).unwrap();
    let listed: Vec<(String, i64)> = printed
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|e| {
            (
                e["SessionId"].as_str().unwrap().to_owned(),
                e["SeqId"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, i64)> = (1..=n)
        .map(|seq| (s.clone(), seq))
        .chain(own.iter().map(|e| (f.clone(), e.seq)))
        .collect();
    assert_eq!(listed, expected);

    // An inherited run, through the fork, and resumed in its middle.
    let inv = parent[0].invocation_id.clone().unwrap();
    let url = format!("{base}?SessionId={f}&InvocationId={inv}");
    let frames = SseStream::get(&url, &[]).collect();
    assert_eq!(frames.last().unwrap().data, "[DONE]");
    let replayed: Vec<i64> = frames[..frames.len() - 1].iter().map(id).collect();
    let expected: Vec<i64> = parent
        .iter()
        .filter(|e| e.invocation_id.as_deref() == Some(inv.as_str()) && e.seq <= n)
        .map(|e| e.seq)
        .collect();
    assert_eq!(replayed, expected);
    let mid = replayed[replayed.len() / 2];
    let rest = SseStream::get(&url, &[("last-event-id", &mid.to_string())]).collect();
    let skipped = replayed.len() / 2 + 1;
    assert_eq!(data(&rest), data(&frames[skipped..]));
    assert_eq!(
        rest.iter().map(id).collect::<Vec<_>>(),
        frames[skipped..].iter().map(id).collect::<Vec<_>>()
    );
}

/// One Chat Completions turn as an account (its API key), streamed or not; the reply.
fn say_as(tether: &Tether, key: &str, session: &str, messages: Value, stream: bool) -> Reply {
    let body =
        json!({ "model": "fake", "session_id": session, "messages": messages, "stream": stream });
    post(
        &format!("{}/v1/chat/completions", tether.url()),
        &body.to_string(),
        &[("authorization", &format!("Bearer {key}"))],
    )
}

/// The account's sessions with their last seqs: what a refused action must leave as is.
fn sessions_of(api: &Api) -> Vec<(String, i64)> {
    let data = api.ok("ListSessions", json!({ "PageSize": 100 }));
    let mut rows: Vec<(String, i64)> = data["Sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["SessionId"].as_str().unwrap().to_owned(),
                r["LastSeqId"].as_i64().unwrap(),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// Every refusal is the envelope with the right code, and nothing changes.
fn refused(api: &Api, action: &str, body: Value, status: u16) -> Value {
    let (got, envelope) = api.call(action, body.clone());
    assert_eq!(got, status, "{action} {body}: {envelope}");
    envelope
}

#[test]
fn bad_input_to_history_actions_changes_nothing() {
    use crate::auth::{authed_gateway, KEY_A, KEY_B};
    let (store, agent, tether) = authed_gateway("");
    let a = Api {
        base: tether.url(),
        key: Some(KEY_A.into()),
    };
    let b = Api {
        base: tether.url(),
        key: Some(KEY_B.into()),
    };
    let turn =
        json!([{ "role": "user", "content": "My project is named zebra42. Reply with OK." }]);
    assert_eq!(
        say_as(&tether, KEY_A, "s-a", turn.clone(), false).status,
        200
    );
    assert_eq!(
        say_as(&tether, KEY_A, "taken", turn.clone(), false).status,
        200
    );
    assert_eq!(say_as(&tether, KEY_B, "s-b", turn, false).status, 200);
    store.wait_for_terminal("acct-a", "s-a", 1);
    let before = (sessions_of(&a), sessions_of(&b));
    let requests = agent.requests().len();

    for (body, status) in [
        (json!({}), 400),
        (json!({ "SessionId": "" }), 400),
        (json!({ "SessionId": "  " }), 400),
        (json!({ "SessionId": 42 }), 400),
        (json!({ "SessionId": ["s-a"] }), 400),
        (json!({ "SessionId": "s-a", "CheckpointId": 7 }), 400),
        (json!({ "SessionId": "s-a", "CheckpointId": "" }), 400),
        (
            json!({ "SessionId": "s-a", "NewSessionId": "not a valid id!" }),
            400,
        ),
        (json!({ "SessionId": "s-a", "NewSessionId": 5 }), 400),
        (json!({ "SessionId": "s-a", "NewSessionId": "" }), 400),
        (json!({ "SessionId": "nope" }), 404),
        (
            json!({ "SessionId": "s-a", "CheckpointId": "ckpt_nope" }),
            404,
        ),
        (json!({ "SessionId": "s-b" }), 404),
    ] {
        refused(&a, "ForkSession", body, status);
    }
    for (body, status) in [
        (json!({}), 400),
        (json!({ "SessionId": "" }), 400),
        (json!({ "SessionId": 3 }), 400),
        (json!({ "SessionId": "s-a", "KeepLastTurns": "two" }), 400),
        (json!({ "SessionId": "s-a", "KeepLastTurns": -1 }), 400),
        (json!({ "SessionId": "s-a", "KeepLastTurns": 1.5 }), 400),
        (json!({ "SessionId": "s-a", "Summary": "" }), 400),
        (json!({ "SessionId": "s-a", "Summary": 5 }), 400),
        (json!({ "SessionId": "nope", "Summary": "x" }), 404),
        (json!({ "SessionId": "s-b", "Summary": "x" }), 404),
    ] {
        refused(&a, "CompactSession", body, status);
    }
    refused(
        &a,
        "ListSessionEvents",
        json!({ "SessionId": "s-a", "ActiveOnly": "yes" }),
        400,
    );
    let nothing = refused(
        &a,
        "CompactSession",
        json!({ "SessionId": "s-a", "KeepLastTurns": 1, "Summary": "x" }),
        409,
    );
    assert_eq!(nothing["Data"]["code"], "nothing_to_compact");
    let taken = refused(
        &a,
        "ForkSession",
        json!({ "SessionId": "s-a", "NewSessionId": "taken" }),
        409,
    );
    assert_eq!(taken["Data"]["code"], "session_exists");
    // Another account's checkpoint id is not found either.
    let b_checkpoint = b.checkpoints("s-b").pop().unwrap()["CheckpointId"].clone();
    refused(
        &a,
        "ForkSession",
        json!({ "SessionId": "s-a", "CheckpointId": b_checkpoint }),
        404,
    );
    // A session id another account uses is free in this one: no conflict, no leak.
    let own = a.ok(
        "ForkSession",
        json!({ "SessionId": "s-a", "NewSessionId": "s-b" }),
    );
    assert_eq!(own["SessionId"], "s-b");
    assert_eq!(sessions_of(&b), before.1);
    let mut expected = before.0.clone();
    expected.push(("s-b".into(), 1));
    expected.sort();
    assert_eq!(sessions_of(&a), expected);
    let before = (sessions_of(&a), sessions_of(&b));

    // A checkpoint of a run still running: the run's start records one after the tool
    // result it was given, and its answer takes seconds.
    let slow = json!([
        { "role": "user", "content": "slow:40:100" },
        { "role": "tool", "tool_call_id": "call_9", "content": "done" }
    ]);
    let base = tether.url();
    let running = std::thread::spawn(move || {
        let body = json!({ "model": "fake", "session_id": "s-a", "messages": slow });
        post(
            &format!("{base}/v1/chat/completions"),
            &body.to_string(),
            &[("authorization", &format!("Bearer {KEY_A}"))],
        )
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let open = loop {
        let cps = a.checkpoints("s-a");
        if let Some(c) = cps.iter().find(|c| c["Phase"] == "after_tool_result") {
            break c.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the slow run never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let busy = refused(&a, "ForkSession", json!({ "SessionId": "s-a" }), 409);
    assert_eq!(busy["Data"]["code"], "run_in_progress");
    assert_eq!(busy["Data"]["RunId"], open["RunId"]);
    assert_eq!(busy["Data"]["CheckpointId"], open["CheckpointId"]);
    let busy = refused(
        &a,
        "ForkSession",
        json!({ "SessionId": "s-a", "CheckpointId": open["CheckpointId"], "NewSessionId": "later" }),
        409,
    );
    assert_eq!(busy["Data"]["RunId"], open["RunId"]);
    let busy = refused(
        &a,
        "CompactSession",
        json!({ "SessionId": "s-a", "KeepLastTurns": 0, "Summary": "x" }),
        409,
    );
    assert_eq!(busy["Data"]["code"], "session_busy");
    assert_eq!(busy["Data"]["RunId"], open["RunId"]);
    assert_eq!(running.join().unwrap().status, 200);
    assert_eq!(sessions_of(&b), before.1);
    assert!(sessions_of(&a).iter().all(|(s, _)| s != "later"));
    // Nothing refused reached the agent: only the slow turn did.
    assert_eq!(agent.requests().len(), requests + 1);
}

/// The four turns compaction tests start from.
const TURNS: [&str; 4] = [
    "My project is named zebra42. Reply with OK.",
    "The colour is teal.",
    "The size is large.",
    "The shape is round.",
];

/// Compaction after four turns keeping the last one: the agent's next request holds the
/// summary, the last turn and the new input; every earlier event is still listed.
fn compaction_keeps_the_last_turns(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let api = Api::of(&tether);
    let s = unique("hist-compact");
    for text in TURNS {
        say(&tether, &s, text);
    }
    store.wait_for_terminal("local", &s, 4);
    let before = listed(&api, &s, false);

    // No Summary: the agent itself (an OpenAI agent) writes it.
    let data = api.ok(
        "CompactSession",
        json!({ "SessionId": s, "KeepLastTurns": 1 }),
    );
    let summary = "Summary: the user said: My project is named zebra42. Reply with OK. \
                   The colour is teal. The size is large.";
    assert_eq!(data["Summary"], summary);
    assert_eq!(data["SeqStart"], 1);
    let turn3_answer = before
        .iter()
        .filter(|e| e["EventType"] == "message")
        .nth(5)
        .unwrap();
    assert_eq!(
        turn3_answer["Content"]["text"],
        "You said: The size is large."
    );
    assert_eq!(data["SeqEnd"], turn3_answer["SeqId"]);
    let n = before.len();
    assert_eq!(
        data["EventIds"],
        json!([format!("evt_{s}_{}", n + 1), format!("evt_{s}_{}", n + 2)])
    );
    // The summarizer's request: the prompt, then the transcript it condenses.
    let asked = agent.requests().pop().unwrap();
    let sent = history_sent(&asked);
    assert_eq!(sent[0].0, "system");
    assert!(sent[0]
        .1
        .contains("summarizing the earlier part of a conversation"));
    assert_eq!(
        sent[1].1,
        "Summarize this conversation:\n\nuser: My project is named zebra42. Reply with OK.\n\
         assistant: OK.\nuser: The colour is teal.\nassistant: You said: The colour is teal.\n\
         user: The size is large.\nassistant: You said: The size is large.\n"
    );

    assert_eq!(say(&tether, &s, QUESTION), "zebra42");
    let last = agent.requests().pop().unwrap();
    assert_eq!(
        history_sent(&last),
        owned(&[
            ("system", summary),
            ("user", "The shape is round."),
            ("assistant", "You said: The shape is round."),
            ("user", QUESTION),
        ])
    );

    // Nothing is deleted; the boundary and the checkpoint are listed, the boundary with
    // the summarizer's request.
    let after = listed(&api, &s, false);
    assert_eq!(&after[..n], &before[..]);
    assert_eq!(after[n]["EventType"], "compaction_boundary");
    assert_eq!(after[n]["Content"]["reason"], "manual");
    assert_eq!(after[n]["Content"]["keep_last_turns"], 1);
    assert_eq!(
        after[n]["Content"]["summarizer"]["request"]["messages"][1]["content"],
        sent[1].1.as_str()
    );
    assert_eq!(after[n + 1]["EventType"], "context_checkpoint");
    assert_eq!(after[n + 1]["Content"]["summary"], summary);

    // A given summary replaces the last one, which it covers too.
    let data = api.ok(
        "CompactSession",
        json!({ "SessionId": s, "KeepLastTurns": 0, "Summary": "The project is named zebra42." }),
    );
    assert_eq!(data["SeqStart"], 1);
    let asked = agent.requests().len();
    assert_eq!(say(&tether, &s, QUESTION), "zebra42");
    let requests = agent.requests();
    assert_eq!(
        requests.len(),
        asked + 1,
        "no summarizer call for a given summary"
    );
    assert_eq!(
        history_sent(&requests[asked]),
        owned(&[
            ("system", "The project is named zebra42."),
            ("user", QUESTION)
        ])
    );
}

#[test]
fn compaction_keeps_the_last_turns_sqlite() {
    compaction_keeps_the_last_turns(StoreKind::Sqlite);
}

#[test]
fn compaction_keeps_the_last_turns_postgres() {
    compaction_keeps_the_last_turns(StoreKind::Postgres);
}

/// Past `trigger_tokens`, a turn compacts the history first (keeping two turns), and the
/// log says why, before the turn's own events.
#[test]
fn automatic_compaction_fires_at_trigger_tokens() {
    let (store, agent, tether) = chat_gateway(&["--compaction-trigger-tokens", "60"]);
    let s = unique("hist-auto");
    let note = |i: usize| format!("Note {i}: {}", "x".repeat(80));
    say(&tether, &s, TURNS[0]);
    say(&tether, &s, &note(2));
    say(&tether, &s, &note(3)); // over the threshold, but only two turns to keep
    assert!(store
        .events("local", &s)
        .iter()
        .all(|e| e.event_type != EventType::CompactionBoundary));
    say(&tether, &s, &note(4));
    let requests = agent.requests();
    let summarized = &requests[requests.len() - 2];
    assert!(history_sent(summarized)[0]
        .1
        .contains("summarizing the earlier part"));
    let turn4 = history_sent(requests.last().unwrap());
    let summary = "Summary: the user said: My project is named zebra42. Reply with OK.";
    assert_eq!(turn4[0], ("system".to_owned(), summary.to_owned()));
    assert_eq!(turn4[1], ("user".to_owned(), note(2)));
    assert_eq!(
        turn4.len(),
        6,
        "summary, turns 2 and 3, the input: {turn4:?}"
    );

    let events = store.wait_for_terminal("local", &s, 4);
    let boundary = events
        .iter()
        .position(|e| e.event_type == EventType::CompactionBoundary)
        .unwrap();
    assert_eq!(events[boundary].content["reason"], "trigger_tokens");
    assert_eq!(events[boundary].content["threshold"], 60);
    assert!(
        events[boundary].content["estimated_tokens"]
            .as_u64()
            .unwrap()
            > 60
    );
    assert_eq!(
        events[boundary + 1].event_type,
        EventType::ContextCheckpoint
    );
    assert_eq!(
        events[boundary + 2].text(),
        note(4),
        "then the turn's input"
    );
    assert!(tether
        .log_text()
        .contains("compacted the session's history before the turn"));
    assert_eq!(say(&tether, &s, QUESTION), "zebra42");
}

/// `[compaction] keep_last_turns`: automatic compaction keeps that many turns, and so does
/// a CompactSession that names no `KeepLastTurns`.
#[test]
fn keep_last_turns_is_what_compactions_keep() {
    let (store, agent, tether) = chat_gateway(&[
        "--compaction-trigger-tokens",
        "60",
        "--compaction-keep-last-turns",
        "1",
    ]);
    let s = unique("hist-keep");
    let note = |i: usize| format!("Note {i}: {}", "x".repeat(80));
    say(&tether, &s, TURNS[0]);
    let answer2 = say(&tether, &s, &note(2));
    say(&tether, &s, &note(3)); // over the threshold: turn 1 is summarised, turn 2 kept
    let turn3 = history_sent(agent.requests().last().unwrap());
    let summary = "Summary: the user said: My project is named zebra42. Reply with OK.";
    assert_eq!(
        turn3,
        vec![
            ("system".to_owned(), summary.to_owned()),
            ("user".to_owned(), note(2)),
            ("assistant".to_owned(), answer2),
            ("user".to_owned(), note(3)),
        ],
        "the summary, one turn kept, the input"
    );
    let events = store.wait_for_terminal("local", &s, 3);
    let boundary = events
        .iter()
        .find(|e| e.event_type == EventType::CompactionBoundary)
        .unwrap();
    assert_eq!(boundary.content["keep_last_turns"], 1);

    // CompactSession without KeepLastTurns keeps the configured one turn too.
    let plain = unique("hist-keep-manual");
    for text in ["one", "two", "three"] {
        say(&tether, &plain, text);
    }
    let (status, envelope) = Api::of(&tether).call(
        "CompactSession",
        json!({ "SessionId": plain, "Summary": "Counted to two." }),
    );
    assert_eq!(status, 200, "{envelope}");
    let events = store.events("local", &plain);
    let boundary = events
        .iter()
        .find(|e| e.event_type == EventType::CompactionBoundary)
        .unwrap();
    assert_eq!(boundary.content["keep_last_turns"], 1);
    let third = events.iter().position(|e| e.text() == "three").unwrap();
    let answer2 = events[..third]
        .iter()
        .rev()
        .find(|e| e.event_type == EventType::Message)
        .unwrap();
    assert_eq!(
        envelope["Data"]["SeqEnd"].as_i64().unwrap(),
        answer2.seq,
        "everything before the last turn is summarised"
    );
}

/// A summarizer that is down: the turn still answers, with the whole history, and the
/// session is as it was; CompactSession says so and writes nothing.
#[test]
fn a_failing_summarizer_leaves_the_session_as_it_was() {
    let down = format!("http://127.0.0.1:{}", free_port());
    let (store, agent, tether) = chat_gateway(&[
        "--compaction-trigger-tokens",
        "10",
        "--compaction-summarizer-url",
        &down,
    ]);
    let api = Api::of(&tether);
    let s = unique("hist-down");
    for text in TURNS {
        say(&tether, &s, text);
    }
    assert_eq!(say(&tether, &s, QUESTION), "zebra42");
    let last = agent.requests().pop().unwrap();
    assert_eq!(history_sent(&last).len(), 9, "the whole history");
    let events = store.wait_for_terminal("local", &s, 5);
    assert!(events.iter().all(|e| !matches!(
        e.event_type,
        EventType::CompactionBoundary | EventType::ContextCheckpoint
    )));
    let log = tether.log_text();
    assert!(
        log.contains("compaction failed; the turn goes on with the whole history"),
        "{log}"
    );

    let (status, envelope) = api.call("CompactSession", json!({ "SessionId": s }));
    assert_eq!(status, 502, "{envelope}");
    assert_eq!(envelope["Data"]["code"], "summarizer_failed");
    assert_eq!(
        store.events("local", &s).len(),
        events.len(),
        "nothing written"
    );
}

/// Responses' own `context_management` compacts before the turn when its history is over
/// the threshold, and never reaches the agent; a malformed one is refused.
#[test]
fn responses_context_management_compacts_first() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-responses", &store.url, &[]);
    let url = format!("{}/v1/responses", tether.url());
    let s = unique("hist-cm");
    for text in TURNS {
        let reply = post_json(
            &url,
            &json!({ "model": "fake", "conversation": s, "input": text }),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let body = json!({
        "model": "fake", "conversation": s, "input": QUESTION,
        "context_management": [{ "type": "compaction", "compact_threshold": 20 }],
    });
    let reply = post_json(&url, &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(Surface::Responses.text(&reply.json()), "zebra42");
    let last = agent.requests().pop().unwrap();
    assert!(last["body"].get("context_management").is_none(), "{last}");
    let sent = history_sent(&last);
    assert_eq!(sent[0].0, "system");
    assert_eq!(sent.len(), 6, "summary, two turns, the input: {sent:?}");
    let boundary = store
        .events("local", &s)
        .into_iter()
        .find(|e| e.event_type == EventType::CompactionBoundary)
        .unwrap();
    assert_eq!(boundary.content["reason"], "compact_threshold");

    let requests = agent.requests().len();
    for bad in [
        json!("compaction"),
        json!([{ "type": "compaction" }]),
        json!([{ "type": "compaction", "compact_threshold": -5 }]),
        json!([{ "type": "other" }]),
    ] {
        let body =
            json!({ "model": "fake", "conversation": s, "input": "hi", "context_management": bad });
        let reply = post_json(&url, &body);
        assert_eq!(reply.status, 400, "{bad}: {}", reply.body);
        assert_eq!(reply.json()["error"]["param"], "context_management");
    }
    assert_eq!(
        agent.requests().len(),
        requests,
        "nothing refused reached the agent"
    );
}

/// tests/interop/test_history_openai.py: the seed's fork scenario through the official
/// `openai` SDK, in front of the fake agent (an openai-chat agent the file kills and
/// restarts), and a Responses turn after an older response.
#[test]
fn fork_scenario_through_the_openai_sdk() {
    crate::agents::run_pytest(
        "tests/interop/test_history_openai.py",
        "openai-chat",
        None,
        None,
    );
}

/// tests/interop/test_history_a2a.py: the fork scenario in front of the a2a-sdk agent,
/// the fork a new contextId; compaction shortening what a restore sends.
#[test]
fn fork_scenario_in_front_of_an_a2a_agent() {
    crate::agents::run_pytest("tests/interop/test_history_a2a.py", "a2a", None, None);
}

/// tests/interop/test_history_adk.py: the fork scenario in front of `adk api_server`.
#[test]
fn fork_scenario_in_front_of_an_adk_api_server() {
    use crate::auth::{auth_conf, KEY_A, KEY_B};
    let conf = auth_conf("");
    crate::agents::run_pytest(
        "tests/interop/test_history_adk.py",
        "adk",
        Some(&conf),
        Some((KEY_A, KEY_B)),
    );
}
