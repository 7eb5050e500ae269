//! OpenAI turns as clients write them (issue 38), on SQLite and PostgreSQL:
//! `item_reference` inputs resolved from the log inside the caller's account (and naming
//! the session); a streamed turn that fails before the agent answers refused with the
//! status and body of the same turn unstreamed; and a retry of a turn that failed while
//! the agent was down continuing the session it was sent to, whichever way it names it.

use serde_json::{json, Value};
use session_log::EventType;

use crate::auth::{authed_gateway, bearer, KEY_A, KEY_B};
use crate::harness::*;

const U1: &str = "My project is named zebra42. Reply with OK.";
const Q: &str = "What is my project named?";

/// The texts of a session's user messages in the log: all of them, and those on its
/// active history (a failed attempt's copy is kept but superseded).
fn user_messages(api: &Api, session: &str) -> (Vec<String>, Vec<String>) {
    let events = api.ok(
        "ListSessionEvents",
        json!({ "SessionId": session, "Limit": 500 }),
    )["Events"]
        .as_array()
        .cloned()
        .unwrap();
    let users: Vec<&Value> = events
        .iter()
        .filter(|e| e["EventType"] == "message" && e["Role"] == "user")
        .collect();
    let text = |e: &&Value| e["Content"]["text"].as_str().unwrap_or_default().to_owned();
    let all = users.iter().map(text).collect();
    let active = users
        .iter()
        .filter(|e| e["Superseded"] != true)
        .map(text)
        .collect();
    (all, active)
}

fn session_forks(store: &TestStore, session: &str) -> usize {
    store
        .events("local", session)
        .iter()
        .filter(|e| e.event_type == EventType::SessionFork)
        .count()
}

fn user(text: &str) -> Value {
    json!({ "role": "user", "content": [{ "type": "input_text", "text": text }] })
}

fn reference(id: &str) -> Value {
    json!({ "type": "item_reference", "id": id })
}

/// The types of the input items the agent's last request carried, with their text or
/// call id.
fn agent_input(agent: &FakeAgent) -> Vec<(String, String)> {
    let requests = agent.requests();
    let last = requests.last().expect("the agent got a request");
    last["body"]["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let kind = item["type"].as_str().unwrap_or("message").to_owned();
            let what = match kind.as_str() {
                "message" => format!(
                    "{}: {}",
                    item["role"].as_str().unwrap_or_default(),
                    item["content"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<String>()
                ),
                _ => item["call_id"].as_str().unwrap_or_default().to_owned(),
            };
            (kind, what)
        })
        .collect()
}

