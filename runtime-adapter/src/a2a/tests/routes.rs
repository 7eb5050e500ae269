//! Routing client requests, and the SDK's errors for the ones it would refuse.

use super::*;
use crate::item::Block;
use crate::protocol::Protocol;
use crate::turn::SessionRef;
use crate::upstream::AgentRequest;

use crate::percent::{decode_segment, encode_segment};

#[test]
fn a_v03_send_is_a_run_in_a_new_session() {
    let body = rpc("message/send", json!({ "message": v03_message(json!({})) }));
    let turn = run_of(route("POST", "/", &[], &body));
    assert_eq!(turn.surface, Protocol::A2a);
    assert!(!turn.stream);
    assert_eq!(turn.session, SessionRef::New);
    assert_eq!(
        turn.input,
        vec![Item::user_text("My project is named zebra42.")]
    );
    assert_eq!(
        turn.extra["client"],
        json!({ "transport": "jsonrpc", "version": "0.3", "method": "message/send", "id": "req-1" })
    );
    assert_eq!(
        turn.extra["a2a"],
        json!({ "path": "/", "params": body["params"], "headers": [] })
    );
}

#[test]
fn a_v10_stream_with_a_context_is_a_streaming_run_in_that_session() {
    let body = rpc(
        "SendStreamingMessage",
        json!({ "message": v10_message(json!({ "contextId": "ctx-1" })), "configuration": {} }),
    );
    let turn = run_of(route("POST", "/", V1, &body));
    assert!(turn.stream);
    assert_eq!(turn.session, SessionRef::Named("ctx-1".into()));
    assert_eq!(turn.extra["client"]["version"], "1.0");
    assert_eq!(turn.extra["client"]["method"], "SendStreamingMessage");
    assert_eq!(
        turn.extra["a2a"]["headers"],
        json!([["A2A-Version", "1.0"]])
    );

    // v0.3's compat client sends `A2A-Version: 0.3`.
    let body = rpc(
        "message/stream",
        json!({ "message": v03_message(json!({})) }),
    );
    let turn = run_of(route("POST", "/", &[("a2a-version", "0.3")], &body));
    assert!(turn.stream);
    assert_eq!(
        turn.extra["a2a"]["headers"],
        json!([["A2A-Version", "0.3"]])
    );
}

#[test]
fn file_and_data_parts_are_recorded() {
    let message = v03_message(json!({ "parts": [
        { "kind": "text", "text": "see" },
        { "kind": "file", "file": { "uri": "https://x/a.pdf", "name": "a.pdf" } },
        { "kind": "file", "file": { "bytes": "aGk=", "mimeType": "text/plain" } },
        { "kind": "data", "data": { "k": 1 } },
    ]}));
    let turn = run_of(route(
        "POST",
        "/",
        &[],
        &rpc("message/send", json!({ "message": message })),
    ));
    let expected = vec![
        Block::Text("see".into()),
        Block::File {
            filename: Some("a.pdf".into()),
            data: None,
            url: Some("https://x/a.pdf".into()),
        },
        Block::File {
            filename: None,
            data: Some("data:text/plain;base64,aGk=".into()),
            url: None,
        },
        Block::Text("{\"k\":1}".into()),
    ];
    assert_eq!(
        turn.input,
        vec![Item::Message {
            role: "user".into(),
            content: expected.clone()
        }]
    );

    let message = v10_message(json!({ "parts": [
        { "text": "see" },
        { "url": "https://x/a.pdf", "filename": "a.pdf" },
        { "raw": "aGk=", "mediaType": "text/plain" },
        { "data": { "k": 1 } },
    ]}));
    let turn = run_of(route(
        "POST",
        "/",
        V1,
        &rpc("SendMessage", json!({ "message": message })),
    ));
    assert_eq!(
        turn.input,
        vec![Item::Message {
            role: "user".into(),
            content: expected
        }]
    );
}

