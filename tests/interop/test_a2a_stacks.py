"""Interop: A2A agents built with the frameworks people deploy, unmodified, through Tether.

STACK names the agent (see agents.StackAgent): `kagent-adk` (kagent's Python ADK runtime,
`kagent-adk run --local`), `kagent-langgraph` (kagent's LangGraph runtime), `adk-a2a`
(Google ADK's `to_a2a()`). Each keeps its conversations in memory and speaks A2A v0.3
JSON-RPC; its model is the fake LLM. The seed's two turns (shared/seeds/000: "My project is
named zebra42. Reply with OK.", then "What is my project named? Reply with just the name.")
with the agent killed with -9 and restarted between them: straight to the agent, turn 2 has
forgotten; through Tether it answers zebra42. Then cancel and a dropped stream's reconnect,
which lean on how each runtime shapes its task events.

Environment (gateway/tests/e2e/agents.rs sets it): STACK, TETHER_STACK_PYTHON (the stack's
venv, tests/interop/venvs.sh), TETHER_URL (Tether `--protocol a2a` in front of
127.0.0.1:$AGENT_PORT), AGENT_PORT, FAKE_LLM_URL. Unset: every test here is skipped.
"""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest

import agents
from agents import (
    StackAgent,
    control,
    describe,
    llm_requests,
    session_events,
    sse_events,
    terminal_statuses,
    tether_url,
    wait_terminal,
)

_missing = agents.missing_env("STACK", "TETHER_URL", "AGENT_PORT", "FAKE_LLM_URL")
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"not set: {', '.join(_missing)}")

FIRST = "My project is named zebra42. Reply with OK."
SECOND = "What is my project named? Reply with just the name."
STREAM_READ_TIMEOUT = 20  # s without a byte before a stream counts as hung
CANCEL_WITHIN = 6  # s from the cancel request to the end of the stream


agent_process, agent = agents.fixtures(lambda: StackAgent(agents.env("STACK"), int(agents.env("AGENT_PORT"))))


# ---- A2A v0.3 JSON-RPC, as kagent's UI and CLI send it ---------------------------------------


