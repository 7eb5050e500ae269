"""Self-check of tests/fake_agent.py, with no Tether in between.

The official `openai` SDK talks straight to the fake agent: every shape the Tether interop
tests rely on (streaming event order, `output_text`, tool calls, reasoning, errors) must
parse here first, which proves the fake agent speaks what the SDK understands. The
failure triggers (`die:N`, `close:N`), the SSE splitting of `/events`, keep-alive and the
`/_requests` record are checked with raw HTTP clients.

Each fixture starts `fake_agent.py --port 0` in a subprocess and waits for `READY <port>`.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest
from openai import OpenAI

FAKE_AGENT = Path(__file__).resolve().parents[1] / "fake_agent.py"
RESPONSE_EVENT_ORDER_HEAD = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
]
RESPONSE_EVENT_ORDER_TAIL = [
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


# --------------------------------------------------------------------------------------
# Starting the fake agent
# --------------------------------------------------------------------------------------


class FakeAgent:
    """A running fake_agent.py subprocess."""

    def __init__(self, log_path: Path):
        self.log_path = log_path
        self.proc = subprocess.Popen(
            [sys.executable, str(FAKE_AGENT), "--port", "0", "--log", str(log_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.proc.stdout.readline()  # blocks until READY (or the process dies)
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"fake agent did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)

    def logged(self) -> list[dict]:
        return [json.loads(line) for line in self.log_path.read_text().splitlines()]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    running = FakeAgent(tmp_path_factory.mktemp("fake-agent") / "requests.jsonl")
    yield running
    running.stop()


@pytest.fixture
def fresh_agent(tmp_path):
    """An agent of its own, for tests that kill it."""
    running = FakeAgent(tmp_path / "requests.jsonl")
    yield running
    running.stop()


@pytest.fixture
def client(agent):
    return OpenAI(base_url=agent.url + "/v1", api_key="unused", max_retries=0)


# --------------------------------------------------------------------------------------
# Raw HTTP helpers
# --------------------------------------------------------------------------------------


def post_json(conn: http.client.HTTPConnection, path: str, body: dict) -> http.client.HTTPResponse:
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    return conn.getresponse()


def read_until_end(resp: http.client.HTTPResponse) -> tuple[bytes, Exception | None]:
    """Everything readable from a response, and the error that cut it short, if any."""
    data = bytearray()
    try:
        while True:
            piece = resp.read1(65536)
            if not piece:
                return bytes(data), None
            data += piece
    except (http.client.HTTPException, ConnectionError) as err:
        return bytes(data), err


def sse_data(raw: bytes) -> list[str]:
    """The `data:` payloads of a complete or partial SSE body."""
    frames = raw.decode().split("\n\n")
    return [line[len("data: ") :] for frame in frames for line in frame.splitlines() if line.startswith("data: ")]


def text_deltas(raw: bytes, chat: bool) -> list[str]:
    deltas = []
    for data in sse_data(raw):
        if data == "[DONE]":
            continue
        event = json.loads(data)
        if chat:
            deltas += [c["delta"]["content"] for c in event["choices"] if c["delta"].get("content")]
        elif event["type"] == "response.output_text.delta":
            deltas.append(event["delta"])
    return deltas


def stream_request(path: str, text: str) -> dict:
    if path == "/v1/chat/completions":
        return {"model": "fake", "stream": True, "messages": [{"role": "user", "content": text}]}
    return {"model": "fake", "stream": True, "input": text}


def raw_chunks(port: int, target: str) -> list[bytes]:
    """GET `target` over a bare socket and return the chunked body's chunks as sent."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: fake\r\n\r\n".encode())
        raw = bytearray()
        while piece := sock.recv(65536):
            raw += piece
    head, _, body = bytes(raw).partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    chunks = []
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return chunks
        chunks.append(body[:size])
        body = body[size + 2 :]


# --------------------------------------------------------------------------------------
# Responses API through the SDK
# --------------------------------------------------------------------------------------


def test_responses_non_streaming(client):
    resp = client.responses.create(model="fake", input="hello there world")
    assert resp.status == "completed"
    assert resp.output_text == "You said: hello there world"
    assert resp.usage.output_tokens == 5


def test_responses_streaming_event_sequence(client):
    events = list(client.responses.create(model="fake", input="hello there world", stream=True))
    types = [event.type for event in events]
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert types == RESPONSE_EVENT_ORDER_HEAD + ["response.output_text.delta"] * len(deltas) + RESPONSE_EVENT_ORDER_TAIL
    assert len(deltas) == 5
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert events[-1].response.output_text == "".join(deltas) == "You said: hello there world"


def test_responses_stream_helper_accumulates(client):
    with client.responses.stream(model="fake", input="accumulate these words") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.output_text == "".join(deltas) == "You said: accumulate these words"


