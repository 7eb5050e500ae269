//! Committed events rendered as the official Responses event sequence and `response` object.

use super::*;

#[test]
fn a_streamed_run_renders_the_official_event_sequence() {
    let frames = decode(&render_all(&streamed_run()));
    let msg = item_id("msg", 0);
    let usage = json!({
        "input_tokens": 12,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    });
    let expected = vec![
        (
            0,
            json!({"type": "response.created", "sequence_number": 0,
            "response": response_obj("in_progress", json!([]), Value::Null)}),
        ),
        (
            1,
            json!({"type": "response.in_progress", "sequence_number": 1,
            "response": response_obj("in_progress", json!([]), Value::Null)}),
        ),
        (
            2,
            json!({"type": "response.output_item.added", "sequence_number": 2, "output_index": 0,
            "item": message_item(0, "in_progress", None)}),
        ),
        (
            3,
            json!({"type": "response.content_part.added", "sequence_number": 3, "item_id": msg,
            "output_index": 0, "content_index": 0, "part": text_part("")}),
        ),
        (
            4,
            json!({"type": "response.output_text.delta", "sequence_number": 4, "item_id": msg,
            "output_index": 0, "content_index": 0, "delta": "Hel", "logprobs": []}),
        ),
        (
            5,
            json!({"type": "response.output_text.delta", "sequence_number": 5, "item_id": msg,
            "output_index": 0, "content_index": 0, "delta": "lo!", "logprobs": []}),
        ),
        (
            6,
            json!({"type": "response.output_text.done", "sequence_number": 6, "item_id": msg,
            "output_index": 0, "content_index": 0, "text": "Hello!", "logprobs": []}),
        ),
        (
            7,
            json!({"type": "response.content_part.done", "sequence_number": 7, "item_id": msg,
            "output_index": 0, "content_index": 0, "part": text_part("Hello!")}),
        ),
        (
            8,
            json!({"type": "response.output_item.done", "sequence_number": 8, "output_index": 0,
            "item": message_item(0, "completed", Some("Hello!"))}),
        ),
        (
            9,
            json!({"type": "response.completed", "sequence_number": 9,
            "response": response_obj("completed", json!([message_item(0, "completed", Some("Hello!"))]), usage)}),
        ),
    ];
    assert_eq!(frames.len(), expected.len());
    for ((id, _, data), (want_id, want)) in frames.iter().zip(&expected) {
        assert_eq!((id, data), (want_id, want));
    }
}

#[test]
fn the_final_body_is_the_completed_response_of_the_stream() {
    let events = streamed_run();
    let frames = decode(&render_all(&events));
    let completed = &frames.last().unwrap().2["response"];
    assert_eq!(&ResponsesSurface.final_body(&run(), &events), completed);
}

#[test]
fn a_reconnecting_renderer_continues_the_same_stream() {
    let events = streamed_run();
    let all = render_all(&events);
    // A client that saw the frames of events up to seq 3 gets the frames of seq 4.. from a
    // renderer that was fed everything: same ids, same sequence numbers; the frames it saw
    // are exactly those up to its last id.
    let mut r = ResponsesSurface.stream_renderer(&run());
    let resumed: Vec<SseFrame> = events
        .iter()
        .flat_map(|e| {
            let f = r.render(e);
            if e.seq > 3 {
                f
            } else {
                vec![]
            }
        })
        .collect();
    let seen = render_all(&events[..3]).len() as i64;
    let tail: Vec<SseFrame> = all
        .into_iter()
        .filter(|f| frame_number(f.id.as_deref().unwrap()).unwrap() >= seen)
        .collect();
    assert_eq!(resumed, tail);
}

#[test]
fn a_non_streamed_answer_still_gets_a_delta() {
    let events = vec![
        status(1, RunStatus::InProgress),
        item(2, Item::assistant_text("Whole answer")),
        status(3, RunStatus::Completed),
    ];
    let kinds: Vec<(i64, String)> = decode(&render_all(&events))
        .into_iter()
        .map(|(id, kind, _)| (id, kind))
        .collect();
    let expected = [
        (0, "response.created"),
        (1, "response.in_progress"),
        (2, "response.output_item.added"),
        (3, "response.content_part.added"),
        (4, "response.output_text.delta"),
        (5, "response.output_text.done"),
        (6, "response.content_part.done"),
        (7, "response.output_item.done"),
        (8, "response.completed"),
    ];
    assert_eq!(kinds, expected.map(|(i, k)| (i, k.to_owned())).to_vec());
    let body = ResponsesSurface.final_body(&run(), &events);
    assert_eq!(
        body["output"],
        json!([message_item(0, "completed", Some("Whole answer"))])
    );
    assert_eq!(body["usage"], Value::Null);
}