def send_body(text: str, stream: bool, context: str | None = None) -> dict:
    message = {"kind": "message", "role": "user", "messageId": str(uuid.uuid4()),
               "parts": [{"kind": "text", "text": text}]}
    if context:
        message["contextId"] = context
    method = "message/stream" if stream else "message/send"
    return {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": {"message": message}}


def rpc(base: str, method: str, params: dict, headers: dict | None = None) -> dict:
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
    r = httpx.post(base + "/", json=body, headers={**agents.auth_headers(), **(headers or {})}, timeout=60)
    assert r.status_code == 200, f"{method}: HTTP {r.status_code} {r.text}"
    return r.json()


def stream_results(response: httpx.Response, limit: int | None = None) -> list[tuple[int | None, dict]]:
    """(SSE id, JSON-RPC result) of each event of a streamed answer, up to `limit`."""
    out = []
    try:
        for event in sse_events(response):
            body = event.json
            assert "result" in body, f"stream event is not a result: {event['data'][:300]}"
            out.append((int(event["id"]) if event["id"] else None, body["result"]))
            if limit is not None and len(out) >= limit:
                break
    except httpx.ReadTimeout:
        pytest.fail(f"the stream hung ({STREAM_READ_TIMEOUT}s silent) after {len(out)} events: {out[-3:]}")
    return out


def state(result: dict) -> str | None:
    kind = result.get("kind")
    if kind in ("task", "status-update"):
        return result["status"]["state"]
    return None


def answer_of(results: list[dict]) -> str:
    """The agent's answer: the text of its artifacts (streamed chunks put together), else
    of the last agent status message."""
    artifacts: dict[str, str] = {}
    for r in results:
        updates = [(a, False) for a in r.get("artifacts") or []] if r.get("kind") == "task" else []
        if r.get("kind") == "artifact-update":
            updates = [(r["artifact"], bool(r.get("append")))]
        for artifact, append in updates:
            key, text = artifact["artifactId"], "".join(p.get("text", "") for p in artifact["parts"])
            artifacts[key] = artifacts.get(key, "") + text if append else text
    if artifacts:
        return "".join(artifacts.values())
    for r in reversed(results):
        message = (r.get("status") or {}).get("message")
        if message and message.get("role") == "agent":
            return "".join(p.get("text", "") for p in message["parts"])
    return ""


def turn(base: str, text: str, context: str | None, stream: bool) -> tuple[str, str, list[dict]]:
    """(answer, contextId, results) of one turn that ended with the task's final state."""
    body = send_body(text, stream, context)
    headers = {**agents.auth_headers()}
    if not stream:
        r = httpx.post(base + "/", json=body, headers=headers, timeout=60)
        assert r.status_code == 200, f"message/send: HTTP {r.status_code} {r.text}"
        doc = r.json()
        assert "result" in doc, f"message/send {text!r}: {doc}"
        results = [doc["result"]]
    else:
        with httpx.Client(timeout=httpx.Timeout(STREAM_READ_TIMEOUT)) as http:
            with http.stream("POST", base + "/", json=body, headers=headers) as response:
                assert response.status_code == 200, response.read()
                assert response.headers.get("content-type", "").startswith("text/event-stream"), response.read()
                results = [r for _, r in stream_results(response)]
    final = [state(r) for r in results if state(r)]
    assert final and final[-1] in ("completed", "input-required"), f"{text!r} ended {final}: {json.dumps(results)[:3000]}"
    contexts = {r.get("contextId") for r in results} - {None}
    assert len(contexts) == 1, f"one contextId expected: {contexts}"
    return answer_of(results), contexts.pop(), results


def restores(context: str) -> list[dict]:
    return [e for e in session_events(context) if e["EventType"] == "session_restore"]


# ---- 1. the bug, without Tether --------------------------------------------------------------


def test_without_tether_the_agent_forgets_at_a_kill_9(agent):
    context = f"ctx-{uuid.uuid4()}"
    answer, ctx, _ = turn(agent.url, FIRST, context, stream=False)
    assert (answer.strip(), ctx) == ("OK.", context), answer
    agent.restart()
    answer, _, results = turn(agent.url, SECOND, context, stream=False)
    assert "zebra42" not in answer, f"the agent remembered across a kill -9?! {results}"


# ---- 2. through Tether the conversation survives ---------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["send", "stream"])
def test_seed_turns_survive_kill_9_through_tether(agent, stream):
    # No contextId: Tether assigns one, and the runtime takes it as its session/thread id.
    answer, context, _ = turn(tether_url(), FIRST, None, stream)
    assert answer.strip() == "OK.", answer

    agent.restart()  # SIGKILL: the runtime's in-memory sessions, tasks and threads are gone
    answer, ctx, results = turn(tether_url(), SECOND, context, stream)
    assert ctx == context, results
    assert answer.strip() == "zebra42", f"the conversation was lost across the kill -9: {json.dumps(results)[:3000]}"

    events = session_events(context)
    assert len(restores(context)) == 1, f"expected one session_restore in {context}:\n{describe(events)}"
    assert terminal_statuses(events) == ["completed", "completed"], describe(events)
    # The model was given the first turn again (inside the runtime's restored session).
    seen = json.dumps(llm_requests()[-1]["body"]["messages"])
    assert "My project is named zebra42" in seen, seen


def proto_message(text: str, context: str | None):
    from a2a.types.a2a_pb2 import Message, Part, Role

    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)])
    if context:
        message.context_id = context
    return message


def proto_answer(events: list) -> tuple[str, str]:
    """(answer, contextId) of a2a-sdk 1.x's `StreamResponse`s (or `SendMessageResponse`s,
    whose fields are its first two): the artifacts' text, chunks put together."""
    artifacts: dict[str, str] = {}
    contexts = set()
    for e in events:
        if e.HasField("task"):
            contexts.add(e.task.context_id)
            for a in e.task.artifacts:
                artifacts[a.artifact_id] = "".join(p.text for p in a.parts)
        elif e.HasField("artifact_update"):
            update = e.artifact_update
            contexts.add(update.context_id)
            text = "".join(p.text for p in update.artifact.parts)
            key = update.artifact.artifact_id
            artifacts[key] = artifacts.get(key, "") + text if update.append else text
        elif e.HasField("status_update"):
            contexts.add(e.status_update.context_id)
    assert len(contexts) == 1, contexts
    return "".join(artifacts.values()), contexts.pop()


