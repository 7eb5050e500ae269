#!/usr/bin/env python3
"""A deterministic fake LLM agent that remembers nothing: Tether's stand-in upstream.

It speaks OpenAI Chat Completions and OpenAI Responses (streaming and not) and answers
only from the history inside the request it is handling, so a conversation "remembers"
only if whoever sits in front of it (Tether) sends the whole history on every turn. That
is exactly the motivating bug: an agent runtime with in-memory sessions forgets
everything at each suspend. The only thing kept between requests is a record of the
requests received, for tests to inspect.

Standard library only. Run it as

    python3 tests/fake_agent.py --port N [--host 127.0.0.1] [--log FILE] [--verbose]
                                [--require-model] [--tool-log FILE]

`--require-model` refuses a model request without `model` (400), as the OpenAI API does
(conformance suites check it); without it the model defaults to "fake-model".

`--port 0` picks a free port. Once listening it prints `READY <port>` on stdout.

Routes
------
POST /v1/chat/completions   Chat Completions (`stream`, `stream_options.include_usage`)
POST /v1/responses          Responses (`stream`)
GET  /v1/models             a small models list
GET|POST|PUT|PATCH|DELETE /echo
                            {method, path, query, raw_query, headers, body}
GET  /events?n=N&ms=M       SSE: N events `data: {"i": k}`, each written in two pieces
GET  /healthz               200 "ok"
GET  /_requests             JSON array of model-endpoint requests received, in order
DELETE /_requests           clears that record
GET  /_tool_runs            JSON array of the tools an approval let run, in order
                            (also appended to --tool-log FILE, which outlives a kill)

Triggers (looked for in the LAST user message; first match decides the answer)
--------
"error"                      HTTP 500 {"error":{"message":"fake failure","type":"server_error"}}
"tool:NAME"                  no tool result after the last user message: a call to NAME,
                             id call_1, arguments {"x": 1}; otherwise "tool said: <output>"
                             (a request with `tool_choice: "required"` and function tools,
                             and no tool result yet, calls its first tool likewise)
"slow:N:MS"                  answer "w1 w2 ... wN " with MS ms before each delta
"die:N" / "close:N"          answer "w1 ... w(N+2) " (or slow's words, with its pauses);
                             after N text deltas, and never past the last one, the process
                             exits (os._exit(3)) / the connection is closed, unfinished.
                             Not streaming: the same, before any response is sent.
"What is my project named"   the name from the latest earlier user or system message saying
                             "project is [now ]named (\\w+)", else "What is the name of your
                             project?"
"Reply with OK"              "OK."
anything else                "You said: <text>"
"reason" (modifier)          reasoning ("Thinking it over.") is emitted before the answer
"approve:NAME"               Responses only: with no mcp_approval_response after the last
                             user message, an `mcp_approval_request` output item (id
                             mcpr_<random>, name NAME, server_label "fake", arguments
                             {"x": 1}) and nothing else; with one, the tool runs once
                             if approved (recorded in /_tool_runs, with the arguments and
                             the request id) and the answer is "NAME ran with {args}" or
                             "NAME was not run: <reason>"

A system message containing "summarizing the earlier part of a conversation" (Tether's
summarizer prompt) makes it a summarizer instead: it answers "Summary: the user said: "
and every `user: ...` and `summary so far: ...` line of the last user message, joined.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

MODEL_PATHS = ("/v1/chat/completions", "/v1/responses")
REASONING_TEXT = "Thinking it over."
TOOL_ARGUMENT_PIECES = ('{"x": ', "1}")
TOOL_CALL_ID = "call_1"
DEFAULT_MODEL = "fake-model"


# --------------------------------------------------------------------------------------
# Reading the history (both wire formats)
# --------------------------------------------------------------------------------------


@dataclass
class Turn:
    """One history entry reduced to what the fake model reasons about."""

    role: str  # "user", "assistant", "system", "tool" (a tool result)
    text: str


def content_text(content) -> str:
    """Text of a message content: a string, or a list of parts (any *text part)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
        return "".join(pieces)
    return ""


