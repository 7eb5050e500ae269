//! Bad input gets a 4xx with an OpenAI-style error body and writes nothing.

use serde_json::{json, Value};

use crate::harness::*;

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let (store, agent, tether) = chat_gateway(&["--max-body-bytes", "4096"]);
    let responses = format!("{}/v1/responses", tether.url());
    let chat = format!("{}/v1/chat/completions", tether.url());
    let big = "x".repeat(5000);
    let cases: Vec<(&str, &str, String, u16, Option<&str>)> = vec![
        (
            "malformed JSON",
            &responses,
            "{\"input\": ".into(),
            400,
            None,
        ),
        (
            "malformed JSON (chat)",
            &chat,
            "{not json".into(),
            400,
            None,
        ),
        (
            "input of the wrong type",
            &responses,
            json!({"input": 42}).to_string(),
            400,
            Some("input"),
        ),
        (
            "stream of the wrong type",
            &responses,
            json!({"input": "hi", "stream": "yes"}).to_string(),
            400,
            Some("stream"),
        ),
        (
            "messages of the wrong type",
            &chat,
            json!({"messages": "hi"}).to_string(),
            400,
            Some("messages"),
        ),
        (
            "temperature of the wrong type",
            &chat,
            json!({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"})
                .to_string(),
            400,
            Some("temperature"),
        ),
        (
            "unknown previous_response_id",
            &responses,
            json!({"input": "hi", "previous_response_id": "resp_0123456789abcdef0123456789abcdef"})
                .to_string(),
            404,
            Some("previous_response_id"),
        ),
        (
            "foreign previous_response_id",
            &responses,
            json!({"input": "hi", "previous_response_id": "nonsense"}).to_string(),
            404,
            Some("previous_response_id"),
        ),
        (
            "conversation and session_id disagree",
            &responses,
            json!({"input": "hi", "conversation": "a", "session_id": "b"}).to_string(),
            400,
            None,
        ),
        (
            "session id with bad characters",
            &responses,
            json!({"input": "hi", "conversation": "a/../b"}).to_string(),
            400,
            None,
        ),
        (
            "oversized body",
            &responses,
            json!({"input": big}).to_string(),
            413,
            None,
        ),
    ];
    for (name, url, body, status, param) in cases {
        let reply = post(url, &body, &[]);
        assert_eq!(reply.status, status, "{name}: {}", reply.body);
        let err: Value = reply.json();
        assert!(
            err["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{name}: {err}"
        );
        assert!(err["error"]["type"].is_string(), "{name}: {err}");
        if let Some(param) = param {
            assert_eq!(err["error"]["param"], param, "{name}: {err}");
        }
    }
    assert_eq!(store.session_count("local"), 0, "nothing was written");
    assert!(agent.requests().is_empty(), "the agent was never called");

    // The gateway is still healthy and serves a good request.
    let ok = post_json(
        &responses,
        &Surface::Responses.body("Reply with OK", None, false),
    );
    assert_eq!(ok.status, 200, "{}", ok.body);
}