def test_official_a2a_client_reads_tethers_card_and_keeps_the_conversation(agent):
    """a2a-sdk 1.x's own client, as an application would use it: it resolves the card
    through Tether (which names Tether, and stays v0.3 when the agent's is), picks its
    transport from it, and streams the seed's turns across a kill -9."""
    import asyncio

    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types.a2a_pb2 import SendMessageRequest

    async def send(text: str, context: str | None) -> tuple[str, str]:
        message = proto_message(text, context)
        async with httpx.AsyncClient(headers=agents.auth_headers(), timeout=60) as http:
            card = await A2ACardResolver(http, tether_url()).get_agent_card()
            urls = [i.url for i in card.supported_interfaces]
            # HTTP interfaces by URL, and Tether's own gRPC by host:port, all Tether's.
            assert urls and all(tether_url().removeprefix("http://") in u for u in urls), urls
            client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
            try:
                events = [e async for e in client.send_message(SendMessageRequest(message=message))]
            finally:
                await client.close()
        return proto_answer(events)

    answer, context = asyncio.run(send(FIRST, None))
    assert answer.strip() == "OK.", answer
    agent.restart()
    answer, ctx = asyncio.run(send(SECOND, context))
    assert (answer.strip(), ctx) == ("zebra42", context), answer
    assert len(restores(context)) == 1, describe(session_events(context))


def test_v1_and_grpc_clients_reach_the_agent(agent):
    """A2A v1.0 clients in front of the runtime, whatever version it speaks (Tether calls a
    v0.3-only one in v0.3): turn 1 as v1.0 JSON-RPC `SendStreamingMessage`, the agent
    killed, turn 2 over gRPC (`lf.a2a.v1.A2AService/SendMessage`) in the same context."""
    import asyncio

    import grpc
    from a2a.types import a2a_pb2_grpc
    from a2a.types.a2a_pb2 import SendMessageRequest, StreamResponse
    from google.protobuf.json_format import ParseDict

    message = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": FIRST}]}
    body = {"jsonrpc": "2.0", "id": "v1", "method": "SendStreamingMessage", "params": {"message": message}}
    headers = {**agents.auth_headers(), "A2A-Version": "1.0"}
    with httpx.Client(timeout=httpx.Timeout(STREAM_READ_TIMEOUT)) as http:
        with http.stream("POST", tether_url() + "/", json=body, headers=headers) as response:
            assert response.headers.get("content-type", "").startswith("text/event-stream"), response.read()
            results = [r for _, r in stream_results(response)]
    assert all("kind" not in r for r in results), f"not v1.0 results: {results}"
    answer, context = proto_answer([ParseDict(r, StreamResponse(), ignore_unknown_fields=True) for r in results])
    assert answer.strip() == "OK.", results

    agent.restart()

    async def over_grpc():
        target = tether_url().removeprefix("http://")
        async with grpc.aio.insecure_channel(target) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            request = SendMessageRequest(message=proto_message(SECOND, context))
            auth = [(k.lower(), v) for k, v in agents.auth_headers().items()]
            return await stub.SendMessage(request, metadata=auth, timeout=60)

    answer, ctx = proto_answer([asyncio.run(over_grpc())])
    assert (answer.strip(), ctx) == ("zebra42", context), answer
    assert len(restores(context)) == 1, describe(session_events(context))


def test_a_fork_is_a_new_context_that_remembers_across_a_kill_9(agent):
    """The seed's fork: a session forked after turn 1 is a contextId the runtime never saw;
    its first turn restores it like a forgotten one, and the original goes on apart."""
    answer, context, _ = turn(tether_url(), FIRST, None, stream=False)
    assert answer.strip() == "OK.", answer
    fork = agents.control_ok("ForkSession", {"SessionId": context})["SessionId"]

    agent.restart()
    answer, ctx, results = turn(tether_url(), SECOND, fork, stream=True)
    assert (answer.strip(), ctx) == ("zebra42", fork), json.dumps(results)[:2000]
    answer, ctx, _ = turn(tether_url(), SECOND, context, stream=False)
    assert (answer.strip(), ctx) == ("zebra42", context), answer
    own = [e for e in session_events(fork) if not e.get("Inherited")]
    assert own[0]["EventType"] == "session_fork", describe(own)
    assert [e["EventType"] for e in own].count("session_restore") == 1, describe(own)