#[test]
fn a_tool_call_run_renders_reasoning_and_function_call_items() {
    let events = vec![
        item(1, Item::user_text("Weather in Paris?")),
        status(2, RunStatus::InProgress),
        control(3, EventType::ReasoningDelta, json!({"delta": "Need "})),
        control(4, EventType::ReasoningDelta, json!({"delta": "weather."})),
        item(5, Item::Reasoning { text: "Need weather.".into() }),
        item(
            6,
            Item::ToolCall {
                call_id: "call_1".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into(),
            },
        ),
        ev(
            7,
            NewEvent::new("acct", "sess-1", EventType::RunStatus, run_status_content(RunStatus::Completed, None))
                .with_metadata(json!({"usage": {"prompt_tokens": 20, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 4}}})),
        ),
    ];
    let frames = decode(&render_all(&events));
    let rs = item_id("rs", 0);
    let fc = item_id("fc", 1);
    let reasoning_done = json!({"id": rs, "type": "reasoning", "status": "completed", "summary": [],
        "content": [{"type": "reasoning_text", "text": "Need weather."}]});
    let call_done = json!({"id": fc, "type": "function_call", "status": "completed", "call_id": "call_1",
        "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"});
    let expected = vec![
        (
            0,
            json!({"type": "response.created", "sequence_number": 0,
            "response": response_obj("in_progress", json!([]), Value::Null)}),
        ),
        (
            1,
            json!({"type": "response.in_progress", "sequence_number": 1,
            "response": response_obj("in_progress", json!([]), Value::Null)}),
        ),
        (
            2,
            json!({"type": "response.output_item.added", "sequence_number": 2, "output_index": 0,
            "item": {"id": rs, "type": "reasoning", "status": "in_progress", "summary": [], "content": []}}),
        ),
        (
            3,
            json!({"type": "response.content_part.added", "sequence_number": 3, "item_id": rs,
            "output_index": 0, "content_index": 0, "part": {"type": "reasoning_text", "text": ""}}),
        ),
        (
            4,
            json!({"type": "response.reasoning_text.delta", "sequence_number": 4, "item_id": rs,
            "output_index": 0, "content_index": 0, "delta": "Need "}),
        ),
        (
            5,
            json!({"type": "response.reasoning_text.delta", "sequence_number": 5, "item_id": rs,
            "output_index": 0, "content_index": 0, "delta": "weather."}),
        ),
        (
            6,
            json!({"type": "response.reasoning_text.done", "sequence_number": 6, "item_id": rs,
            "output_index": 0, "content_index": 0, "text": "Need weather."}),
        ),
        (
            7,
            json!({"type": "response.content_part.done", "sequence_number": 7, "item_id": rs,
            "output_index": 0, "content_index": 0, "part": {"type": "reasoning_text", "text": "Need weather."}}),
        ),
        (
            8,
            json!({"type": "response.output_item.done", "sequence_number": 8, "output_index": 0,
            "item": reasoning_done}),
        ),
        (
            9,
            json!({"type": "response.output_item.added", "sequence_number": 9, "output_index": 1,
            "item": {"id": fc, "type": "function_call", "status": "in_progress", "call_id": "call_1",
                "name": "get_weather", "arguments": ""}}),
        ),
        (
            10,
            json!({"type": "response.function_call_arguments.delta", "sequence_number": 10, "item_id": fc,
            "output_index": 1, "delta": "{\"city\":\"Paris\"}"}),
        ),
        (
            11,
            json!({"type": "response.function_call_arguments.done", "sequence_number": 11, "item_id": fc,
            "output_index": 1, "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}),
        ),
        (
            12,
            json!({"type": "response.output_item.done", "sequence_number": 12, "output_index": 1,
            "item": call_done}),
        ),
        (
            13,
            json!({"type": "response.completed", "sequence_number": 13,
            "response": response_obj("completed", json!([reasoning_done, call_done]), json!({
                "input_tokens": 20,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": 9,
                "output_tokens_details": {"reasoning_tokens": 4},
                "total_tokens": 29,
            }))}),
        ),
    ];
    assert_eq!(frames.len(), expected.len());
    for ((id, _, data), (want_id, want)) in frames.iter().zip(&expected) {
        assert_eq!((id, data), (want_id, want));
    }
}

#[test]
fn a_failed_run_renders_response_failed_with_the_agents_error() {
    let events = vec![
        item(1, Item::user_text("hi")),
        status(2, RunStatus::InProgress),
        control(3, EventType::TextDelta, json!({"delta": "Partial"})),
        control(
            4,
            EventType::Error,
            json!({"code": "agent_unreachable", "message": "connection refused"}),
        ),
        status(5, RunStatus::Failed),
    ];
    let frames = decode(&render_all(&events));
    let mut failed = response_obj(
        "failed",
        json!([message_item(0, "incomplete", Some("Partial"))]),
        Value::Null,
    );
    failed["error"] = json!({"code": "agent_unreachable", "message": "connection refused"});
    let kinds: Vec<&str> = frames.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.failed",
        ]
    );
    assert_eq!(
        frames[7],
        (
            7,
            "response.output_item.done".into(),
            json!({"type": "response.output_item.done", "sequence_number": 7, "output_index": 0,
                "item": message_item(0, "incomplete", Some("Partial"))})
        )
    );
    let (id, _, last) = frames.last().unwrap();
    assert_eq!(*id, 8);
    assert_eq!(
        last,
        &json!({"type": "response.failed", "sequence_number": 8, "response": failed})
    );
    assert_eq!(ResponsesSurface.final_body(&run(), &events), failed);
}