def test_responses_input_items_with_content_parts(client):
    resp = client.responses.create(
        model="fake",
        input=[
            {
                "role": "user",
                "content": [{"type": "input_text", "text": "My project is named zebra42. Reply with OK."}],
            },
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "OK."}]},
            {"role": "user", "content": [{"type": "input_text", "text": "What is my project named?"}]},
        ],
    )
    assert resp.output_text == "zebra42"


def test_remembers_nothing_between_requests(client):
    first = client.responses.create(model="fake", input="My project is named zebra42. Reply with OK.")
    assert first.output_text == "OK."
    # The agent keeps no sessions: without the history in the request it has forgotten.
    second = client.responses.create(model="fake", input="What is my project named?", previous_response_id=first.id)
    assert second.output_text == "What is the name of your project?"


def test_responses_tool_call_then_result(client):
    first = client.responses.create(model="fake", input="please call tool:lookup")
    call = first.output[0]
    assert (call.type, call.name, call.call_id, call.arguments) == ("function_call", "lookup", "call_1", '{"x": 1}')
    second = client.responses.create(
        model="fake",
        input=[
            {"role": "user", "content": "please call tool:lookup"},
            {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"x": 1}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        ],
    )
    assert second.output_text == "tool said: 42"


def test_responses_streamed_tool_call(client):
    events = list(client.responses.create(model="fake", input="tool:lookup", stream=True))
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(pieces) == 2 and "".join(pieces) == '{"x": 1}'
    item = events[-1].response.output[0]
    assert (item.type, item.name, item.call_id) == ("function_call", "lookup", "call_1")


def test_responses_streamed_reasoning(client):
    events = list(client.responses.create(model="fake", input="reason about this", stream=True))
    types = [e.type for e in events]
    first_reasoning = types.index("response.reasoning_summary_text.delta")
    assert first_reasoning < types.index("response.output_text.delta")
    summary = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    final = events[-1].response
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output[0].summary[0].text == summary == "Thinking it over."
    assert final.output_text == "You said: reason about this"


# --------------------------------------------------------------------------------------
# Chat Completions through the SDK
# --------------------------------------------------------------------------------------


def test_chat_non_streaming(client):
    completion = client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi chat"}])
    choice = completion.choices[0]
    assert choice.message.content == "You said: hi chat"
    assert choice.finish_reason == "stop"


def test_chat_streaming_with_usage(client):
    chunks = list(
        client.chat.completions.create(
            model="fake",
            messages=[{"role": "user", "content": "stream me please"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    contents = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(contents) >= 3 and "".join(contents) == "You said: stream me please"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(contents)


def test_chat_content_parts_and_history(client):
    completion = client.chat.completions.create(
        model="fake",
        messages=[
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": [{"type": "text", "text": "My project is named zebra42. Reply with OK."}]},
            {"role": "assistant", "content": "OK."},
            {"role": "user", "content": "What is my project named? Reply with just the name."},
        ],
    )
    assert completion.choices[0].message.content == "zebra42"


def test_chat_streamed_tool_call_then_result(client):
    messages = [{"role": "user", "content": "use tool:lookup"}]
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    with client.chat.completions.stream(model="fake", messages=messages, tools=tools) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == ("call_1", "lookup", '{"x": 1}')

    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    ]
    answer = client.chat.completions.create(model="fake", messages=messages, tools=tools)
    assert answer.choices[0].message.content == "tool said: 42"


def test_chat_streamed_reasoning(client):
    chunks = list(
        client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "reason it"}], stream=True)
    )
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert reasoning == "Thinking it over."
    assert content == "You said: reason it"


def test_slow_streams_numbered_words_with_pauses(client):
    started = time.monotonic()
    arrivals, words = [], []
    stream = client.chat.completions.create(
        model="fake", messages=[{"role": "user", "content": "slow:3:150"}], stream=True
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic())
            words.append(chunk.choices[0].delta.content)
    assert words == ["w1 ", "w2 ", "w3 "]
    # Lower bounds only: the deltas arrive one by one, not in a single burst at the end.
    assert arrivals[-1] - started >= 0.45
    assert arrivals[-1] - arrivals[0] >= 0.2


@pytest.mark.parametrize("stream", [False, True])
def test_agent_error_raises(client, stream):
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model="fake", messages=[{"role": "user", "content": "please error"}], stream=stream
        )
    assert caught.value.status_code == 500
    assert caught.value.body["message"] == "fake failure"


def test_models_list(client):
    assert {model.id for model in client.models.list()} == {"fake", "fake-model"}