fn item_references_on(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-responses", &store.url, &[]);
    let api = Api::of(&tether);
    let url = format!("{}/v1/responses", tether.url());
    let ok = |body: Value| {
        let reply = post_json(&url, &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply
    };

    let first = ok(json!({ "model": "fake", "input": U1 }));
    let s = first.session_id.clone().unwrap();
    let msg = first.json()["output"][0]["id"].as_str().unwrap().to_owned();

    // The Vercel AI SDK's turn 2: the user's messages as sent, the assistant's by
    // reference, no session named. The reference names it; the agent gets the item.
    let second = ok(json!({ "model": "fake", "input": [user(U1), reference(&msg), user(Q)] }));
    assert_eq!(second.session_id.as_deref(), Some(s.as_str()));
    assert_eq!(Surface::Responses.text(&second.json()), "zebra42");
    assert_eq!(
        agent_input(&agent),
        [
            ("message".into(), format!("user: {U1}")),
            ("message".into(), "assistant: OK.".into()),
            ("message".into(), format!("user: {Q}")),
        ]
    );

    // A function call by reference, with its output: the agent gets both once.
    let third = ok(json!({ "model": "fake", "conversation": s, "input": "tool:lookup" }));
    let call = third.json()["output"][0].clone();
    assert_eq!(call["type"], "function_call", "{call}");
    let output =
        json!({ "type": "function_call_output", "call_id": call["call_id"], "output": "42" });
    let fourth =
        ok(json!({ "model": "fake", "input": [reference(call["id"].as_str().unwrap()), output] }));
    assert_eq!(fourth.session_id.as_deref(), Some(s.as_str()));
    assert_eq!(Surface::Responses.text(&fourth.json()), "tool said: 42");
    let sent = agent_input(&agent);
    let calls = |kind: &str| sent.iter().filter(|(k, _)| k == kind).count();
    assert_eq!(
        (calls("function_call"), calls("function_call_output")),
        (1, 1),
        "{sent:?}"
    );

    // Reasoning and the message after it, by reference.
    let fifth = ok(json!({ "model": "fake", "conversation": s, "input": "reason about it" }));
    let ids: Vec<String> = fifth.json()["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        ids[0].starts_with("rs_") && ids[1].starts_with("msg_"),
        "{ids:?}"
    );
    let refs: Vec<Value> = ids.iter().map(|id| reference(id)).collect();
    let input: Vec<Value> = refs.into_iter().chain([user(Q)]).collect();
    let sixth = ok(json!({ "model": "fake", "input": input }));
    assert_eq!(sixth.session_id.as_deref(), Some(s.as_str()));
    assert_eq!(Surface::Responses.text(&sixth.json()), "zebra42");

    // Every user message once in the log, none superseded.
    let (all, active) = user_messages(&api, &s);
    assert_eq!(all, [U1, Q, "tool:lookup", "reason about it", Q]);
    assert_eq!(active, all);

    // An id Tether never gave, or one shaped like its ids but of no run: refused, naming
    // the item; nothing stored, nothing sent.
    let (events, requests, sessions) = (
        store.events("local", &s).len(),
        agent.requests().len(),
        store.session_count("local"),
    );
    let unknown = format!("msg_{}", "ab".repeat(20));
    for id in ["msg_abc", unknown.as_str()] {
        let bad = post_json(
            &url,
            &json!({ "model": "fake", "input": [user("hi"), reference(id)] }),
        );
        assert_eq!(bad.status, 404, "{}", bad.body);
        let error = &bad.json()["error"];
        assert_eq!(error["param"], "input[1].id", "{}", bad.body);
        assert_eq!(error["code"], "item_not_found", "{}", bad.body);
        assert!(error["message"].as_str().unwrap().contains(id));
    }
    assert_eq!(store.events("local", &s).len(), events);
    assert_eq!(agent.requests().len(), requests);
    assert_eq!(store.session_count("local"), sessions);
}

#[test]
fn item_references_resolve_from_the_log_and_name_the_session_sqlite() {
    item_references_on(StoreKind::Sqlite);
}

#[test]
fn item_references_resolve_from_the_log_and_name_the_session_postgres() {
    item_references_on(StoreKind::Postgres);
}

/// Account B naming account A's item gets the same 404 as for an id that does not exist.
#[test]
fn an_item_reference_to_another_accounts_item_is_not_found() {
    let (store, agent, tether) = authed_gateway("");
    let url = format!("{}/v1/responses", tether.url());
    let send = |key: &str, body: Value| {
        let (k, v) = bearer(key);
        post(&url, &body.to_string(), &[(k, &v)])
    };
    let a = send(KEY_A, json!({ "model": "fake", "input": U1 }));
    assert_eq!(a.status, 200, "{}", a.body);
    let msg = a.json()["output"][0]["id"].as_str().unwrap().to_owned();
    let requests = agent.requests().len();
    let b = send(
        KEY_B,
        json!({ "model": "fake", "input": [reference(&msg), user(Q)] }),
    );
    assert_eq!(b.status, 404, "{}", b.body);
    assert_eq!(b.json()["error"]["param"], "input[0].id");
    assert!(
        !b.body.contains("zebra42") && !b.body.contains("OK."),
        "{}",
        b.body
    );
    assert_eq!(store.session_count("acct-b"), 0);
    assert_eq!(agent.requests().len(), requests);
    // A's own reference works.
    let again = send(
        KEY_A,
        json!({ "model": "fake", "input": [user(U1), reference(&msg), user(Q)] }),
    );
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(Surface::Responses.text(&again.json()), "zebra42");
}

/// A streamed turn while the agent is down gets what the unstreamed one gets: 502 and the
/// OpenAI error body, not 200 and an error frame. The failed attempt is in the log with
/// its input superseded.
#[test]
fn a_streamed_turn_the_agent_never_answered_is_refused_like_an_unstreamed_one() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let nobody = format!("http://127.0.0.1:{}", free_port());
    for protocol in ["openai-chat", "openai-responses"] {
        let tether = Tether::start(&nobody, protocol, &store.url, &[]);
        for surface in [Surface::Chat, Surface::Responses] {
            let url = format!("{}{}", tether.url(), surface.path());
            let plain = post_json(&url, &surface.body("hello", None, false));
            let streamed = post_json(&url, &surface.body("hello", None, true));
            assert_eq!(
                streamed.status, 502,
                "{protocol} {surface:?}: {}",
                streamed.body
            );
            let content_type = streamed.header("content-type").unwrap_or_default();
            assert!(
                content_type.starts_with("application/json"),
                "{content_type}"
            );
            for reply in [&plain, &streamed] {
                assert_eq!(
                    reply.header("retry-after"),
                    Some("2"),
                    "a restarting agent is back soon"
                );
            }
            let (a, b) = (plain.json(), streamed.json());
            assert_eq!(b["error"]["code"], "agent_unreachable", "{b}");
            assert_eq!(a["error"]["code"], b["error"]["code"]);
            assert_eq!(a["error"]["type"], b["error"]["type"]);
            let session = streamed
                .session_id
                .clone()
                .expect("x-session-id on errors too");
            let events = store.wait_for_terminal("local", &session, 1);
            let end = events.last().unwrap();
            assert_eq!(end.run_status(), Some(session_log::RunStatus::Failed));
            assert_eq!(end.metadata["input_superseded"], true, "{:?}", end.metadata);
        }
    }
}