# ---- 3. cancel and reconnect -----------------------------------------------------------------


def test_cancel_through_tether_ends_the_task_canceled(agent):
    body = send_body("slow:60:100", stream=True)
    seen: list[dict] = []
    with httpx.Client(timeout=httpx.Timeout(STREAM_READ_TIMEOUT)) as http:
        with http.stream("POST", tether_url() + "/", json=body, headers=agents.auth_headers()) as response:
            assert response.status_code == 200, response.read()
            invocation = response.headers.get("x-invocation-id")
            events = sse_events(response)
            # Cancelled once the runtime works on it: some stream the model's tokens, others
            # send the answer whole when the model is done (here, after 6 s).
            for event in events:
                seen.append(event.json["result"])
                if "working" in map(state, seen) or answer_of(seen):
                    break
            else:
                pytest.fail(f"the stream ended before the task was worked on: {seen}")
            task = next(r.get("taskId") or r.get("id") for r in seen if r.get("taskId") or r.get("kind") == "task")
            context = seen[0]["contextId"]
            asked = time.monotonic()
            answer = rpc(tether_url(), "tasks/cancel", {"id": task})
            assert state(answer.get("result") or {}) == "canceled", f"tasks/cancel answered {answer}"
            cut = len(seen)
            try:
                for event in events:
                    seen.append(event.json["result"])
            except httpx.ReadTimeout:
                pytest.fail(f"the stream stayed open after the cancel: {json.dumps(seen[cut:])[:2000]}")
            assert time.monotonic() - asked < CANCEL_WITHIN, "the stream outlived the cancel"
    assert state(seen[-1]) == "canceled" and seen[-1].get("final") is True, seen[-3:]
    assert "w60" not in answer_of(seen), "the task ran to its end despite the cancel"
    log = wait_terminal(context, invocation)
    assert terminal_statuses(log) == ["cancelled"], describe(log)


def test_dropped_stream_reconnects_from_last_event_id(agent):
    # The task's first two events (submitted, working) arrive at once, its answer after
    # 3.6 s, streamed or whole: the client leaves in between.
    body = send_body("slow:12:300", stream=True)
    with httpx.Client(timeout=httpx.Timeout(STREAM_READ_TIMEOUT)) as http:
        with http.stream("POST", tether_url() + "/", json=body, headers=agents.auth_headers()) as response:
            assert response.status_code == 200, response.read()
            invocation = response.headers.get("x-invocation-id")
            before = stream_results(response, limit=2)
    # The client's connection is gone; the run goes on inside Tether.
    task = next(r.get("taskId") or r.get("id") for _, r in before if r.get("taskId") or r.get("kind") == "task")
    context = before[0][1]["contextId"]
    last_id = before[-1][0]
    assert last_id is not None, before

    resubscribe = {"jsonrpc": "2.0", "id": "r1", "method": "tasks/resubscribe", "params": {"id": task}}
    with httpx.Client(timeout=httpx.Timeout(STREAM_READ_TIMEOUT)) as http:
        headers = {**agents.auth_headers(), "Last-Event-ID": str(last_id)}
        with http.stream("POST", tether_url() + "/", json=resubscribe, headers=headers) as response:
            assert response.status_code == 200, response.read()
            after = stream_results(response)
    ids = [i for i, _ in before + after]
    assert ids == sorted(set(ids)) and after and after[0][0] > last_id, ids
    results = [r for _, r in before + after]
    assert state(results[-1]) == "completed", results[-3:]
    assert answer_of(results).split() == [f"w{k}" for k in range(1, 13)], answer_of(results)
    log = wait_terminal(context, invocation)
    logged = [e["SeqId"] for e in log if e["EventType"] == "agent_event" and e.get("InvocationId") == invocation]
    # Each frame is one of the run's agent events, numbered in the run's stream from 0.
    assert ids == list(range(len(logged))), f"SSE ids {ids} != frame numbers of the run's agent events {logged}"
