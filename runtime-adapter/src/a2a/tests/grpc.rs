//! A2A's gRPC binding: calls routed as their v1.0 JSON-RPC method, requests to a gRPC
//! agent, and its answers (messages, then the status) read into frames.

use super::*;
use prost_reflect::MessageDescriptor;

use crate::grpc::{frame, trailers_frame, Code, Status};
use crate::upstream::{AgentRequest, Output, Upstream};

use super::super::proto;
use super::super::A2aUpstream;

const GRPC: &[(&str, &str)] = &[("content-type", "application/grpc")];

fn input(method: &str) -> MessageDescriptor {
    proto::method(&proto::path(method)).unwrap().input()
}

fn call_route(method: &str, message: &Value, headers: &[(&str, &str)]) -> Route {
    let bytes = proto::encode(&input(method), message).unwrap();
    A2aSurface::AUTO.route(&request(
        "POST",
        &proto::path(method),
        None,
        headers,
        &bytes,
    ))
}

fn send_params() -> Value {
    json!({ "message": v10_message(json!({ "contextId": "ctx-1" })) })
}

#[test]
fn a_grpc_send_is_the_v10_send_of_its_json_form() {
    assert!(A2aSurface::AUTO.claims("POST", "/lf.a2a.v1.A2AService/SendMessage"));
    assert!(!A2aSurface::AUTO.claims("POST", "/lf.a2a.v1.A2AService/Nope"));
    let turn = run_of(call_route("SendStreamingMessage", &send_params(), GRPC));
    assert!(turn.stream);
    assert_eq!(turn.session, crate::turn::SessionRef::Named("ctx-1".into()));
    assert_eq!(
        turn.extra["client"],
        json!({ "transport": "grpc", "version": "1.0", "method": "SendStreamingMessage", "id": null })
    );
    assert_eq!(turn.extra["a2a"]["params"], send_params());
    // gRPC clients of the SDK send the version as metadata; another major is refused.
    let with_v03 = [GRPC[0], ("a2a-version", "0.3")];
    let (_, body) = reply_of(call_route("SendMessage", &send_params(), &with_v03));
    assert_eq!(body["error"]["status"], "FAILED_PRECONDITION");
}

#[test]
fn bad_calls_get_the_status_json_of_their_error() {
    let path = proto::path("SendMessage");
    let bad = request("POST", &path, None, GRPC, b"\x12\xff\xff");
    let (status, body) = reply_of(A2aSurface::AUTO.route(&bad));
    assert_eq!(
        (status, &body["error"]["status"]),
        (400, &json!("INVALID_ARGUMENT"))
    );
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("SendMessageRequest"));
    let (_, body) = reply_of(call_route("SendMessage", &json!({}), GRPC));
    assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
    assert_eq!(
        body["error"]["details"][1]["fieldViolations"][0]["field"],
        "message"
    );
    let (_, body) = reply_of(call_route("GetTask", &json!({}), GRPC));
    assert_eq!(
        body["error"]["details"][1]["fieldViolations"][0]["field"],
        "id"
    );
}

#[test]
fn task_calls_go_to_the_log_and_others_to_the_agent_as_v10_json_rpc() {
    let Route::Get {
        agent_ref,
        client,
        not_found: (status, body),
    } = call_route("GetTask", &json!({ "id": "t1", "historyLength": 3 }), GRPC)
    else {
        panic!()
    };
    assert_eq!(agent_ref, "t1");
    assert_eq!(client["transport"], "grpc");
    assert_eq!(client["historyLength"], 3);
    assert_eq!(
        (status, &body["error"]["status"]),
        (404, &json!("NOT_FOUND"))
    );
    assert_eq!(body["error"]["details"][0]["reason"], "TASK_NOT_FOUND");
    assert!(matches!(
        call_route("SubscribeToTask", &json!({ "id": "t1" }), GRPC),
        Route::Subscribe { .. }
    ));
    let Route::ForwardListing(forward) = call_route("ListTasks", &json!({ "pageSize": 5 }), GRPC)
    else {
        panic!()
    };
    assert_eq!(
        forward,
        AgentRequest::post(
            "/",
            json!({ "jsonrpc": "2.0", "id": null, "method": "ListTasks", "params": { "pageSize": 5 } })
        )
        .with_header("A2A-Version", "1.0")
    );
    // The agent's JSON-RPC answer, as the gRPC client gets it: the result, or the status.
    let path = proto::path("ListTasks");
    let list = request("POST", &path, None, GRPC, b"");
    let ok = json!({ "jsonrpc": "2.0", "id": null, "result": { "tasks": [] } });
    assert_eq!(
        A2aSurface::AUTO.rewrite_forwarded(&list, "http://gw", ok),
        json!({ "tasks": [] })
    );
    let failed =
        json!({ "jsonrpc": "2.0", "id": null, "error": { "code": -32001, "message": "no" } });
    let status = A2aSurface::AUTO.rewrite_forwarded(&list, "http://gw", failed);
    assert_eq!(status["error"]["status"], "NOT_FOUND");
}

