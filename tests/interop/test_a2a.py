"""Interop: the official `a2a-sdk` client and raw A2A JSON-RPC through Tether.

The agent (tests/agents/a2a_agent.py, a real a2a-sdk 1.3 server) keeps its tasks and the
history of every contextId in memory only, so a restart makes it forget everything: the
motivating bug. These tests kill and restart it on the port Tether's `--upstream` names
and check that a conversation through Tether survives, and that Tether's own A2A
features (cancel, resubscribe with Last-Event-ID, the rewritten agent card) work.

Environment (gateway/tests/e2e/agents.rs sets it; see tests/interop/agents.py):
TETHER_URL (Tether started with `--protocol a2a --upstream http://127.0.0.1:$AGENT_PORT`),
AGENT_PORT, FAKE_LLM_URL. Unset: every test here is skipped.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import httpx
import pytest

import agents
from agents import (
    A2aAgent,
    auth_headers,
    control,
    describe,
    session_events,
    sse_events,
    terminal_statuses,
    tether_url,
    wait_terminal,
)

_missing = agents.missing_env("TETHER_URL", "AGENT_PORT", "FAKE_LLM_URL")
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"not set: {', '.join(_missing)}")

if not _missing:
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types.a2a_pb2 import AgentCard, Message, Part, Role, SendMessageRequest
    from google.protobuf.json_format import MessageToDict

FIRST = "My project is named zebra42."
SECOND = "What is my project named?"
FORGOTTEN = "What is the name of your project?"  # what the fake LLM says without history

VERSIONS = ["0.3", "1.0"]
STREAM_READ_TIMEOUT = 10  # s without a byte before a stream counts as hung (the agent sends every 100 ms)
CANCEL_WITHIN = 4  # s from the cancel request to the end of the stream (the agent takes milliseconds)


@pytest.fixture(scope="module")
def agent_process():
    """One agent process for the module (starting one takes seconds); tests restart it."""
    a = A2aAgent(int(agents.env("AGENT_PORT")))
    yield a
    a.kill()
    a.log_path.unlink(missing_ok=True)


@pytest.fixture
def agent(agent_process):
    since = agent_process.log_size()
    yield agent_process.ensure_running()
    # Shown by pytest only when the test failed.
    print(f"--- {agent_process.name} log during this test ---\n{agent_process.log_tail(since=since)}")


# ---- the official client ------------------------------------------------------------------


async def fetch_card(base_url: str) -> "AgentCard":
    async with httpx.AsyncClient(headers=auth_headers(), timeout=30) as http:
        return await A2ACardResolver(http, base_url).get_agent_card()


def card_for(card: "AgentCard", version: str) -> "AgentCard":
    """The card as a client of `version` uses it: for 0.3, only the 0.3 interfaces, which
    makes the factory pick its compat transport (message/send, message/stream)."""
    if version == "1.0":
        return card
    v03 = AgentCard()
    v03.CopyFrom(card)
    del v03.supported_interfaces[:]
    v03.supported_interfaces.extend(i for i in card.supported_interfaces if i.protocol_version == "0.3")
    assert v03.supported_interfaces, f"the card offers no 0.3 interface: {MessageToDict(card)}"
    return v03


async def send(card, version: str, streaming: bool, text: str, context_id: str | None, binding: str = "JSONRPC") -> list:
    """Sends one message with the official client over `binding` (JSONRPC or HTTP+JSON);
    returns every StreamResponse."""
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)])
    if context_id:
        message.context_id = context_id
    async with httpx.AsyncClient(headers=auth_headers(), timeout=60) as http:
        config = ClientConfig(streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding])
        client = ClientFactory(config).create(card_for(card, version))
        try:
            return [event async for event in client.send_message(SendMessageRequest(message=message))]
        finally:
            await client.close()


def turn(base_url: str, version: str, streaming: bool, text: str, context_id: str | None, binding: str = "JSONRPC"):
    """(answer text, contextId, the StreamResponses as dicts) of one completed turn."""

    async def go():
        card = await fetch_card(base_url)
        return card, await send(card, version, streaming, text, context_id, binding)

    card, events = asyncio.run(go())
    shown = [MessageToDict(e) for e in events]
    answer, context = agents.completed_answer(events)
    assert answer is not None, f"no completed status in the answer to {text!r}: {json.dumps(shown, indent=1)}"
    assert context, f"no contextId in {shown}"
    return answer, context, shown


# ---- raw JSON-RPC -------------------------------------------------------------------------


def rpc_headers(version: str, **extra) -> dict:
    return {"A2A-Version": version, **auth_headers(), **extra}


def send_body(version: str, text: str, stream: bool, context_id: str | None = None) -> dict:
    if version == "0.3":
        message = {"kind": "message", "role": "user", "messageId": str(uuid.uuid4()),
                   "parts": [{"kind": "text", "text": text}]}
        method = "message/stream" if stream else "message/send"
    else:
        message = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}
        method = "SendStreamingMessage" if stream else "SendMessage"
    if context_id:
        message["contextId"] = context_id
    return {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": {"message": message}}


def method_body(version: str, v03: str, v10: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": v03 if version == "0.3" else v10, "params": params}


def rpc(url: str, version: str, v03: str, v10: str, params: dict) -> dict:
    r = httpx.post(url + "/", json=method_body(version, v03, v10, params), headers=rpc_headers(version), timeout=30)
    assert r.status_code == 200, f"{v03 if version == '0.3' else v10}: HTTP {r.status_code} {r.text}"
    return r.json()


def result_of(data: str) -> dict:
    """The `result` of one streamed JSON-RPC response (fails on an error response)."""
    body = json.loads(data)
    assert "result" in body, f"stream event is not a result: {data}"
    return body["result"]


def unwrap(result: dict) -> tuple[str, dict]:
    """(kind, object) of a streamed result in either version: task, status, artifact."""
    if result.get("kind") == "task":
        return "task", result
    if result.get("kind") == "status-update":
        return "status", result
    if result.get("kind") == "artifact-update":
        return "artifact", result
    for key, kind in (("task", "task"), ("statusUpdate", "status"), ("artifactUpdate", "artifact")):
        if key in result:
            return kind, result[key]
    if "status" in result and "id" in result:  # a bare v1.0 Task (GetTask, CancelTask)
        return "task", result
    raise AssertionError(f"unknown stream result {result}")


def task_id(result: dict) -> str:
    kind, obj = unwrap(result)
    return obj["id"] if kind == "task" else obj["taskId"]


def context_id(result: dict) -> str:
    return unwrap(result)[1]["contextId"]


def state(obj_or_result: dict) -> str | None:
    """The normalized (v0.3 spelling) state of a task or status update, or None."""
    kind, obj = unwrap(obj_or_result)
    if kind == "artifact":
        return None
    raw = obj["status"]["state"]
    return raw.removeprefix("TASK_STATE_").lower().replace("cancelled", "canceled")


def artifact_text(result: dict) -> str:
    kind, obj = unwrap(result)
    return "".join(p.get("text", "") for p in obj["artifact"]["parts"]) if kind == "artifact" else ""


def int_id(event, where: str) -> int:
    assert event["id"] is not None, f"{where}: SSE event without `id:`: {event['data'][:200]}"
    assert event["id"].isdigit(), f"{where}: SSE id is not a number: {event['id']!r}"
    return int(event["id"])


# ---- 1. the bug, without Tether -------------------------------------------------------------


def test_without_tether_a_restarted_agent_forgets_the_context(agent):
    context = str(uuid.uuid4())
    answer, ctx, _ = turn(agent.url, "1.0", False, FIRST, context)
    assert ctx == context
    answer, _, shown = turn(agent.url, "1.0", False, SECOND, context)
    assert "zebra42" in answer, f"before any restart the agent remembers: {shown}"

    agent.restart()
    answer, _, shown = turn(agent.url, "1.0", False, SECOND, context)
    assert "zebra42" not in answer, f"the agent remembered across a restart?! {shown}"
    assert answer == FORGOTTEN, shown


# ---- 2. a conversation survives the restart through Tether ----------------------------------


def card_urls(card: dict, grpc: bool = False) -> list[str]:
    """The card's HTTP interface URLs (with `grpc`, its v1.0 gRPC addresses instead)."""
    interfaces = card.get("supportedInterfaces") or []
    if grpc:
        return [i["url"] for i in interfaces if i.get("protocolBinding") == "GRPC"]
    urls = [i.get("url") for i in interfaces if i.get("protocolBinding") != "GRPC"]
    urls += [card.get("url")] + [i.get("url") for i in card.get("additionalInterfaces") or []]
    return [u for u in urls if u is not None]