# --------------------------------------------------------------------------------------
# Failure triggers, seen from a raw HTTP client
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_die_exits_the_process_mid_stream(fresh_agent, path):
    resp = post_json(fresh_agent.connection(), path, stream_request(path, "die:2"))
    assert resp.status == 200
    raw, error = read_until_end(resp)
    assert error is not None, "the stream must end without its final chunk"
    assert text_deltas(raw, chat="chat" in path) == ["w1 ", "w2 "]
    assert b"[DONE]" not in raw and b"response.completed" not in raw
    assert fresh_agent.proc.wait(timeout=10) == 3
    # The request was recorded on disk before the process died.
    assert "die:2" in json.dumps(fresh_agent.logged()[-1]["body"])


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_close_drops_the_connection_but_stays_alive(agent, path):
    resp = post_json(agent.connection(), path, stream_request(path, "close:3"))
    raw, error = read_until_end(resp)
    assert error is not None
    assert text_deltas(raw, chat="chat" in path) == ["w1 ", "w2 ", "w3 "]
    assert b"[DONE]" not in raw and b"response.completed" not in raw
    assert agent.proc.poll() is None
    conn = agent.connection()
    conn.request("GET", "/healthz")
    assert conn.getresponse().read() == b"ok"


def test_slow_die_with_fewer_words_still_never_finishes(fresh_agent):
    path = "/v1/chat/completions"
    raw, error = read_until_end(post_json(fresh_agent.connection(), path, stream_request(path, "slow:1:10 die:5")))
    assert error is not None and text_deltas(raw, chat=True) == ["w1 "]
    assert b'"finish_reason": "stop"' not in raw
    assert fresh_agent.proc.wait(timeout=10) == 3


# --------------------------------------------------------------------------------------
# Test hooks and pass-through helpers
# --------------------------------------------------------------------------------------


def test_requests_record(agent, client):
    conn = agent.connection()
    conn.request("DELETE", "/_requests")
    assert conn.getresponse().read()
    client.chat.completions.create(
        model="fake", messages=[{"role": "user", "content": "record me"}], extra_headers={"X-Test-Header": "abc"}
    )
    client.responses.create(model="fake", input="and me")
    conn.request("GET", "/_requests")
    record = json.loads(conn.getresponse().read())
    assert [entry["path"] for entry in record] == ["/v1/chat/completions", "/v1/responses"]
    assert record[0]["headers"]["x-test-header"] == "abc"
    assert record[0]["body"]["messages"] == [{"role": "user", "content": "record me"}]
    assert record[1]["body"]["input"] == "and me"
    assert agent.logged()[-2:] == record


def test_chunked_request_body_is_accepted(agent):
    conn = agent.connection()
    body = json.dumps({"model": "fake", "input": "chunked upload"}).encode()
    conn.request(
        "POST",
        "/v1/responses",
        body=iter([body[:10], body[10:]]),
        encode_chunked=True,
        headers={"Content-Type": "application/json"},
    )
    answer = json.loads(conn.getresponse().read())
    assert answer["output"][0]["content"][0]["text"] == "You said: chunked upload"


def test_keep_alive_reuses_the_connection(agent):
    conn = agent.connection()
    conn.request("GET", "/healthz")
    assert conn.getresponse().read() == b"ok"
    first_socket = conn.sock
    post_json(conn, "/v1/responses", {"model": "fake", "input": "again"}).read()
    raw, error = read_until_end(post_json(conn, "/v1/chat/completions", stream_request("/v1/chat/completions", "hi")))
    assert error is None and sse_data(raw)[-1] == "[DONE]"
    conn.request("GET", "/healthz")
    assert conn.getresponse().read() == b"ok"
    assert conn.sock is first_socket


def test_echo_get_and_post(agent):
    conn = agent.connection()
    conn.putrequest("GET", "/echo?x=1&x=2&y=hello")
    conn.putheader("X-Repeat", "a")
    conn.putheader("X-Repeat", "b")
    conn.putheader("X-Single", "c")
    conn.endheaders()
    echoed = json.loads(conn.getresponse().read())
    assert (echoed["method"], echoed["path"]) == ("GET", "/echo")
    assert echoed["query"] == {"x": ["1", "2"], "y": "hello"}
    assert echoed["headers"]["x-repeat"] == ["a", "b"] and echoed["headers"]["x-single"] == "c"

    conn.request("POST", "/echo?z=9", body=b'{"k": "v"}', headers={"Content-Type": "application/json"})
    echoed = json.loads(conn.getresponse().read())
    assert (echoed["method"], echoed["query"], echoed["body"]) == ("POST", {"z": "9"}, '{"k": "v"}')
    assert echoed["headers"]["content-type"] == "application/json"


def test_events_are_split_across_writes(agent):
    chunks = raw_chunks(agent.port, "/events?n=3&ms=20")
    assert len(chunks) == 6
    assert all(not chunk.endswith(b"\n") for chunk in chunks[0::2]), "first halves must end mid-line"
    assert b"".join(chunks).decode() == "".join(f'data: {{"i": {k}}}\n\n' for k in range(3))


def test_healthz_and_unknown_route(agent):
    conn = agent.connection()
    conn.request("GET", "/healthz")
    assert conn.getresponse().read() == b"ok"
    conn.request("GET", "/nope")
    resp = conn.getresponse()
    assert resp.status == 404 and json.loads(resp.read())["error"]["type"] == "not_found"