#[test]
fn versions_are_checked_as_the_sdk_checks_them() {
    // a2a_16: a v1.0 method without the header.
    let body = rpc("SendMessage", json!({ "message": v10_message(json!({})) }));
    let (status, body) = reply_of(route("POST", "/", &[], &body));
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({ "jsonrpc": "2.0", "id": "req-1", "error": {
            "code": -32009,
            "message": "A2A version '0.3' is not supported by this handler. Expected version '1.0'.",
            "data": [{ "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "VERSION_NOT_SUPPORTED",
                       "domain": "a2a-protocol.org", "metadata": {} }],
        }})
    );
    // a2a_17/18: a v0.3 method with `A2A-Version: 1.0`.
    let body = rpc("tasks/get", json!({ "id": "t1" }));
    let (_, body) = reply_of(route("POST", "/", V1, &body));
    assert_eq!(
        body["error"],
        json!({ "code": -32603, "message": "A2A version '1.0' is not supported by this handler. Expected version '0.3'." })
    );
}

#[test]
fn bad_json_rpc_gets_json_rpc_errors() {
    let bad =
        |body: &[u8]| reply_of(A2aSurface::AUTO.route(&request("POST", "/", None, &[], body)));
    let (status, body) = bad(b"{not json");
    assert_eq!(status, 200);
    assert_eq!(body["error"]["code"], -32700);
    assert_eq!(body["id"], Value::Null);
    assert_eq!(
        bad(b"[]").1["error"]["message"],
        "Batch requests are not supported"
    );
    let (_, body) = bad(br#"{"jsonrpc":"1.0","id":7,"method":"message/send"}"#);
    assert_eq!(
        (body["id"].clone(), body["error"]["code"].clone()),
        (json!(7), json!(-32600))
    );
    let (_, body) = bad(br#"{"jsonrpc":"2.0","id":7}"#);
    assert_eq!(body["error"]["message"], "Method is required");
    let (_, body) = bad(br#"{"jsonrpc":"2.0","id":7,"method":"message/send","params":"x"}"#);
    assert_eq!(body["error"]["code"], -32602);
    let (_, body) = bad(br#"{"jsonrpc":"2.0","id":{"a":1},"method":"message/send"}"#);
    assert_eq!(
        (body["id"].clone(), body["error"]["code"].clone()),
        (Value::Null, json!(-32600))
    );
}

#[test]
fn bad_messages_get_the_sdks_validation_errors() {
    // a2a_19: a v0.3 message under a v1.0 method.
    let body = rpc("SendMessage", json!({ "message": v03_message(json!({})) }));
    let (_, body) = reply_of(route("POST", "/", V1, &body));
    assert_eq!(body["id"], "req-1");
    assert_eq!(body["error"]["code"], -32602);
    assert_eq!(body["error"]["message"], "Validation failed");
    assert_eq!(
        body["error"]["data"][1]["fieldViolations"],
        json!([{ "field": "message.role", "description": "Field is required." }])
    );
    // a2a_20: a v1.0 message under a v0.3 method.
    let body = rpc("message/send", json!({ "message": v10_message(json!({})) }));
    let (_, body) = reply_of(route("POST", "/", &[], &body));
    assert_eq!(body["error"]["code"], -32600);
    assert_eq!(body["error"]["message"], "Invalid Request");

    let refused = |message: Value, field: &str| {
        let body = rpc("SendMessage", json!({ "message": message }));
        let (_, body) = reply_of(route("POST", "/", V1, &body));
        assert_eq!(
            body["error"]["data"][1]["fieldViolations"][0]["field"], field,
            "{body}"
        );
    };
    refused(v10_message(json!({ "parts": [] })), "message.parts");
    refused(
        v10_message(json!({ "parts": [{ "nothing": 1 }] })),
        "message.parts[0]",
    );
    refused(v10_message(json!({ "messageId": "" })), "message.messageId");
    refused(v10_message(json!({ "contextId": 5 })), "message.contextId");
    let body = rpc("SendMessage", json!({}));
    let (_, body) = reply_of(route("POST", "/", V1, &body));
    assert_eq!(
        body["error"]["data"][1]["fieldViolations"][0]["field"],
        "message"
    );
    let body = rpc("tasks/get", json!({}));
    let (_, body) = reply_of(route("POST", "/", &[], &body));
    assert_eq!(body["error"]["code"], -32600);
}

#[test]
fn a_message_that_names_only_its_task_runs_in_that_tasks_session() {
    // JSON-RPC, HTTP+JSON (with ProtoJSON's snake_case names) and gRPC.
    let rpc_body = rpc(
        "SendMessage",
        json!({ "message": v10_message(json!({ "taskId": "t1" })) }),
    );
    let rest_body = json!({ "message": { "role": "ROLE_USER", "message_id": "m1",
        "task_id": "t1", "parts": [{ "text": "hi" }] } });
    let send = super::super::proto::path("SendMessage");
    let input = super::super::proto::method(&send).unwrap().input();
    let grpc_message = json!({ "message": v10_message(json!({ "taskId": "t1" })) });
    let grpc_body = super::super::proto::encode(&input, &grpc_message).unwrap();
    let grpc_headers = [("content-type", "application/grpc")];
    let grpc_request = request("POST", &send, None, &grpc_headers, &grpc_body);
    let routes = [
        (route("POST", "/", V1, &rpc_body), 200, json!(-32001)),
        (
            route("POST", "/rest/message:send", V1, &rest_body),
            404,
            json!(404),
        ),
        (A2aSurface::AUTO.route(&grpc_request), 404, json!(404)),
    ];
    for (route, status, code) in routes {
        let Route::RunInTask {
            agent_ref,
            turn,
            not_found,
        } = route
        else {
            panic!("expected a run in the task's session, got {route:?}");
        };
        assert_eq!(agent_ref, "t1");
        assert_eq!(turn.session, SessionRef::New, "the gateway names it");
        assert_eq!(not_found.0, status);
        assert_eq!(not_found.1["error"]["code"], code);
    }
    // With its contextId too, the message runs in that session as before.
    let both = rpc(
        "SendMessage",
        json!({ "message": v10_message(json!({ "taskId": "t1", "contextId": "c1" })) }),
    );
    assert_eq!(
        run_of(route("POST", "/", V1, &both)).session,
        SessionRef::Named("c1".into())
    );
}

#[test]
fn task_methods_route_to_the_log_and_an_unknown_task_is_not_found() {
    let body = rpc("tasks/get", json!({ "id": "t1", "historyLength": 1 }));
    let not_found = json!({ "jsonrpc": "2.0", "id": "req-1",
        "error": { "code": -32001, "message": "Task not found" } });
    assert_eq!(
        route("POST", "/", &[], &body),
        Route::Get {
            agent_ref: "t1".into(),
            client: json!({ "transport": "jsonrpc", "version": "0.3", "method": "tasks/get",
                            "id": "req-1", "historyLength": 1 }),
            not_found: (200, not_found),
        }
    );
    let body = rpc("GetTask", json!({ "id": "t1" }));
    let Route::Get { not_found, .. } = route("POST", "/", V1, &body) else {
        panic!()
    };
    assert_eq!(not_found.1["error"]["code"], -32001);
    assert_eq!(not_found.1["error"]["data"][0]["reason"], "TASK_NOT_FOUND");

    let body = rpc("CancelTask", json!({ "id": "t1" }));
    let Route::Cancel {
        agent_ref, client, ..
    } = route("POST", "/", V1, &body)
    else {
        panic!()
    };
    assert_eq!(agent_ref, "t1");
    assert_eq!(
        client,
        json!({ "transport": "jsonrpc", "version": "1.0", "method": "CancelTask", "id": "req-1" })
    );
    let body = rpc("tasks/cancel", json!({ "id": "t1" }));
    assert!(matches!(
        route("POST", "/", &[], &body),
        Route::Cancel { .. }
    ));
}

#[test]
fn resubscribe_resumes_after_the_last_event_id() {
    let body = rpc("tasks/resubscribe", json!({ "id": "t1" }));
    let Route::Subscribe {
        agent_ref,
        last_event_id,
        client,
        ..
    } = route("POST", "/", &[("Last-Event-ID", "42")], &body)
    else {
        panic!()
    };
    assert_eq!((agent_ref.as_str(), last_event_id), ("t1", Some(42)));
    assert_eq!(client["method"], "tasks/resubscribe");
    let body = rpc("SubscribeToTask", json!({ "id": "t1" }));
    let headers = [("A2A-Version", "1.0"), ("last-event-id", "x")];
    let Route::Subscribe { last_event_id, .. } = route("POST", "/", &headers, &body) else {
        panic!()
    };
    assert_eq!(last_event_id, None);
    // `-1` asks for the whole stream (a finished task's replay); below that is no cursor.
    for (cursor, expected) in [("-1", Some(-1)), ("-2", None)] {
        let headers = [("A2A-Version", "1.0"), ("Last-Event-ID", cursor)];
        let Route::Subscribe { last_event_id, .. } = route("POST", "/", &headers, &body) else {
            panic!()
        };
        assert_eq!(last_event_id, expected, "{cursor}");
    }
}

#[test]
fn task_lists_and_push_configs_go_to_the_agent_scoped_to_the_account() {
    let body = rpc("ListTasks", json!({ "contextId": "c" }));
    assert_eq!(
        route("POST", "/", V1, &body),
        Route::ForwardListing(
            AgentRequest::post("/", body.clone()).with_header("A2A-Version", "1.0")
        )
    );
    // v0.3 names the task `id` (get, list, delete) or `taskId` (set); v1.0 `taskId`.
    for (method, params, headers) in [
        (
            "tasks/pushNotificationConfig/get",
            json!({ "id": "t" }),
            &[][..],
        ),
        (
            "tasks/pushNotificationConfig/set",
            json!({ "taskId": "t", "pushNotificationConfig": { "url": "http://x" } }),
            &[][..],
        ),
        (
            "GetTaskPushNotificationConfig",
            json!({ "taskId": "t", "id": "c1" }),
            V1,
        ),
        (
            "DeleteTaskPushNotificationConfig",
            json!({ "taskId": "t", "id": "c1" }),
            V1,
        ),
    ] {
        let body = rpc(method, params);
        let Route::ForwardOwned {
            agent_ref,
            request,
            unowned,
            not_found,
        } = route("POST", "/", headers, &body)
        else {
            panic!("{method}")
        };
        assert_eq!(agent_ref, "t", "{method}");
        assert_eq!(request.body, Some(body.clone()), "{method}");
        // The stand-in for a task the caller does not own names no one's task.
        let mut stand_in = body;
        for field in ["taskId", "id"] {
            if stand_in["params"][field] == "t" {
                stand_in["params"][field] = json!(crate::surface::UNOWNED_TASK);
            }
        }
        assert_eq!(unowned.body, Some(stand_in), "{method}");
        assert_eq!(
            (not_found.0, not_found.1["error"]["code"].clone()),
            (200, json!(-32001)),
            "{method}"
        );
    }
    // Without the task's id nothing is forwarded.
    let body = rpc("ListTaskPushNotificationConfigs", json!({}));
    let Route::Reply { body, .. } = route("POST", "/", V1, &body) else {
        panic!()
    };
    assert_eq!(body["error"]["code"], -32602);
    // Methods Tether has no part in go as they are.
    let body = rpc("GetExtendedAgentCard", json!({}));
    assert_eq!(
        route("POST", "/", V1, &body),
        Route::Forward(AgentRequest::post("/", body.clone()).with_header("A2A-Version", "1.0"))
    );
}

#[test]
fn http_json_task_lists_and_push_configs_are_scoped_too() {
    let rest = |method: &str, path: &str, body: &[u8]| {
        A2aSurface::AUTO.route(&request(method, path, None, V1, body))
    };
    let Route::ForwardListing(list) = rest("GET", "/rest/tasks", b"") else {
        panic!()
    };
    assert_eq!((list.method, list.path.as_str()), ("GET", "/rest/tasks"));
    let Route::ForwardOwned {
        agent_ref,
        request,
        unowned,
        not_found,
    } = rest(
        "POST",
        "/rest/tasks/t%201/pushNotificationConfigs",
        br#"{"url": "http://x"}"#,
    )
    else {
        panic!()
    };
    assert_eq!(agent_ref, "t 1");
    assert_eq!(request.body, Some(json!({ "url": "http://x" })));
    assert_eq!(not_found.0, 404);
    assert_eq!(
        unowned.path,
        format!(
            "/rest/tasks/{}/pushNotificationConfigs",
            crate::surface::UNOWNED_TASK
        )
    );
    let Route::ForwardOwned { request, .. } =
        rest("DELETE", "/rest/tasks/t/pushNotificationConfigs/c1", b"")
    else {
        panic!()
    };
    assert_eq!(request.method, "DELETE");
}

#[test]
fn claims_the_a2a_paths_only() {
    for (method, path) in [
        ("POST", "/"),
        ("POST", "/a2a"),
        ("POST", "/api/jsonrpc/"),
        ("GET", "/.well-known/agent-card.json"),
        ("GET", "/.well-known/agent.json"),
        ("GET", "/rest/extendedAgentCard"),
        ("POST", "/rest/message:send"),
        ("POST", "/rest/v1/message:stream"),
        ("POST", "/message:send"),
        ("GET", "/rest/tasks/abc"),
        ("GET", "/rest/tasks/abc?historyLength=1"),
        ("POST", "/rest/tasks/abc:cancel"),
        ("GET", "/rest/tasks/abc:subscribe"),
        ("POST", "/rest/v1/tasks/abc:subscribe"),
        ("GET", "/rest/tasks"),
        ("GET", "/rest/tasks?contextId=x"),
        ("GET", "/rest/tasks/abc/pushNotificationConfigs"),
        ("POST", "/rest/tasks/abc/pushNotificationConfigs"),
        ("GET", "/rest/v1/tasks/abc/pushNotificationConfigs/c1"),
        ("DELETE", "/rest/tasks/abc/pushNotificationConfigs/c1"),
    ] {
        assert!(A2aSurface::AUTO.claims(method, path), "{method} {path}");
    }
    for (method, path) in [
        ("GET", "/"),
        ("GET", "/health"),
        ("POST", "/upload"),
        ("POST", "/rest/tasks"),
        ("DELETE", "/rest/tasks/abc/pushNotificationConfigs"),
        ("GET", "/rest/tasks/abc/pushNotificationConfigs/c1/x"),
        ("POST", "/rest/tasks/abc"),
        ("GET", "/rest/tasks/abc:cancel"),
        ("POST", "/rest/tasks/:cancel"),
        ("POST", "/rest/xmessage:send"),
    ] {
        assert!(!A2aSurface::AUTO.claims(method, path), "{method} {path}");
    }
}

#[test]
fn cards_are_fetched_from_the_agent() {
    let route = A2aSurface::AUTO.route(&request(
        "GET",
        "/.well-known/agent-card.json",
        None,
        &[],
        b"",
    ));
    assert_eq!(
        route,
        Route::Forward(AgentRequest::get("/.well-known/agent-card.json"))
    );
}

#[test]
fn rest_requests_route_like_json_rpc() {
    let body = json!({ "message": v10_message(json!({ "contextId": "ctx-1" })) });
    let turn = run_of(route("POST", "/rest/message:stream", V1, &body));
    assert!(turn.stream);
    assert_eq!(turn.session, SessionRef::Named("ctx-1".into()));
    assert_eq!(
        turn.extra["client"],
        json!({ "transport": "rest", "version": "1.0", "method": "message:stream", "id": null })
    );
    assert_eq!(turn.extra["a2a"]["path"], "/rest/message:stream");

    // a2a_rest_03: v1.0 routes need the header.
    let (status, body) = reply_of(route("POST", "/rest/message:send", &[], &body));
    assert_eq!(status, 400);
    assert_eq!(body["error"]["status"], "FAILED_PRECONDITION");
    assert_eq!(
        body["error"]["message"],
        "A2A version '0.3' is not supported by this handler. Expected version '1.0'."
    );

    // a2a_rest_15: v0.3's protobuf JSON under `v1/`.
    let body = json!({ "request": { "messageId": "m", "role": "ROLE_USER", "content": [{ "text": "hi" }] } });
    let turn = run_of(route("POST", "/rest/v1/message:send", &[], &body));
    assert!(!turn.stream);
    assert_eq!(turn.input, vec![Item::user_text("hi")]);
    assert_eq!(turn.extra["client"]["version"], "0.3");

    let (status, body) =
        reply_of(A2aSurface::AUTO.route(&request("POST", "/rest/message:send", None, V1, b"{")));
    assert_eq!(
        (status, body["error"]["status"].clone()),
        (400, json!("INVALID_ARGUMENT"))
    );
    let (status, body) = reply_of(route(
        "POST",
        "/rest/message:send",
        V1,
        &json!({ "message": {} }),
    ));
    assert_eq!(
        (status, body["error"]["message"].clone()),
        (400, json!("Validation failed"))
    );
}

#[test]
fn rest_task_operations() {
    let get = request("GET", "/rest/tasks/t%201", Some("historyLength=2"), V1, b"");
    let Route::Get {
        agent_ref,
        client,
        not_found: (status, body),
    } = A2aSurface::AUTO.route(&get)
    else {
        panic!()
    };
    assert_eq!(agent_ref, "t 1");
    assert_eq!(
        client,
        json!({ "transport": "rest", "version": "1.0", "method": "get", "id": null, "historyLength": 2 })
    );
    assert_eq!(
        (status, &body["error"]["status"]),
        (404, &json!("NOT_FOUND"))
    );
    let cancel = request("POST", "/rest/v1/tasks/t1:cancel", None, &[], b"{}");
    let Route::Cancel {
        agent_ref, client, ..
    } = A2aSurface::AUTO.route(&cancel)
    else {
        panic!()
    };
    assert_eq!(agent_ref, "t1");
    assert_eq!(
        client,
        json!({ "transport": "rest", "version": "0.3", "method": "cancel", "id": null })
    );
    let headers = [("A2A-Version", "1.0"), ("Last-Event-ID", "7")];
    let subscribe = request("GET", "/rest/tasks/t1:subscribe", None, &headers, b"");
    let Route::Subscribe {
        agent_ref,
        last_event_id,
        ..
    } = A2aSurface::AUTO.route(&subscribe)
    else {
        panic!()
    };
    assert_eq!((agent_ref.as_str(), last_event_id), ("t1", Some(7)));
}

#[test]
fn parse_request_takes_a_bare_json_rpc_body() {
    let body = rpc("SendMessage", json!({ "message": v10_message(json!({})) })).to_string();
    let turn = A2aSurface::AUTO
        .parse_request(body.as_bytes(), None)
        .unwrap();
    assert_eq!(turn.extra["client"]["version"], "1.0");
    let body = rpc("tasks/get", json!({ "id": "t" })).to_string();
    assert!(A2aSurface::AUTO
        .parse_request(body.as_bytes(), None)
        .is_err());
    assert!(A2aSurface::AUTO.parse_request(b"nope", None).is_err());
}

#[test]
fn error_bodies_are_json_rpc_errors() {
    assert_eq!(
        A2aSurface::AUTO.error_body(
            "Too many requests",
            "rate_limit_error",
            None,
            Some("rate_limited")
        ),
        json!({ "jsonrpc": "2.0", "id": null, "error": { "code": -32603, "message": "Too many requests",
                 "data": { "type": "rate_limit_error", "code": "rate_limited" } } })
    );
    let body = A2aSurface::AUTO.error_body(
        "Body too large",
        "invalid_request_error",
        Some("body"),
        None,
    );
    assert_eq!(body["error"]["code"], -32600);
    assert_eq!(body["error"]["data"]["param"], "body");
    assert_eq!(A2aSurface::AUTO.response_id("run_1"), "run_1");
    assert_eq!(A2aSurface::AUTO.run_id("run_1"), None);
}

#[test]
fn path_segments_round_trip() {
    assert_eq!(encode_segment("a b/c"), "a%20b%2Fc");
    assert_eq!(decode_segment("a%20b%2Fc"), "a b/c");
    assert_eq!(decode_segment("100%"), "100%");
}

#[test]
fn rest_bodies_take_protobuf_snake_case_names() {
    // What a2a-sdk's v0.3 HTTP+JSON client sends: the .proto's own field names.
    let body = json!({
        "request": {
            "message_id": "m-1",
            "context_id": "ctx-1",
            "role": "ROLE_USER",
            "content": [{ "text": "My project is named zebra42." }],
            "metadata": { "keep_me": 1 }
        },
        "configuration": { "blocking": true }
    });
    let turn = run_of(route("POST", "/rest/v1/message:send", &[], &body));
    assert_eq!(turn.session, SessionRef::Named("ctx-1".into()));
    assert_eq!(
        turn.input,
        vec![Item::user_text("My project is named zebra42.")]
    );
    let sent = &turn.extra["a2a"]["params"]["request"];
    assert_eq!(sent["messageId"], "m-1");
    assert_eq!(
        sent["metadata"],
        json!({ "keep_me": 1 }),
        "user data keeps its keys"
    );
}