def chat_history(body: dict) -> list[Turn]:
    turns = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = message.get("role", "")
        turns.append(Turn(role, content_text(message.get("content"))))
    return turns


def responses_history(body: dict) -> list[Turn]:
    items = body.get("input")
    if isinstance(items, str):
        return [Turn("user", items)]
    turns = []
    for item in items or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")  # EasyInputMessage items may omit "type"
        if kind == "message":
            turns.append(Turn(item.get("role", "user"), content_text(item.get("content"))))
        elif kind == "function_call_output":
            turns.append(Turn("tool", content_text(item.get("output"))))
        elif kind == "function_call":
            turns.append(Turn("assistant", ""))
    return turns


# --------------------------------------------------------------------------------------
# The "model": a plan for one answer
# --------------------------------------------------------------------------------------


@dataclass
class Plan:
    """What to send back for one request."""

    words: list[str] = field(default_factory=list)  # text deltas, in order
    delay_ms: int = 0  # pause before each text delta
    reasoning: list[str] = field(default_factory=list)  # reasoning deltas, first
    tool_name: str | None = None  # answer with a tool call instead of text
    error: bool = False  # HTTP 500
    cut_after: int | None = None  # stop after this many text deltas...
    cut_mode: str | None = None  # ...by "die" (exit the process) or "close" (the socket)
    approval: dict | None = None  # an mcp_approval_request item to answer with

    @property
    def text(self) -> str:
        return "".join(self.words)


def split_words(text: str) -> list[str]:
    """Word deltas that concatenate back to `text`: spaces stay on the preceding word."""
    return re.findall(r"\S*\s*", text)[:-1] or [text]


def numbered_words(count: int) -> list[str]:
    return [f"w{k} " for k in range(1, count + 1)]


SUMMARIZER_MARK = "summarizing the earlier part of a conversation"


def answer_text(last: str, earlier: list[str]) -> str:
    if "What is my project named" in last:
        for text in reversed(earlier):
            names = re.findall(r"project is (?:now )?named (\w+)", text)
            if names:
                return names[-1]
        return "What is the name of your project?"
    if "Reply with OK" in last:
        return "OK."
    return f"You said: {last}"


def plan_answer(history: list[Turn]) -> Plan:
    user_positions = [i for i, turn in enumerate(history) if turn.role == "user"]
    if not user_positions:
        return Plan(words=split_words("You said nothing."))
    last_index = user_positions[-1]
    last = history[last_index].text
    plan = Plan()
    if any(turn.role == "system" and SUMMARIZER_MARK in turn.text for turn in history):
        said = [
            line.split(": ", 1)[1]
            for line in last.splitlines()
            if line.startswith(("user: ", "summary so far: "))
        ]
        plan.words = split_words("Summary: the user said: " + " ".join(said))
        return plan
    if "reason" in last:
        plan.reasoning = split_words(REASONING_TEXT)
    if "error" in last:
        plan.error = True
        return plan

    tool = re.search(r"tool:(\w+)", last)
    if tool:
        results = [t.text for t in history[last_index + 1 :] if t.role == "tool"]
        if not results:
            plan.tool_name = tool.group(1)
            return plan
        plan.words = split_words(f"tool said: {results[-1]}")
        return plan

    slow = re.search(r"slow:(\d+):(\d+)", last)
    cut = re.search(r"\b(die|close):(\d+)", last)
    if cut:
        plan.cut_mode, plan.cut_after = cut.group(1), int(cut.group(2))
    if slow:
        plan.words, plan.delay_ms = numbered_words(int(slow.group(1))), int(slow.group(2))
    elif cut:
        plan.words = numbered_words(plan.cut_after + 2)
    else:
        earlier = [t.text for t in history[:last_index] if t.role in ("user", "system")]
        plan.words = split_words(answer_text(last, earlier))
    return plan