/// A turn the agent answers streams as before: the head comes once the agent has
/// answered, and `response.created` is the first frame.
#[test]
fn a_streamed_turn_the_agent_answers_streams_as_before() {
    let (_store, _agent, tether) = chat_gateway(&[]);
    let mut sse = SseStream::post(
        &format!("{}/v1/responses", tether.url()),
        &Surface::Responses.body("slow:3:20", None, true),
    );
    assert_eq!(sse.status, 200);
    let first = sse.next_event().unwrap().json();
    assert_eq!(first["type"], "response.created", "{first}");
    let text: String = sse
        .collect()
        .iter()
        .map(|f| Surface::Responses.delta(f))
        .collect();
    assert_eq!(text, "w1 w2 w3 ");
}

/// How a retried turn names its session.
#[derive(Clone, Copy, Debug)]
enum Named {
    PreviousResponse,
    Conversation,
    Header,
}

/// One client's conversation for the retry test: turn 1 answered, turn 2 sent while the
/// agent is down (it fails) and sent again, the same request, once it is back.
struct Retrying {
    named: Named,
    stream: bool,
    key: Option<String>,
    session: String,
    body: Value,
    headers: Vec<(String, String)>,
}

impl Retrying {
    fn start(url: &str, named: Named, stream: bool, keyed: bool) -> Retrying {
        let first = post_json(url, &json!({ "model": "fake", "input": U1 }));
        assert_eq!(first.status, 200, "{}", first.body);
        let session = first.session_id.clone().unwrap();
        let mut body = json!({ "model": "fake", "input": Q, "stream": stream });
        let mut headers = Vec::new();
        match named {
            Named::PreviousResponse => body["previous_response_id"] = first.json()["id"].clone(),
            Named::Conversation => body["conversation"] = json!(session),
            Named::Header => headers.push(("x-session-id".to_owned(), session.clone())),
        }
        let key = keyed.then(|| format!("retry-{}", ids_of(&session)));
        if let Some(key) = &key {
            headers.push(("idempotency-key".to_owned(), key.clone()));
        }
        Retrying {
            named,
            stream,
            key,
            session,
            body,
            headers,
        }
    }

    fn send(&self, url: &str) -> Reply {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        post(url, &self.body.to_string(), &headers)
    }

    fn what(&self) -> String {
        format!(
            "{:?}, stream {}, key {}",
            self.named,
            self.stream,
            self.key.is_some()
        )
    }
}

/// A distinct suffix for a key from a session id.
fn ids_of(session: &str) -> String {
    session
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect()
}

fn retries_continue_on(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-responses", &store.url, &[]);
    let api = Api::of(&tether);
    let url = format!("{}/v1/responses", tether.url());
    let mut clients = Vec::new();
    for named in [Named::PreviousResponse, Named::Conversation, Named::Header] {
        for stream in [false, true] {
            for keyed in [false, true] {
                clients.push(Retrying::start(&url, named, stream, keyed));
            }
        }
    }
    // The agent goes down: every turn 2 fails, as a 502 whether streamed or not.
    let port = agent.kill();
    for c in &clients {
        let failed = c.send(&url);
        assert_eq!(failed.status, 502, "{}: {}", c.what(), failed.body);
        assert_eq!(
            failed.session_id.as_deref(),
            Some(c.session.as_str()),
            "{}",
            c.what()
        );
    }
    // It comes back; the SDK's retry (the same request) continues the session.
    let _agent = FakeAgent::start_on(port);
    for c in &clients {
        let retried = c.send(&url);
        assert_eq!(retried.status, 200, "{}: {}", c.what(), retried.body);
        assert_eq!(
            retried.session_id.as_deref(),
            Some(c.session.as_str()),
            "{}: no fork",
            c.what()
        );
        assert!(
            retried.header("x-previous-session-id").is_none(),
            "{}",
            c.what()
        );
        let answer = if c.stream {
            retried.body.contains("\"delta\":\"zebra42\"")
        } else {
            Surface::Responses.text(&retried.json()) == "zebra42"
        };
        assert!(answer, "{}: {}", c.what(), retried.body);
        assert_eq!(session_forks(&store, &c.session), 0, "{}", c.what());
        let (all, active) = user_messages(&api, &c.session);
        assert_eq!(active, [U1, Q], "{}", c.what());
        assert_eq!(
            all,
            [U1, Q, Q],
            "{}: the failed attempt's copy is kept",
            c.what()
        );
    }
    // A real branch still forks: after turn 2 answered, a turn after turn 1's response.
    let c = &clients[0];
    let first_id = c.body["previous_response_id"].clone();
    let branch = post_json(
        &url,
        &json!({ "model": "fake", "input": "Hello there", "previous_response_id": first_id }),
    );
    assert_eq!(branch.status, 200, "{}", branch.body);
    assert_ne!(branch.session_id.as_deref(), Some(c.session.as_str()));
}