#[test]
fn a_grpc_agent_gets_every_request_over_grpc_in_v10() {
    let grpc = &A2aUpstream::GRPC;
    // A v0.3 JSON-RPC client's send, converted to v1.0.
    let params = json!({ "message": v03_message(json!({ "contextId": "c" })),
                         "configuration": { "blocking": true, "historyLength": 1 } });
    let turn = run_of(route("POST", "/", &[], &rpc("message/stream", params)));
    let request = grpc.request(&call(&turn, &[], &[]));
    assert_eq!(request.path, "/lf.a2a.v1.A2AService/SendStreamingMessage");
    assert_eq!(request.body, None);
    let sent = proto::decode(&input("SendMessage"), request.grpc.as_ref().unwrap()).unwrap();
    assert_eq!(sent["message"]["role"], "ROLE_USER");
    assert_eq!(sent["message"]["contextId"], "sess-1");
    assert_eq!(
        sent["message"]["parts"],
        json!([{ "text": "My project is named zebra42." }])
    );
    assert_eq!(sent["configuration"], json!({ "historyLength": 1 }));
    assert!(request
        .headers
        .contains(&("A2A-Version".into(), "1.0".into())));

    let cancel = grpc.cancel(&turn).unwrap()("task-9");
    assert_eq!(cancel.path, "/lf.a2a.v1.A2AService/CancelTask");
    let sent = proto::decode(&input("CancelTask"), cancel.grpc.as_ref().unwrap()).unwrap();
    assert_eq!(sent, json!({ "id": "task-9" }));
    let reads = |u: &A2aUpstream| u.card_reader().and_then(|r| r.grpc_address).is_some();
    assert!(reads(grpc) && !reads(&A2aUpstream::JSONRPC));

    // A v1.0 call the surface passes through becomes the gRPC call; its answer, JSON-RPC.
    let forward = AgentRequest::post(
        "/",
        json!({ "jsonrpc": "2.0", "id": 7, "method": "GetExtendedAgentCard", "params": {} }),
    );
    let toward = grpc.forwarded(&forward);
    assert_eq!(toward.path, "/lf.a2a.v1.A2AService/GetExtendedAgentCard");
    let card = json!({ "name": "a", "description": "d", "version": "1" });
    let card_bytes = proto::encode(&proto::method(&toward.path).unwrap().output(), &card).unwrap();
    let mut body = frame(&card_bytes);
    body.extend(trailers_frame(&Status::new(Code::Ok, "")));
    let (_, _, answer) = grpc.forwarded_answer(&forward, (200, "application/grpc".into(), body));
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer, json!({ "jsonrpc": "2.0", "id": 7, "result": card }));
    let not_found = trailers_frame(&Status::new(Code::NotFound, "gone"));
    let (_, _, answer) =
        grpc.forwarded_answer(&forward, (404, "application/grpc".into(), not_found));
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(
        answer["error"],
        json!({ "code": -32001, "message": "gone" })
    );
    // A JSON-RPC agent gets the request as it is.
    assert_eq!(A2aUpstream::JSONRPC.forwarded(&forward), forward);
}

#[test]
fn a_grpc_not_found_means_the_agent_forgot() {
    let grpc = &A2aUpstream::GRPC;
    assert!(grpc.forgot(
        200,
        &trailers_frame(&Status::new(Code::NotFound, "Task not found"))
    ));
    assert!(!grpc.forgot(200, &trailers_frame(&Status::new(Code::Ok, ""))));
    assert!(!grpc.forgot(200, &trailers_frame(&Status::new(Code::Unavailable, "x"))));
}

#[test]
fn a_grpc_answer_is_read_into_frames_and_ended_by_its_status() {
    let stream = |v: Value| {
        frame(
            &proto::encode(
                &proto::method(&proto::path("SendStreamingMessage"))
                    .unwrap()
                    .output(),
                &v,
            )
            .unwrap(),
        )
    };
    let working = json!({ "statusUpdate": { "taskId": "t", "contextId": "c",
        "status": { "state": "TASK_STATE_WORKING" } } });
    let done = json!({ "statusUpdate": { "taskId": "t", "contextId": "c",
        "status": { "state": "TASK_STATE_COMPLETED",
                    "message": { "messageId": "m", "role": "ROLE_AGENT", "parts": [{ "text": "hi" }] } } } });
    let mut body = stream(working.clone());
    body.extend(stream(done.clone()));
    body.extend(trailers_frame(&Status::new(Code::Ok, "")));
    let turn = TurnRequest::new(crate::protocol::Protocol::A2a);
    let mut parser = A2aUpstream::GRPC.parser(&call(&turn, &[], &[]), "application/grpc");
    let mut out = Vec::new();
    for piece in body.chunks(7) {
        out.extend(parser.feed(piece));
    }
    out.extend(parser.finish());
    assert_eq!(out[0], Output::Frame(working));
    assert_eq!(out[1], Output::AgentRef("t".into()));
    assert_eq!(out[2], Output::Frame(done));
    assert!(matches!(out.last(), Some(Output::Done { .. })), "{out:?}");

    // A failed call: its status is the run's error.
    let mut parser = A2aUpstream::GRPC.parser(&call(&turn, &[], &[]), "application/grpc");
    let out = parser.feed(&trailers_frame(&Status::new(
        Code::NotFound,
        "Task t not found",
    )));
    assert_eq!(
        out,
        vec![Output::Error {
            code: "a2a_error_404".into(),
            message: "Task t not found".into()
        }]
    );
}