APPROVAL_ARGUMENTS = '{"x": 1}'


def approval_plan(body: dict, tool_runs) -> Plan | None:
    """The `approve:NAME` trigger on the Responses API (see the module's docstring)."""
    items = body.get("input")
    if not isinstance(items, list):
        return None
    users = [i for i, it in enumerate(items) if isinstance(it, dict)
             and it.get("type", "message") == "message" and it.get("role") == "user"]
    if not users:
        return None
    trigger = re.search(r"approve:(\w+)", content_text(items[users[-1]].get("content")))
    if not trigger:
        return None
    after = [it for it in items[users[-1] + 1:] if isinstance(it, dict)]
    requests = {it.get("id"): it for it in after if it.get("type") == "mcp_approval_request"}
    responses = [it for it in after if it.get("type") == "mcp_approval_response"]
    if not responses:
        return Plan(approval={
            "id": new_id("mcpr_"), "type": "mcp_approval_request", "name": trigger.group(1),
            "server_label": "fake", "arguments": APPROVAL_ARGUMENTS,
        })
    response = responses[-1]
    request = requests.get(response.get("approval_request_id")) or {}
    name = request.get("name") or trigger.group(1)
    if response.get("approve"):
        tool_runs.add({"tool": name, "arguments": request.get("arguments"),
                       "approval_request_id": response.get("approval_request_id")})
        return Plan(words=split_words(f"{name} ran with {request.get('arguments')}"))
    return Plan(words=split_words(f"{name} was not run: {response.get('reason') or 'rejected'}"))


def count_tokens(history: list[Turn]) -> int:
    return sum(len(turn.text.split()) for turn in history)


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


# --------------------------------------------------------------------------------------
# Request record (the only state kept between requests)
# --------------------------------------------------------------------------------------


class RequestLog:
    def __init__(self, path: str | None):
        self._entries: list[dict] = []
        self._lock = threading.Lock()
        self._path = path

    def add(self, entry: dict) -> None:
        with self._lock:
            self._entries.append(entry)
            if self._path:
                # Opened per entry and flushed, so a test can read what a killed process saw.
                with open(self._path, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(entry) + "\n")
                    handle.flush()

    def all(self) -> list[dict]:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


class ConnectionCut(Exception):
    """Raised to stop a response midway and drop the connection (the `close:N` trigger)."""