#[test]
fn a_retry_after_the_agent_was_down_continues_its_session_sqlite() {
    retries_continue_on(StoreKind::Sqlite);
}

#[test]
fn a_retry_after_the_agent_was_down_continues_its_session_postgres() {
    retries_continue_on(StoreKind::Postgres);
}

/// A Response object repeats what the request asked for, and is the same in the live
/// stream, retrieved, and in the stream rendered again.
#[test]
fn a_response_repeats_its_request_live_retrieved_and_replayed() {
    let (_store, _agent, tether) = chat_gateway(&[]);
    let url = format!("{}/v1/responses", tether.url());
    let asked = json!({
        "instructions": "Be brief.",
        "max_output_tokens": 50,
        "temperature": 0.3,
        "top_p": 0.9,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
        "top_logprobs": 2,
        "text": { "format": { "type": "text" }, "verbosity": "low" },
        "reasoning": { "effort": "low", "summary": null },
        "truncation": "auto",
        "service_tier": "flex",
        "metadata": { "k": "v" },
        "max_tool_calls": 2,
        "prompt_cache_key": "pk",
        "safety_identifier": "sid",
        "parallel_tool_calls": false,
        "tool_choice": "none",
        "tools": [{ "type": "function", "name": "f", "parameters": { "type": "object" } }],
    });
    let mut body = json!({ "model": "fake", "input": "slow:3:10", "stream": true });
    for (k, v) in asked.as_object().unwrap() {
        body[k] = v.clone();
    }
    let live = SseStream::post(&url, &body).collect();
    let created = live[0].json()["response"].clone();
    let completed = live.last().unwrap().json()["response"].clone();
    assert_eq!(completed["status"], "completed", "{completed}");
    let mut tools = asked["tools"].clone();
    tools[0]["description"] = Value::Null;
    tools[0]["strict"] = Value::Null;
    for (k, v) in asked.as_object().unwrap() {
        let v = if k == "tools" { &tools } else { v };
        assert_eq!(&completed[k], v, "{k} in response.completed");
        assert_eq!(&created[k], v, "{k} in response.created");
    }
    for (k, v) in [
        ("store", json!(true)),
        ("background", json!(false)),
        ("model", json!("fake")),
    ] {
        assert_eq!(completed[k], v, "{k}");
    }
    let id = completed["id"].as_str().unwrap();
    let (status, retrieved) = get_json(&format!("{url}/{id}"));
    assert_eq!(status, 200);
    assert_eq!(retrieved, completed, "retrieved as streamed");
    let replay = SseStream::get(&format!("{url}/{id}?stream=true"), &[]).collect();
    let frames = |s: &[SseEvent]| -> Vec<(Option<String>, String)> {
        s.iter().map(|f| (f.id.clone(), f.data.clone())).collect()
    };
    assert_eq!(frames(&replay), frames(&live), "replayed as streamed");
}

/// In front of an agent that speaks Responses, the response shows what the agent says it
/// used (the fake agent serves `service_tier: "auto"` as `"default"`, as OpenAI does):
/// `response.completed` and the retrieved response alike; `response.created`, before the
/// agent has said anything, shows what the request asked for.
#[test]
fn in_front_of_a_responses_agent_the_response_shows_what_the_agent_used() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-responses", &store.url, &[]);
    let url = format!("{}/v1/responses", tether.url());
    let body = json!({ "model": "fake", "input": "hi", "stream": true, "service_tier": "auto", "temperature": 0.4 });
    let live = SseStream::post(&url, &body).collect();
    let created = &live[0].json()["response"];
    let completed = live.last().unwrap().json()["response"].clone();
    assert_eq!(created["service_tier"], "auto");
    assert_eq!(completed["service_tier"], "default", "{completed}");
    assert_eq!(completed["temperature"], json!(0.4));
    let sent = agent.requests().last().unwrap()["body"].clone();
    assert_eq!(
        sent["service_tier"], "auto",
        "the agent was asked as the client asked"
    );
    let id = completed["id"].as_str().unwrap();
    let (_, retrieved) = get_json(&format!("{url}/{id}"));
    assert_eq!(retrieved, completed);
}