#[test]
fn cancelled_and_interrupted_runs_have_their_own_status() {
    let body = |s: RunStatus, reason: Option<&str>| {
        let events = vec![
            status(1, RunStatus::InProgress),
            control(2, EventType::RunStatus, run_status_content(s, reason)),
        ];
        let frames = decode(&render_all(&events));
        assert_eq!(frames.last().unwrap().1, "response.failed");
        ResponsesSurface.final_body(&run(), &events)
    };
    let cancelled = body(RunStatus::Cancelled, None);
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["error"], Value::Null);
    let interrupted = body(RunStatus::Interrupted, Some("gateway restarted"));
    assert_eq!(interrupted["status"], "incomplete");
    assert_eq!(
        interrupted["error"],
        json!({"code": "server_error", "message": "gateway restarted"})
    );
    let failed = body(RunStatus::Failed, None);
    assert_eq!(
        failed["error"],
        json!({"code": "server_error", "message": "The run failed."})
    );
}

#[test]
fn client_input_and_control_events_are_not_output() {
    let events = vec![
        // A client replaying history sends assistant items of its own: they are input.
        item(1, Item::assistant_text("earlier answer")),
        item(
            2,
            Item::ToolCall {
                call_id: "c0".into(),
                name: "f".into(),
                arguments: "{}".into(),
            },
        ),
        item(
            3,
            Item::ToolResult {
                call_id: "c0".into(),
                output: "1".into(),
            },
        ),
        status(4, RunStatus::InProgress),
        control(5, EventType::HttpRequest, json!({"method": "POST"})),
        control(6, EventType::RunCheckpoint, json!({})),
        item(7, Item::user_text("not output either")),
        item(
            8,
            Item::Approval(
                json!({"type": "mcp_approval_response", "approve": true, "approval_request_id": "a"}),
            ),
        ),
        item(
            9,
            Item::Approval(
                json!({"type": "mcp_approval_request", "id": "mcpr_x", "name": "t", "server_label": "s", "arguments": "{}"}),
            ),
        ),
        status(10, RunStatus::Completed),
    ];
    let body = ResponsesSurface.final_body(&run(), &events);
    assert_eq!(
        body["output"],
        json!([{"type": "mcp_approval_request", "id": "mcpr_x", "name": "t", "server_label": "s", "arguments": "{}"}])
    );
    let kinds: Vec<String> = decode(&render_all(&events))
        .into_iter()
        .map(|f| f.1)
        .collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.output_item.done",
            "response.completed"
        ]
    );
}