# --------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeAgent/1.0"
    requests_log: RequestLog  # set on the subclass made in main()
    tool_runs: RequestLog  # likewise
    verbose = False
    require_model = False

    def log_message(self, format, *args):
        if self.verbose:
            super().log_message(format, *args)

    # ---- reading --------------------------------------------------------------------

    def read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self.read_chunked_body()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def read_chunked_body(self) -> bytes:
        data = bytearray()
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(data)
            data += self.rfile.read(size)
            self.rfile.readline()

    def header_dict(self) -> dict:
        """Lowercased header names; a repeated header becomes a list of its values."""
        result: dict = {}
        for name, value in self.headers.items():
            key = name.lower()
            if key in result:
                previous = result[key]
                result[key] = (previous if isinstance(previous, list) else [previous]) + [value]
            else:
                result[key] = value
        return result

    # ---- writing --------------------------------------------------------------------

    def send_json(self, status: int, payload) -> None:
        self.send_bytes(status, json.dumps(payload).encode(), "application/json")

    def send_bytes(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def start_stream(self, close_after: bool = False) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        if close_after:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.flush()

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def cut(self, mode: str) -> None:
        """Abandon the response: exit the whole process, or drop just this connection."""
        self.wfile.flush()
        if mode == "die":
            os._exit(3)
        raise ConnectionCut()

    # ---- dispatch -------------------------------------------------------------------

    def route(self, method: str) -> None:
        url = urlsplit(self.path)
        body = self.read_body()  # always drained, so the connection stays usable
        try:
            self.dispatch(method, url, body)
        except ConnectionCut:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def dispatch(self, method: str, url, body: bytes) -> None:
        path = url.path
        if path in MODEL_PATHS and method == "POST":
            return self.handle_model(path, url.query, body)
        if path == "/echo":
            return self.handle_echo(method, url, body)
        if path == "/_requests" and method == "GET":
            return self.send_json(200, self.requests_log.all())
        if path == "/_tool_runs" and method == "GET":
            return self.send_json(200, self.tool_runs.all())
        if path == "/_requests" and method == "DELETE":
            self.requests_log.clear()
            return self.send_json(200, {"cleared": True})
        if path == "/v1/models" and method == "GET":
            return self.send_json(200, models_list())
        if path == "/events" and method == "GET":
            return self.handle_events(parse_qs(url.query))
        if path == "/healthz" and method == "GET":
            return self.send_bytes(200, b"ok", "text/plain")
        self.send_json(404, {"error": {"message": f"no route {method} {path}", "type": "not_found"}})

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_PUT(self):
        self.route("PUT")

    def do_PATCH(self):
        self.route("PATCH")

    def do_DELETE(self):
        self.route("DELETE")

    # ---- pass-through helpers ---------------------------------------------------------

    def handle_echo(self, method: str, url, body: bytes) -> None:
        query = {k: v[0] if len(v) == 1 else v for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        self.send_json(
            200,
            {
                "method": method,
                "path": url.path,
                "query": query,
                "raw_query": url.query,
                "headers": self.header_dict(),
                "body": body.decode("utf-8", errors="replace"),
            },
        )

    def handle_events(self, query: dict) -> None:
        count = int(query.get("n", ["3"])[0])
        delay = int(query.get("ms", ["0"])[0]) / 1000
        self.start_stream(close_after=True)
        for index in range(count):
            if index and delay:
                time.sleep(delay)
            event = b'data: {"i": %d}\n\n' % index
            middle = len(event) // 2  # split mid-line so a proxy must reassemble
            self.write_chunk(event[:middle])
            self.write_chunk(event[middle:])
        self.end_stream()

    # ---- model endpoints --------------------------------------------------------------

    def handle_model(self, path: str, query: str, raw: bytes) -> None:
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        self.requests_log.add({"path": path, "query": query, "headers": self.header_dict(), "body": body})
        if not isinstance(body, dict):
            return self.send_json(
                400, {"error": {"message": "body is not a JSON object", "type": "invalid_request_error"}}
            )

        if self.require_model and not body.get("model"):
            return self.send_json(400, {"error": {
                "message": "Missing required parameter: 'model'.", "type": "invalid_request_error",
                "param": "model", "code": "missing_required_parameter"}})
        is_chat = path == "/v1/chat/completions"
        history = chat_history(body) if is_chat else responses_history(body)
        plan = (None if is_chat else approval_plan(body, self.tool_runs)) or plan_answer(history)
        required = required_tool(body)
        users = [i for i, t in enumerate(history) if t.role == "user"]
        answered = any(t.role == "tool" for t in history[(users[-1] if users else 0):])
        if required and not plan.tool_name and not plan.error and not answered:
            plan = Plan(tool_name=required)
        if plan.error:
            return self.send_json(500, {"error": {"message": "fake failure", "type": "server_error"}})
        if not body.get("stream") and plan.cut_mode:
            self.cut(plan.cut_mode)  # nothing useful can be sent unfinished without a stream
        model = body.get("model") or DEFAULT_MODEL
        usage_in = count_tokens(history)
        if is_chat:
            chat = ChatReply(plan, model, usage_in)
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return self.stream_events(chat.stream(include_usage), plan)
            time.sleep(plan.delay_ms * len(plan.words) / 1000)
            return self.send_json(200, chat.completion())
        reply = ResponsesReply(plan, model, usage_in, body)
        if body.get("stream"):
            return self.stream_events(reply.stream(), plan)
        time.sleep(plan.delay_ms * len(plan.words) / 1000)
        return self.send_json(200, reply.response("completed"))

    def stream_events(self, frames, plan: Plan) -> None:
        """Write (phase, frame) SSE frames. Phases are "pre", "text" (one text delta, which
        `slow` delays and `die`/`close` count) and "post" (what finishes the answer)."""
        self.start_stream()
        sent_text = 0
        for phase, frame in frames:
            cutting = plan.cut_after is not None
            if cutting and (phase == "post" or (phase == "text" and sent_text >= plan.cut_after)):
                self.cut(plan.cut_mode)
            if phase == "text":
                if plan.delay_ms:
                    time.sleep(plan.delay_ms / 1000)
                sent_text += 1
            self.write_chunk(frame)
        self.end_stream()


def required_tool(body: dict) -> str | None:
    """The first function tool's name when `tool_choice` is "required" (both APIs' shapes)."""
    if body.get("tool_choice") != "required":
        return None
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and tool.get("type") == "function":
            name = tool.get("name") or (tool.get("function") or {}).get("name")
            if name:
                return name
    return None


def sse(data, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {payload}\n\n".encode()


def models_list() -> dict:
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "tether-tests"}
            for name in ("fake", DEFAULT_MODEL)
        ],
    }