def test_agent_card_through_tether_names_tether(agent):
    direct = httpx.get(agent.url + "/.well-known/agent-card.json", timeout=10).json()
    r = httpx.get(tether_url() + "/.well-known/agent-card.json", headers=auth_headers(), timeout=10)
    assert r.status_code == 200, r.text
    card = r.json()
    assert card["name"] == direct["name"] and card["skills"] == direct["skills"], card
    urls = card_urls(card)
    assert len(urls) == len(card_urls(direct)) == 6, card
    for url in urls:
        assert url.startswith(tether_url() + "/"), f"card URL {url} is not Tether's ({tether_url()}): {card}"
        assert f":{agent.port}" not in url, f"card leaks the agent's address: {card}"
    # The paths stay the agent's (JSON-RPC at /, REST under /rest).
    assert sorted(u.removeprefix(tether_url()) for u in urls) == sorted(
        u.removeprefix(agent.url) for u in card_urls(direct)
    ), card
    # The agent offers no gRPC, so by default (`a2a_advertise_grpc = "auto"`) neither does the
    # card: a client that checks every URL a card lists (ADK's RemoteA2aAgent) takes it.
    assert card_urls(direct, grpc=True) == [], direct
    assert card_urls(card, grpc=True) == [], card

    # "Tether's address" is the one the client used (Host), e.g. behind a proxy or DNS name.
    r = httpx.get(
        tether_url() + "/.well-known/agent-card.json",
        headers={**auth_headers(), "Host": "tether.example:8443"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    for url in card_urls(r.json()):
        assert url.startswith("http://tether.example:8443/"), f"{url} ignores the Host header: {r.json()}"


@pytest.mark.parametrize("streaming", [False, True], ids=["send", "stream"])
@pytest.mark.parametrize("version", VERSIONS)
def test_conversation_survives_agent_restart_through_tether(agent, version, streaming):
    # The card the official client reads through Tether must send it back to Tether.
    card = asyncio.run(fetch_card(tether_url()))
    for interface in card.supported_interfaces:
        # HTTP interfaces by URL, gRPC by host:port, both Tether's.
        assert tether_url().removeprefix("http://") in interface.url, f"card via Tether names {interface.url}"

    # No contextId: Tether assigns one (its session id) and the agent uses it.
    answer, context, shown = turn(tether_url(), version, streaming, FIRST, None)
    assert "zebra42" in answer, shown
    assert session_events(context), f"contextId {context} is not a session in Tether's log"

    agent.restart()
    answer, context2, shown = turn(tether_url(), version, streaming, SECOND, context)
    assert context2 == context, shown
    assert "zebra42" in answer, f"the conversation was lost across the agent restart: {shown}"

    events = session_events(context)
    restores = [e for e in events if e["EventType"] == "session_restore"]
    assert len(restores) == 1, f"expected one session_restore in {context}:\n{describe(events)}"
    assert terminal_statuses(events) == ["completed", "completed"], describe(events)


@pytest.mark.parametrize("streaming", [False, True], ids=["send", "stream"])
@pytest.mark.parametrize("version", VERSIONS)
def test_conversation_over_http_json_survives_agent_restart_through_tether(agent, version, streaming):
    """The same over the HTTP+JSON (REST) transport, which the official client picks when
    told to: Tether serves the REST routes the card names as it serves JSON-RPC."""
    answer, context, shown = turn(tether_url(), version, streaming, FIRST, None, "HTTP+JSON")
    assert "zebra42" in answer, shown
    agent.restart()
    answer, context2, shown = turn(tether_url(), version, streaming, SECOND, context, "HTTP+JSON")
    assert context2 == context and "zebra42" in answer, f"lost across the restart: {shown}"
    events = session_events(context)
    assert len([e for e in events if e["EventType"] == "session_restore"]) == 1, describe(events)
    assert terminal_statuses(events) == ["completed", "completed"], describe(events)


def test_client_chosen_context_survives_agent_restart_through_tether(agent):
    context = f"ctx-{uuid.uuid4()}"
    answer, ctx, shown = turn(tether_url(), "1.0", True, FIRST, context)
    assert ctx == context, f"Tether replaced the client's contextId: {shown}"
    agent.restart()
    answer, ctx, shown = turn(tether_url(), "1.0", False, SECOND, context)
    assert ctx == context and "zebra42" in answer, shown
    events = session_events(context)
    assert [e for e in events if e["EventType"] == "session_restore"], describe(events)


# ---- 3. cancel ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version,how",
    [("0.3", "tasks/cancel"), ("1.0", "CancelTask"), ("1.0", "CancelRun")],
    ids=["v0.3-tasks_cancel", "v1.0-CancelTask", "v1.0-CancelRun"],
)
def test_cancel_stops_a_streaming_task(agent, version, how):
    body = send_body(version, "slow:40:100", stream=True)
    seen: list[dict] = []
    with httpx.Client(timeout=httpx.Timeout(STREAM_READ_TIMEOUT)) as http:
        with http.stream("POST", tether_url() + "/", json=body, headers=rpc_headers(version)) as response:
            assert response.status_code == 200, response.read()
            assert response.headers.get("content-type", "").startswith("text/event-stream"), response.headers
            invocation = response.headers.get("x-invocation-id")
            events = sse_events(response)
            for event in events:
                seen.append(result_of(event["data"]))
                if sum(1 for r in seen if unwrap(r)[0] == "artifact") >= 2:
                    break
            else:
                pytest.fail(f"the stream ended before two chunks: {seen}")
            task, context = task_id(seen[0]), context_id(seen[0])

            asked = time.monotonic()
            if how == "CancelRun":
                assert invocation, f"no x-invocation-id header on the send: {dict(response.headers)}"
                r = control("CancelRun", {"InvocationId": invocation})
                assert r.status_code == 200 and r.json()["Data"]["Found"], r.text
            else:
                answer = rpc(tether_url(), version, "tasks/cancel", "CancelTask", {"id": task})
                assert "result" in answer, f"{how} answered {answer}"
                assert state(answer["result"]) == "canceled", f"{how} answered {answer}"
                assert task_id(answer["result"]) == task, answer
            answered = time.monotonic() - asked
            assert answered < CANCEL_WITHIN, f"{how} took {answered:.1f}s to answer"

            cut = len(seen)
            try:
                for event in events:
                    seen.append(result_of(event["data"]))
            except httpx.ReadTimeout:
                pytest.fail(
                    f"the stream stayed open (nothing for {STREAM_READ_TIMEOUT}s) after the cancel; "
                    f"events after the cancel: {json.dumps(seen[cut:])}"
                )
            ended = time.monotonic() - asked
            assert ended < CANCEL_WITHIN, f"the stream ended {ended:.1f}s after the cancel"

    last = seen[-1]
    assert state(last) == "canceled", f"the stream did not end with a canceled status: {seen[-3:]}"
    if version == "0.3":
        assert unwrap(last)[1].get("final") is True, last
    words = "".join(artifact_text(r) for r in seen)
    assert "w40" not in words, f"the task ran to the end despite the cancel: {words}"
    assert [s for s in map(state, seen) if s in ("completed", "failed")] == [], seen

    # Tether's log: the run ended exactly once, cancelled.
    log = wait_terminal(context, invocation)
    assert terminal_statuses(log) == ["cancelled"], describe(log)

    # The agent was told: its own task is canceled (asked directly, not through Tether).
    deadline = time.monotonic() + 5
    while True:
        got = rpc(agent.url, "0.3", "tasks/get", "GetTask", {"id": task})
        if "result" in got and state(got["result"]) == "canceled" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert "result" in got and state(got["result"]) == "canceled", f"the agent's task {task}: {got}"


# ---- 4. resubscribe -------------------------------------------------------------------------


def read_stream(method: str, url: str, body: dict, headers: dict, limit: int | None = None):
    """(events as (id, result), response headers) of an SSE answer; stops after `limit`."""
    out = []
    with httpx.Client(timeout=httpx.Timeout(STREAM_READ_TIMEOUT)) as http:
        with http.stream(method, url, json=body, headers=headers) as response:
            ctype = response.headers.get("content-type", "")
            if response.status_code != 200 or not ctype.startswith("text/event-stream"):
                raise AssertionError(f"{body['method']}: HTTP {response.status_code} {ctype}: {response.read()!r}")
            try:
                for event in sse_events(response):
                    out.append((int_id(event, body["method"]), result_of(event["data"])))
                    if limit is not None and len(out) >= limit:
                        break
            except httpx.ReadTimeout:
                pytest.fail(f"{body['method']}: the stream hung ({STREAM_READ_TIMEOUT}s silent) after {out}")
            return out, response.headers


def comparable(result: dict) -> str:
    return json.dumps(result, sort_keys=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_resubscribe_after_a_dropped_stream_misses_nothing(agent, version):
    url = tether_url() + "/"
    before, headers = read_stream("POST", url, send_body(version, "slow:20:50", stream=True), rpc_headers(version), 5)
    assert len(before) == 5, before
    task, context = task_id(before[0][1]), context_id(before[0][1])
    invocation = headers.get("x-invocation-id")
    last_id = before[-1][0]
    # The connection is closed now; the task goes on inside Tether.

    sub = method_body(version, "tasks/resubscribe", "SubscribeToTask", {"id": task})
    after, _ = read_stream("POST", url, sub, rpc_headers(version, **{"Last-Event-ID": str(last_id)}))
    assert after, "the resubscription returned nothing"
    assert state(after[-1][1]) == "completed", f"resubscription did not end completed: {after[-3:]}"

    ids = [i for i, _ in before + after]
    assert ids == sorted(set(ids)), f"ids not strictly increasing / duplicated: {ids}"
    assert after[0][0] > last_id, ids

    # A finished task: the spec's UnsupportedOperationError, unless the client asks for the replay
    # Tether offers with a cursor (`-1`: from the start).
    sub = method_body(version, "tasks/resubscribe", "SubscribeToTask", {"id": task})
    refused = httpx.post(url, json=sub, headers=rpc_headers(version), timeout=10).json()
    assert refused["error"]["code"] == -32004, refused
    full, _ = read_stream("POST", url, sub, rpc_headers(version, **{"Last-Event-ID": "-1"}))
    assert [i for i, _ in full] == ids, f"full replay {[i for i, _ in full]} != before+after {ids}"
    assert [comparable(r) for _, r in full] == [comparable(r) for _, r in before + after], (
        "replayed events differ from the ones streamed live"
    )
    words = "".join(artifact_text(r) for _, r in full)
    assert words == "".join(f"w{k} " for k in range(1, 21)), f"answer chunks lost or repeated: {words!r}"

    # And the log: each frame is one of this run's agent events, its id its number in the
    # run's stream (from 0).
    log = wait_terminal(context, invocation)
    logged = [e["SeqId"] for e in log if e["EventType"] == "agent_event"
              and (invocation is None or e.get("InvocationId") == invocation)]
    assert ids == list(range(len(logged))), f"SSE ids {ids} != frame numbers of agent_event seqs {logged} in the log:\n{describe(log)}"
    assert terminal_statuses(log) == ["completed"], describe(log)


# ---- Google ADK's RemoteA2aAgent, given Tether's card by URL ----------------------------------


def test_adk_remote_a2a_agent_takes_tethers_card_by_url_across_an_agent_kill(agent):
    """ADK checks every URL of a card it fetches (https or loopback http, of the card's own
    origin): Tether's card passes, and the conversation survives a kill -9 between turns."""
    from google.adk.agents.remote_a2a_agent import RemoteA2aAgent
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    async def conversation() -> str:
        async with httpx.AsyncClient(headers=auth_headers(), timeout=30) as http:
            remote = RemoteA2aAgent(
                name="through_tether", agent_card=tether_url() + "/.well-known/agent-card.json", httpx_client=http
            )
            runner = Runner(app_name="adk_client", agent=remote, session_service=InMemorySessionService())
            session = await runner.session_service.create_session(app_name="adk_client", user_id="u")

            async def say(text: str) -> str:
                answer = ""
                message = types.Content(role="user", parts=[types.Part(text=text)])
                async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
                    if event.content and event.content.parts:
                        answer += "".join(p.text or "" for p in event.content.parts)
                return answer

            await say(FIRST)
            agent.restart()  # SIGKILL between the turns: the agent forgets the conversation
            return await say(SECOND)

    second = asyncio.run(conversation())
    assert "zebra42" in second, f"the conversation was lost across the agent restart: {second!r}"
    # The agent's view since its restart: Tether's restore, then turn 2, in one contextId.
    received = agent.received()
    assert len(received) == 2 and received[1]["text"] == SECOND, received
    context = received[1]["contextId"]
    assert received[0]["contextId"] == context and FIRST in received[0]["text"], received
    events = session_events(context)
    assert [e["EventType"] for e in events].count("session_restore") == 1, describe(events)