#[test]
fn a_resumed_run_is_one_stream_with_one_created_event() {
    let events = vec![
        status(1, RunStatus::InProgress),
        control(2, EventType::TextDelta, json!({"delta": "Hal"})),
        status(3, RunStatus::Interrupted),
        status(4, RunStatus::InProgress),
        item(5, Item::assistant_text("Hello")),
        status(6, RunStatus::Completed),
    ];
    let frames = decode(&render_all(&events));
    let kinds: Vec<&str> = frames.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "response.created").count(),
        1
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "response.in_progress")
            .count(),
        2
    );
    let body = ResponsesSurface.final_body(&run(), &events);
    assert_eq!(body["status"], "completed");
    assert_eq!(body["error"], Value::Null);
    // The interrupted half-answer is redone, not part of the answer; its index stays
    // taken so indices never repeat within the stream.
    assert_eq!(
        body["output"],
        json!([message_item(1, "completed", Some("Hello"))])
    );
    let interrupted = frames.iter().find(|f| f.1 == "response.failed").unwrap();
    assert_eq!(
        interrupted.2["response"]["output"],
        json!([message_item(0, "incomplete", Some("Hal"))])
    );
}

#[test]
fn open_items_are_finished_before_completion() {
    let events = vec![
        status(1, RunStatus::InProgress),
        control(2, EventType::TextDelta, json!({"delta": "cut"})),
        status(3, RunStatus::Completed),
    ];
    let frames = decode(&render_all(&events));
    let kinds: Vec<&str> = frames.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(
        &kinds[kinds.len() - 4..],
        [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert_eq!(
        frames.last().unwrap().2["response"]["output"],
        json!([message_item(0, "completed", Some("cut"))])
    );
}

#[test]
fn responses_streams_have_no_end_marker() {
    assert!(ResponsesSurface.stream_renderer(&run()).end().is_empty());
}

#[test]
fn response_ids_map_to_run_ids_and_back() {
    let s = ResponsesSurface;
    assert_eq!(s.response_id(&format!("run_{HEX}")), RESP);
    assert_eq!(s.run_id(RESP), Some(format!("run_{HEX}")));
    assert_eq!(s.run_id("resp_abc"), None);
    assert_eq!(s.run_id(&format!("chatcmpl-{HEX}")), None);
    assert_eq!(s.run_id("resp_0123456789ABCDEF0123456789ABCDEF"), None);
    assert_eq!(s.run_id("resp_0123456789abcdef0123456789abcdeg"), None);
}

#[test]
fn output_item_ids_name_their_run_and_stand_for_history_items() {
    let events = vec![
        item(1, Item::user_text("Weather in Paris?")),
        status(2, RunStatus::InProgress),
        item(
            3,
            Item::Reasoning {
                text: "Need weather.".into(),
            },
        ),
        item(
            4,
            Item::ToolCall {
                call_id: "call_1".into(),
                name: "get_weather".into(),
                arguments: "{}".into(),
            },
        ),
        item(5, Item::assistant_text("Sunny.")),
        status(6, RunStatus::Completed),
    ];
    let items = super::super::output_items(&run(), &events);
    let call = Item::ToolCall {
        call_id: "call_1".into(),
        name: "get_weather".into(),
        arguments: "{}".into(),
    };
    assert_eq!(
        items,
        vec![
            (
                item_id("rs", 0),
                Item::Reasoning {
                    text: "Need weather.".into()
                }
            ),
            (item_id("fc", 1), call),
            (item_id("msg", 2), Item::assistant_text("Sunny.")),
        ]
    );
    // The ids are the ones the response object shows.
    let body = ResponsesSurface.final_body(&run(), &events);
    let shown: Vec<&str> = body["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        shown,
        items.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>()
    );
    for (id, _) in &items {
        assert_eq!(super::super::item_run_id(id), Some(format!("run_{HEX}")));
    }
    for other in [
        "msg_1",
        "msg_",
        "call_1",
        &format!("resp_{HEX}00000000"),
        &format!("msg_{HEX}0000000g"),
    ] {
        assert_eq!(super::super::item_run_id(other), None, "{other}");
    }
}

#[test]
fn the_response_repeats_the_requests_parameters_recorded_with_its_start() {
    let turn = parse(json!({
        "model": "m", "input": "hi", "temperature": 0.2, "top_p": 0.5,
        "text": {"format": {"type": "json_object"}}, "reasoning": {"effort": "low", "summary": null},
        "truncation": "auto", "service_tier": "flex", "metadata": {"k": "v"},
        "max_tool_calls": 3, "prompt_cache_key": "pk", "safety_identifier": "u1",
        "tools": [{"type": "function", "name": "f"}], "tool_choice": "required",
    }))
    .unwrap();
    let start = ev(
        2,
        NewEvent::new(
            "acct",
            "sess-1",
            EventType::RunStatus,
            run_status_content(RunStatus::InProgress, None),
        )
        .with_metadata(json!({ crate::turn::REQUEST_PARAMS: turn.echo })),
    );
    let events = vec![
        start,
        item(3, Item::assistant_text("ok")),
        status(4, RunStatus::Completed),
    ];
    let body = ResponsesSurface.final_body(&run(), &events);
    for (k, v) in [
        ("temperature", json!(0.2)),
        ("top_p", json!(0.5)),
        ("text", json!({"format": {"type": "json_object"}})),
        ("reasoning", json!({"effort": "low", "summary": null})),
        ("truncation", json!("auto")),
        ("service_tier", json!("flex")),
        ("metadata", json!({"k": "v"})),
        ("max_tool_calls", json!(3)),
        ("prompt_cache_key", json!("pk")),
        ("safety_identifier", json!("u1")),
        (
            "tools",
            json!([{"type": "function", "name": "f", "description": null, "parameters": null, "strict": null}]),
        ),
        ("tool_choice", json!("required")),
        ("store", json!(true)),
        ("background", json!(false)),
    ] {
        assert_eq!(body[k], v, "{k}");
    }
    // The stream's created and completed events carry the same object.
    let frames = decode(&render_all(&events));
    let completed = &frames.last().unwrap().2["response"];
    assert_eq!(completed, &body);
    assert_eq!(frames[0].2["response"]["temperature"], json!(0.2));
}

#[test]
fn what_the_agent_answered_stands_over_what_the_request_asked() {
    let start = ev(
        2,
        NewEvent::new(
            "acct",
            "sess-1",
            EventType::RunStatus,
            run_status_content(RunStatus::InProgress, None),
        )
        .with_metadata(
            json!({ crate::turn::REQUEST_PARAMS: {"service_tier": "auto", "top_p": 0.5} }),
        ),
    );
    let end = ev(
        4,
        NewEvent::new(
            "acct",
            "sess-1",
            EventType::RunStatus,
            run_status_content(RunStatus::Completed, None),
        )
        .with_metadata(json!({ crate::upstream::AGENT_PARAMS: {"service_tier": "default"} })),
    );
    let events = vec![start, item(3, Item::assistant_text("ok")), end];
    let frames = decode(&render_all(&events));
    assert_eq!(
        frames[0].2["response"]["service_tier"], "auto",
        "as asked, until the agent says"
    );
    let completed = &frames.last().unwrap().2["response"];
    assert_eq!(completed["service_tier"], "default");
    assert_eq!(completed["top_p"], json!(0.5));
    assert_eq!(&ResponsesSurface.final_body(&run(), &events), completed);
}

/// Every frame's id is a `v1` frame id: its number (its `sequence_number`) and the seq a
/// `SubscribeRunEvents` client that saw it resumes after: the event's own once the event's
/// last frame is out, the one before until then (the text is in the last frame).
#[test]
fn frame_ids_carry_the_frame_number_and_the_seq_to_resume_after() {
    let mut r = ResponsesSurface.stream_renderer(&run());
    let mut n = 0;
    let mut split = false;
    for e in &streamed_run() {
        let frames = r.render(e);
        split |= frames.len() > 1;
        for (i, f) in frames.iter().enumerate() {
            let after_seq = if i + 1 == frames.len() {
                e.seq
            } else {
                e.seq - 1
            };
            let want = format!("v1.{after_seq}.{n}");
            assert_eq!(f.id.as_deref(), Some(want.as_str()));
            n += 1;
        }
    }
    assert!(split, "an event renders as several frames");
}