# --------------------------------------------------------------------------------------
# Chat Completions wire format
# --------------------------------------------------------------------------------------


class ChatReply:
    def __init__(self, plan: Plan, model: str, usage_in: int):
        self.plan = plan
        self.model = model
        self.id = new_id("chatcmpl-")
        self.created = int(time.time())
        self.usage_in = usage_in

    def usage(self) -> dict:
        out = len(self.plan.words) + len(self.plan.reasoning) + (2 if self.plan.tool_name else 0)
        return {
            "prompt_tokens": self.usage_in,
            "completion_tokens": out,
            "total_tokens": self.usage_in + out,
            "completion_tokens_details": {"reasoning_tokens": len(self.plan.reasoning)},
        }

    def finish_reason(self) -> str:
        return "tool_calls" if self.plan.tool_name else "stop"

    def tool_call(self) -> dict:
        arguments = "".join(TOOL_ARGUMENT_PIECES)
        return {
            "id": TOOL_CALL_ID,
            "type": "function",
            "function": {"name": self.plan.tool_name, "arguments": arguments},
        }

    def completion(self) -> dict:
        message: dict = {
            "role": "assistant",
            "content": None if self.plan.tool_name else self.plan.text,
            "refusal": None,
            "annotations": [],
        }
        if self.plan.tool_name:
            message["tool_calls"] = [self.tool_call()]
        if self.plan.reasoning:
            message["reasoning_content"] = "".join(self.plan.reasoning)
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": self.finish_reason()}],
            "usage": self.usage(),
        }

    def chunk_body(self, choices: list) -> dict:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def chunk(self, delta: dict, finish_reason=None) -> bytes:
        return sse(self.chunk_body([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]))

    def stream(self, include_usage: bool):
        yield "pre", self.chunk({"role": "assistant", "content": ""})
        for piece in self.plan.reasoning:
            yield "pre", self.chunk({"reasoning_content": piece})
        if self.plan.tool_name:
            head = {
                "index": 0,
                "id": TOOL_CALL_ID,
                "type": "function",
                "function": {"name": self.plan.tool_name, "arguments": ""},
            }
            yield "pre", self.chunk({"tool_calls": [head]})
            for piece in TOOL_ARGUMENT_PIECES:
                yield "pre", self.chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        for word in self.plan.words:
            yield "text", self.chunk({"content": word})
        yield "post", self.chunk({}, finish_reason=self.finish_reason())
        if include_usage:
            yield "post", sse({**self.chunk_body([]), "usage": self.usage()})
        yield "post", sse("[DONE]")


# --------------------------------------------------------------------------------------
# Responses wire format
# --------------------------------------------------------------------------------------


# What a Response object repeats of its request, with the value when the request gives none
# (the Open Responses `ResponseResource` requires every one of them).
RESPONSE_ECHO = {
    "instructions": None,
    "max_output_tokens": None,
    "max_tool_calls": None,
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "reasoning": {"effort": None, "summary": None},
    "temperature": 1.0,
    "top_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "top_logprobs": 0,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [],
    "truncation": "disabled",
    "background": False,
    "service_tier": "default",
    "safety_identifier": None,
    "prompt_cache_key": None,
    "metadata": {},
}


class ResponsesReply:
    def __init__(self, plan: Plan, model: str, usage_in: int, request: dict | None = None):
        self.request = request or {}
        self.plan = plan
        self.model = model
        self.id = new_id("resp_")
        self.created_at = int(time.time())
        self.usage_in = usage_in
        self.reasoning_id = new_id("rs_")
        self.message_id = new_id("msg_")
        self.call_item_id = new_id("fc_")
        self.sequence = 0
        self.phase = "pre"  # becomes "post" once the last text delta is out

    # ---- items ------------------------------------------------------------------------

    def reasoning_item(self, done: bool) -> dict:
        summary = [{"type": "summary_text", "text": "".join(self.plan.reasoning)}] if done else []
        return {
            "id": self.reasoning_id,
            "type": "reasoning",
            "summary": summary,
            "status": "completed" if done else "in_progress",
        }

    def text_part(self, text: str) -> dict:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def message_item(self, done: bool) -> dict:
        content = [self.text_part(self.plan.text)] if done else []
        status = "completed" if done else "in_progress"
        return {"id": self.message_id, "type": "message", "role": "assistant", "status": status, "content": content}

    def call_item(self, done: bool) -> dict:
        return {
            "id": self.call_item_id,
            "type": "function_call",
            "call_id": TOOL_CALL_ID,
            "name": self.plan.tool_name,
            "arguments": "".join(TOOL_ARGUMENT_PIECES) if done else "",
            "status": "completed" if done else "in_progress",
        }

    def final_output(self) -> list[dict]:
        if self.plan.approval:
            return [self.plan.approval]
        output = [self.reasoning_item(True)] if self.plan.reasoning else []
        output.append(self.call_item(True) if self.plan.tool_name else self.message_item(True))
        return output

    def usage(self) -> dict:
        out = len(self.plan.words) + len(self.plan.reasoning) + (2 if self.plan.tool_name else 0)
        return {
            "input_tokens": self.usage_in,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": len(self.plan.reasoning)},
            "total_tokens": self.usage_in + out,
        }

    def response(self, status: str) -> dict:
        done = status == "completed"
        echo = {k: self.request[k] if self.request.get(k) is not None else v for k, v in RESPONSE_ECHO.items()}
        # As OpenAI's API: a request for the "auto" tier is served, and answered, as "default".
        if echo["service_tier"] == "auto":
            echo["service_tier"] = "default"
        # A function tool is shown with every field, null where the request left one out.
        echo["tools"] = [
            {"description": None, "parameters": None, "strict": None, **t} if t.get("type") == "function" else t
            for t in echo["tools"]
            if isinstance(t, dict)
        ]
        return {
            **echo,
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "completed_at": int(time.time()) if done else None,
            "error": None,
            "incomplete_details": None,
            "model": self.model,
            "output": self.final_output() if done else [],
            # Nothing is kept: the agent remembers nothing between requests.
            "store": False,
            "usage": self.usage() if done else None,
        }

    # ---- events -----------------------------------------------------------------------

    def event(self, kind: str, **fields) -> tuple[str, bytes]:
        """One (phase, SSE frame) pair, numbered; see Handler.stream_events for phases."""
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        phase = "text" if kind == "response.output_text.delta" else self.phase
        return phase, sse(data, event=kind)

    def stream(self):
        yield self.event("response.created", response=self.response("in_progress"))
        yield self.event("response.in_progress", response=self.response("in_progress"))
        index = 0
        if self.plan.approval:
            item = self.plan.approval
            yield self.event("response.output_item.added", output_index=0, item=item)
            yield self.event("response.output_item.done", output_index=0, item=item)
            yield self.event("response.completed", response=self.response("completed"))
            return
        if self.plan.reasoning:
            yield from self.reasoning_events(index)
            index += 1
        if self.plan.tool_name:
            yield from self.call_events(index)
        else:
            yield from self.message_events(index)
        yield self.event("response.completed", response=self.response("completed"))

    def reasoning_events(self, index: int):
        item_id, text = self.reasoning_id, "".join(self.plan.reasoning)
        where = {"item_id": item_id, "output_index": index, "summary_index": 0}
        yield self.event("response.output_item.added", output_index=index, item=self.reasoning_item(False))
        yield self.event("response.reasoning_summary_part.added", **where, part={"type": "summary_text", "text": ""})
        for piece in self.plan.reasoning:
            yield self.event("response.reasoning_summary_text.delta", **where, delta=piece)
        yield self.event("response.reasoning_summary_text.done", **where, text=text)
        yield self.event("response.reasoning_summary_part.done", **where, part={"type": "summary_text", "text": text})
        yield self.event("response.output_item.done", output_index=index, item=self.reasoning_item(True))

    def call_events(self, index: int):
        where = {"item_id": self.call_item_id, "output_index": index}
        yield self.event("response.output_item.added", output_index=index, item=self.call_item(False))
        for piece in TOOL_ARGUMENT_PIECES:
            yield self.event("response.function_call_arguments.delta", **where, delta=piece)
        arguments = "".join(TOOL_ARGUMENT_PIECES)
        yield self.event(
            "response.function_call_arguments.done", **where, name=self.plan.tool_name, arguments=arguments
        )
        yield self.event("response.output_item.done", output_index=index, item=self.call_item(True))

    def message_events(self, index: int):
        where = {"item_id": self.message_id, "output_index": index, "content_index": 0}
        text = self.plan.text
        yield self.event("response.output_item.added", output_index=index, item=self.message_item(False))
        yield self.event("response.content_part.added", **where, part=self.text_part(""))
        for word in self.plan.words:
            yield self.event("response.output_text.delta", **where, delta=word, logprobs=[])
        self.phase = "post"
        yield self.event("response.output_text.done", **where, text=text, logprobs=[])
        yield self.event("response.content_part.done", **where, part=self.text_part(text))
        yield self.event("response.output_item.done", output_index=index, item=self.message_item(True))


# --------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Deterministic fake LLM agent with no memory.")
    parser.add_argument("--port", type=int, required=True, help="port to listen on (0 = any free port)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--log", help="append every model-endpoint request to this file as a JSON line")
    parser.add_argument("--verbose", action="store_true", help="write an access log to stderr")
    parser.add_argument("--require-model", action="store_true", help="refuse a model request without `model` (400)")
    parser.add_argument("--tool-log", help="append every tool an approval let run to this file as a JSON line")
    return parser.parse_args(argv)


def bind(server_class, address, handler, wait: float = 5.0):
    """The server, listening: a port a test picked can still be the local end of another
    process's short-lived connection (tests pick free ports from the ephemeral range), so a
    taken port is tried again for a few seconds before it is given up."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return server_class(address, handler)
        except OSError as e:
            if e.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main(argv=None) -> None:
    args = parse_args(argv)
    handler = type("BoundHandler", (Handler,), {"requests_log": RequestLog(args.log), "tool_runs": RequestLog(args.tool_log), "verbose": args.verbose, "require_model": args.require_model})
    # A backlog like a real server's: with socketserver's default of 5, a burst of
    # concurrent runs finds connections reset.
    server_class = type("Server", (ThreadingHTTPServer,), {"request_queue_size": 256})
    server = bind(server_class, (args.host, args.port), handler)
    server.daemon_threads = True
    print(f"READY {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
