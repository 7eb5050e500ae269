"""Interop over A2A's gRPC binding: the official `a2a-sdk` client and server with `grpcio`.

The agent (tests/agents/a2a_agent.py with --grpc-port, a real a2a-sdk 1.3 server) serves
JSON-RPC and gRPC from one in-memory task store and forgets everything at a restart. Two
gateways sit in front of it: TETHER_URL calls it over JSON-RPC, TETHER_GRPC_URL over gRPC
(`--a2a-upstream-transport grpc`, its gRPC address read from the agent's card), and
TETHER_GRPC_ONLY_URL too, but with the address configured (`--a2a-grpc-upstream`) and
nothing at its `--upstream`: an agent without an HTTP card. Clients
reach either over gRPC (h2c on Tether's one port) or JSON-RPC. Every case restarts the
agent with SIGKILL where it matters and checks what the client got, what Tether logged,
and what the agent itself was given (its /_received record).

Environment (gateway/tests/e2e/agents.rs sets it): TETHER_URL, TETHER_GRPC_URL, TETHER_GRPC_ONLY_URL,
AGENT_PORT, AGENT_GRPC_PORT, FAKE_LLM_URL, TETHER_API_KEY (acct-a), TETHER_API_KEY_B
(acct-b), TETHER_API_KEY_C (acct-c, one request per minute), TETHER_MAX_BODY_BYTES.
Unset: every test here is skipped (and the Rust wrapper fails on a skip).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid

import httpx
import pytest

import agents
from agents import A2aAgent, auth_headers, describe, session_events, terminal_statuses, wait_terminal

_missing = agents.missing_env(
    "TETHER_URL", "TETHER_GRPC_URL", "TETHER_GRPC_ONLY_URL", "AGENT_PORT", "AGENT_GRPC_PORT", "FAKE_LLM_URL",
    "TETHER_API_KEY", "TETHER_API_KEY_B", "TETHER_API_KEY_C", "TETHER_MAX_BODY_BYTES",
)
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"not set: {', '.join(_missing)}")

if not _missing:
    import grpc
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.client.client import ClientCallContext
    from a2a.types import a2a_pb2_grpc
    from a2a.types.a2a_pb2 import (
        CancelTaskRequest, DeleteTaskPushNotificationConfigRequest, GetExtendedAgentCardRequest,
        GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
        ListTasksRequest, Message, Part, Role, SendMessageRequest, SubscribeToTaskRequest,
        TaskPushNotificationConfig, TaskState,
    )
    from google.protobuf.json_format import MessageToDict
    from google.rpc import error_details_pb2, status_pb2

FIRST = "My project is named zebra42."
SECOND = "What is my project named?"
FORGOTTEN = "What is the name of your project?"  # what the fake LLM says without history
CALL_TIMEOUT = 30  # s for one call; a hung stream fails the test instead of the suite

TETHERS = {"jsonrpc": "TETHER_URL", "grpc": "TETHER_GRPC_URL", "grpc-only": "TETHER_GRPC_ONLY_URL"}


def tether(upstream: str) -> str:
    return agents.env(TETHERS[upstream]).rstrip("/")


def grpc_target(base_url: str) -> str:
    return base_url.split("://", 1)[-1].rstrip("/")


def key(which: str = "a") -> str:
    return agents.env({"a": "TETHER_API_KEY", "b": "TETHER_API_KEY_B", "c": "TETHER_API_KEY_C"}[which])


def metadata(which: str = "a", **extra) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {key(which)}"), *extra.items()]


@pytest.fixture(scope="module")
def agent_process():
    a = A2aAgent(int(agents.env("AGENT_PORT")), int(agents.env("AGENT_GRPC_PORT")))
    yield a
    a.kill()
    a.log_path.unlink(missing_ok=True)


@pytest.fixture
def agent(agent_process):
    since = agent_process.log_size()
    yield agent_process.ensure_running()
    print(f"--- {agent_process.name} log during this test ---\n{agent_process.log_tail(since=since)}")


# ---- the official client --------------------------------------------------------------------


def new_message(text: str, context_id: str | None) -> "Message":
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)])
    if context_id:
        message.context_id = context_id
    return message


async def sdk_client(base_url: str, binding: str, streaming: bool, http: httpx.AsyncClient):
    card = await A2ACardResolver(http, base_url).get_agent_card()
    config = ClientConfig(
        streaming=streaming,
        httpx_client=http,
        supported_protocol_bindings=[binding],
        grpc_channel_factory=grpc.aio.insecure_channel,
    )
    return card, ClientFactory(config).create(card)


def turn(base_url: str, binding: str, streaming: bool, text: str, context_id: str | None, direct: bool = False):
    """(answer, contextId, the events as dicts) of one completed turn with the official
    client over `binding` (GRPC or JSONRPC); `direct`: straight to the agent, no key."""

    async def go():
        headers = {} if direct else auth_headers()
        async with httpx.AsyncClient(headers=headers, timeout=CALL_TIMEOUT) as http:
            card, client = await sdk_client(base_url, binding, streaming, http)
            if binding == "GRPC" and not direct:
                chosen = [i.url for i in card.supported_interfaces if i.protocol_binding == "GRPC"]
                assert chosen == [grpc_target(base_url)], f"Tether's card names gRPC at {chosen}"
            context = None if direct else ClientCallContext(
                service_parameters={"authorization": f"Bearer {key()}"}, timeout=CALL_TIMEOUT
            )
            try:
                request = SendMessageRequest(message=new_message(text, context_id))
                return [e async for e in client.send_message(request, context=context)]
            finally:
                await client.close()

    events = asyncio.run(go())
    shown = [MessageToDict(e) for e in events]
    answer, context = agents.completed_answer(events)
    assert answer is not None, f"no completed status in the answer to {text!r}: {shown}"
    return answer, context, shown


# ---- raw gRPC, for what the official client hides ------------------------------------------


def stub_call(target: str, method: str, request, md=None, timeout: float = CALL_TIMEOUT):
    """A unary call; returns (response, None) or (None, grpc.RpcError)."""

    async def go():
        async with grpc.aio.insecure_channel(target) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            call = getattr(stub, method)(request, metadata=md, timeout=timeout)
            try:
                return await call, None, await call.initial_metadata()
            except grpc.aio.AioRpcError as e:
                return None, e, e.initial_metadata()

    response, error, _ = asyncio.run(go())
    return response, error


def stream_call(target: str, method: str, request, md=None, stop_after=None, on_event=None):
    """A server-streaming call: (events, the error that ended it or None)."""

    async def go():
        events = []
        async with grpc.aio.insecure_channel(target) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            call = getattr(stub, method)(request, metadata=md, timeout=CALL_TIMEOUT)
            try:
                async for event in call:
                    events.append(event)
                    if on_event:
                        await asyncio.to_thread(on_event, events)
                    if stop_after and stop_after(events):
                        call.cancel()
                        return events, None
                return events, None
            except grpc.aio.AioRpcError as e:
                return events, e

    return asyncio.run(go())


def raw_call(target: str, path: str, payload: bytes, md=None):
    """A unary call with `payload` as the request message's bytes: the status it ended with."""

    async def go():
        async with grpc.aio.insecure_channel(target) as channel:
            call = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
            try:
                await call(payload, metadata=md, timeout=CALL_TIMEOUT)
                return None
            except grpc.aio.AioRpcError as e:
                return e

    return asyncio.run(go())


def details_of(error: "grpc.aio.AioRpcError") -> list:
    """The google.rpc.Status details in the error's trailers, unpacked."""
    for k, v in error.trailing_metadata() or ():
        if k == "grpc-status-details-bin":
            status = status_pb2.Status()
            status.ParseFromString(v)
            out = []
            for detail in status.details:
                for kind in (error_details_pb2.ErrorInfo, error_details_pb2.RetryInfo, error_details_pb2.BadRequest):
                    if detail.Is(kind.DESCRIPTOR):
                        item = kind()
                        detail.Unpack(item)
                        out.append(item)
            return out
    return []


def task_of(event) -> tuple[str, str]:
    """(taskId, contextId) a StreamResponse is about."""
    for field, tid, cid in (("task", "id", "context_id"), ("status_update", "task_id", "context_id"),
                            ("artifact_update", "task_id", "context_id")):
        if event.HasField(field):
            obj = getattr(event, field)
            return getattr(obj, tid), getattr(obj, cid)
    raise AssertionError(f"no task in {event}")


def state_of(event):
    if event.HasField("task"):
        return event.task.status.state
    if event.HasField("status_update"):
        return event.status_update.status.state
    return None


def words(events) -> str:
    return "".join(p.text for e in events if e.HasField("artifact_update") for p in e.artifact_update.artifact.parts)


# ---- 1. the bug over gRPC, without Tether -----------------------------------------------------


def test_without_tether_a_restarted_grpc_agent_forgets(agent):
    answer, context, shown = turn(agent.url, "GRPC", False, FIRST, None, direct=True)
    answer, _, shown = turn(agent.url, "GRPC", False, SECOND, context, direct=True)
    assert "zebra42" in answer, f"before a restart the agent remembers: {shown}"
    agent.restart()
    answer, _, shown = turn(agent.url, "GRPC", False, SECOND, context, direct=True)
    assert answer == FORGOTTEN, f"the agent remembered across a restart?! {shown}"


# ---- 2. the two turns survive a kill -9 through Tether ----------------------------------------

CASES = [("GRPC", "jsonrpc"), ("GRPC", "grpc"), ("JSONRPC", "grpc")]


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("client,upstream", CASES, ids=["grpc-to-jsonrpc", "grpc-to-grpc", "jsonrpc-to-grpc"])
def test_conversation_survives_agent_kill(agent, client, upstream, streaming):
    base = tether(upstream)
    answer, context, shown = turn(base, client, streaming, FIRST, None)
    assert context and session_events(context, base=base), f"contextId {context} is not a session in Tether's log"

    agent.restart()  # SIGKILL: the agent forgets every task and conversation
    answer, context2, shown = turn(base, client, streaming, SECOND, context)
    assert context2 == context, shown
    assert "zebra42" in answer, f"the conversation was lost across the agent restart: {shown}"

    events = session_events(context, base=base)
    restores = [e for e in events if e["EventType"] == "session_restore"]
    assert len(restores) == 1, f"expected one session_restore in {context}:\n{describe(events)}"
    assert terminal_statuses(events) == ["completed", "completed"], describe(events)

    # The agent's view since its restart: the restored transcript, then turn 2, over the
    # transport Tether calls it with, each with the gateway's account (never the client's).
    received = [r for r in agent.received() if r["contextId"] == context]
    transport = "grpc" if upstream == "grpc" else "http"
    assert [r["transport"] for r in received] == [transport, transport], received
    assert FIRST in received[0]["text"] and received[1]["text"] == SECOND, received
    assert {r["account"] for r in received} == {"acct-a"}, received


def test_an_agent_without_an_http_card_is_called_at_its_configured_grpc_address(agent):
    target = grpc_target(tether("grpc-only"))
    first, error = stub_call(target, "SendMessage", SendMessageRequest(message=new_message(FIRST, None)), metadata())
    assert error is None, error
    context = first.task.context_id
    agent.restart()
    second, error = stub_call(target, "SendMessage", SendMessageRequest(message=new_message(SECOND, context)), metadata())
    assert error is None, error
    assert second.task.status.message.parts[0].text == "zebra42", MessageToDict(second)
    received = [r for r in agent.received() if r["contextId"] == context]
    assert [r["transport"] for r in received] == ["grpc", "grpc"], received
    events = session_events(context, base=tether("grpc-only"))
    assert [e["EventType"] for e in events].count("session_restore") == 1, describe(events)


def test_a_client_sent_account_never_reaches_the_agent(agent):
    target = grpc_target(tether("grpc"))
    request = SendMessageRequest(message=new_message("Reply with OK.", None))
    response, error = stub_call(target, "SendMessage", request, metadata("a", **{"x-account-id": "acct-b"}))
    assert error is None, error
    received = [r for r in agent.received() if r["contextId"] == response.task.context_id]
    assert [r["account"] for r in received] == ["acct-a"], received


# ---- 3. reads from the log, and cancel, over gRPC ---------------------------------------------


@pytest.mark.parametrize("upstream", ["jsonrpc", "grpc"])
def test_get_and_subscribe_over_grpc_answer_from_the_log_after_restart(agent, upstream):
    target = grpc_target(tether(upstream))
    request = SendMessageRequest(message=new_message("slow:5:20", None))
    live, error = stream_call(target, "SendStreamingMessage", request, metadata())
    assert error is None and state_of(live[-1]) == TaskState.TASK_STATE_COMPLETED, (error, live[-3:])
    task_id, context = task_of(live[0])
    agent.restart()
    _, forgotten = stub_call(agent.grpc_address, "GetTask", GetTaskRequest(id=task_id))
    assert forgotten and forgotten.code() == grpc.StatusCode.NOT_FOUND, "the agent still knows the task?"

    task, error = stub_call(target, "GetTask", GetTaskRequest(id=task_id), metadata())
    assert error is None, error
    assert (task.id, task.context_id) == (task_id, context)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, MessageToDict(task)
    assert "".join(p.text for a in task.artifacts for p in a.parts) == words(live), MessageToDict(task)

    # A finished task: FAILED_PRECONDITION (UnsupportedOperationError), unless the client asks for
    # Tether's replay with a cursor (`-1`: from the start).
    refused, error = stream_call(target, "SubscribeToTask", SubscribeToTaskRequest(id=task_id), metadata())
    assert refused == [] and error and error.code() == grpc.StatusCode.FAILED_PRECONDITION, error
    replay, error = stream_call(target, "SubscribeToTask", SubscribeToTaskRequest(id=task_id),
                                metadata(**{"last-event-id": "-1"}))
    assert error is None, error
    assert [MessageToDict(e) for e in replay] == [MessageToDict(e) for e in live], "the replay differs"
    assert agent.received() == [], "the agent was asked during the reads"


@pytest.mark.parametrize("upstream", ["jsonrpc", "grpc"])
def test_cancel_over_grpc_stops_a_slow_task(agent, upstream):
    target = grpc_target(tether(upstream))
    cancelled = {}

    def cancel_after_two_chunks(events):
        if "answer" not in cancelled and sum(e.HasField("artifact_update") for e in events) >= 2:
            task_id, _ = task_of(events[0])
            cancelled["asked"] = time.monotonic()
            cancelled["answer"] = stub_call(target, "CancelTask", CancelTaskRequest(id=task_id), metadata())

    request = SendMessageRequest(message=new_message("slow:40:100", None))
    events, error = stream_call(target, "SendStreamingMessage", request, metadata(), on_event=cancel_after_two_chunks)
    ended = time.monotonic() - cancelled["asked"]
    assert error is None, f"the stream ended with {error}"
    task, cancel_error = cancelled["answer"]
    assert cancel_error is None and task.status.state == TaskState.TASK_STATE_CANCELED, (cancel_error, task)
    assert state_of(events[-1]) == TaskState.TASK_STATE_CANCELED, events[-3:]
    assert ended < 4, f"the stream ended {ended:.1f}s after the cancel"
    assert "w40" not in words(events), "the task ran to its end despite the cancel"
    task_id, context = task_of(events[0])
    log = wait_terminal(context, None, key(), base=tether(upstream))
    assert terminal_statuses(log) == ["cancelled"], describe(log)
    # The agent was told: its own task is canceled (asked over its own gRPC).
    deadline = time.monotonic() + 5
    while True:
        own, _ = stub_call(agent.grpc_address, "GetTask", GetTaskRequest(id=task_id))
        if own and own.status.state == TaskState.TASK_STATE_CANCELED or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert own and own.status.state == TaskState.TASK_STATE_CANCELED, own


@pytest.mark.parametrize("upstream", ["jsonrpc", "grpc"])
def test_calls_tether_has_no_part_in_are_passed_to_the_agent(agent, upstream):
    target = grpc_target(tether(upstream))
    sent, error = stub_call(target, "SendMessage", SendMessageRequest(message=new_message("Reply with OK.", None)), metadata())
    assert error is None, error
    listed, error = stub_call(target, "ListTasks", ListTasksRequest(context_id=sent.task.context_id), metadata())
    assert error is None and [t.id for t in listed.tasks] == [sent.task.id], (error, listed)
    # The agent has no extended card: its own error reaches the client, code and reason.
    reason = lambda e: [d.reason for d in details_of(e) if isinstance(d, error_details_pb2.ErrorInfo)]
    _, own = stub_call(agent.grpc_address, "GetExtendedAgentCard", GetExtendedAgentCardRequest())
    _, error = stub_call(target, "GetExtendedAgentCard", GetExtendedAgentCardRequest(), metadata())
    assert own and error and error.code() == own.code(), (own, error)
    assert reason(error) == reason(own) != [], (reason(own), reason(error))


# ---- account scoping of what the agent answers: task lists and push configs ------------------

V1 = {"A2A-Version": "1.0"}


def rpc_call(base: str, which: str, method: str, params: dict, v1: bool = True) -> dict:
    """A JSON-RPC call with account `which`'s key: the response object."""
    headers = {**auth_headers(key(which)), **(V1 if v1 else {})}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    r = httpx.post(base + "/", json=body, headers=headers, timeout=CALL_TIMEOUT)
    assert r.status_code == 200, r.text
    return r.json()


def a_task_of(base: str, which: str) -> tuple[str, str]:
    """(task id, contextId) of a completed task account `which` starts over JSON-RPC."""
    sent = rpc_call(base, which, "SendMessage", {"message": {
        "role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": "Reply with OK."}]}})
    task = sent["result"]["task"]
    return task["id"], task["contextId"]


def hook(which: str) -> str:
    return f"https://hooks.example/{which}/{uuid.uuid4().hex[:8]}"


def test_task_lists_and_push_configs_over_json_rpc_are_the_accounts_own(agent):
    base = tether("jsonrpc")
    mine, my_context = a_task_of(base, "a")
    theirs, _ = a_task_of(base, "b")
    listed = lambda which, params: [t["id"] for t in rpc_call(base, which, "ListTasks", params)["result"]["tasks"]]
    # Both tasks are in the agent's one task store; each account is shown its own.
    a_sees, b_sees = listed("a", {}), listed("b", {})
    assert mine in a_sees and theirs not in a_sees, a_sees
    assert theirs in b_sees and mine not in b_sees, b_sees
    assert listed("b", {"contextId": my_context}) == [], "another account's conversation lists nothing"
    assert listed("a", {"contextId": my_context}) == [mine]

    url = hook("a")
    made = rpc_call(base, "a", "CreateTaskPushNotificationConfig", {"taskId": mine, "url": url})
    config = made["result"]
    assert config["url"] == url and config["taskId"] == mine, made
    not_found = lambda response: response.get("error", {}).get("code") == -32001
    # The other account can neither add to, read, list nor delete the task's configs.
    for method, params in [
        ("CreateTaskPushNotificationConfig", {"taskId": mine, "url": hook("b")}),
        ("GetTaskPushNotificationConfig", {"taskId": mine, "id": config["id"]}),
        ("ListTaskPushNotificationConfigs", {"taskId": mine}),
        ("DeleteTaskPushNotificationConfig", {"taskId": mine, "id": config["id"]}),
    ]:
        answer = rpc_call(base, "b", method, params)
        assert not_found(answer), (method, answer)
    # v0.3's methods name the task `id` (`taskId` for set): refused the same way.
    for method, params in [
        ("tasks/pushNotificationConfig/list", {"id": mine}),
        ("tasks/pushNotificationConfig/get", {"id": mine, "pushNotificationConfigId": config["id"]}),
        ("tasks/pushNotificationConfig/delete", {"id": mine, "pushNotificationConfigId": config["id"]}),
        ("tasks/pushNotificationConfig/set", {"taskId": mine, "pushNotificationConfig": {"url": hook("b")}}),
    ]:
        answer = rpc_call(base, "b", method, params, v1=False)
        assert not_found(answer), (method, answer)
    # Nothing the other account tried changed the owner's configs.
    own = rpc_call(base, "a", "ListTaskPushNotificationConfigs", {"taskId": mine})["result"]
    assert [c["url"] for c in own["configs"]] == [url], own
    gone = rpc_call(base, "a", "DeleteTaskPushNotificationConfig", {"taskId": mine, "id": config["id"]})
    assert "error" not in gone, gone


def test_task_lists_and_push_configs_over_http_json_are_the_accounts_own(agent):
    base = tether("jsonrpc")
    mine, my_context = a_task_of(base, "a")
    theirs, _ = a_task_of(base, "b")
    rest = lambda method, path, which, **kw: httpx.request(
        method, f"{base}/rest{path}", headers={**auth_headers(key(which)), **V1}, timeout=CALL_TIMEOUT, **kw)
    listed = lambda which, query="": [t["id"] for t in rest("GET", f"/tasks{query}", which).json()["tasks"]]
    a_sees, b_sees = listed("a"), listed("b")
    assert mine in a_sees and theirs not in a_sees, a_sees
    assert theirs in b_sees and mine not in b_sees, b_sees
    assert listed("b", f"?contextId={my_context}") == []

    url = hook("a")
    made = rest("POST", f"/tasks/{mine}/pushNotificationConfigs", "a", json={"url": url})
    assert made.status_code == 200, made.text
    config = made.json()
    for method, path, body in [
        ("POST", f"/tasks/{mine}/pushNotificationConfigs", {"url": hook("b")}),
        ("GET", f"/tasks/{mine}/pushNotificationConfigs", None),
        ("GET", f"/tasks/{mine}/pushNotificationConfigs/{config['id']}", None),
        ("DELETE", f"/tasks/{mine}/pushNotificationConfigs/{config['id']}", None),
    ]:
        r = rest(method, path, "b", json=body) if body else rest(method, path, "b")
        assert r.status_code == 404, (method, path, r.status_code, r.text)
        assert r.json()["error"]["status"] == "NOT_FOUND", r.text
    own = rest("GET", f"/tasks/{mine}/pushNotificationConfigs", "a")
    assert own.status_code == 200 and [c["url"] for c in own.json()["configs"]] == [url], own.text


@pytest.mark.parametrize("upstream", ["jsonrpc", "grpc"])
def test_task_lists_and_push_configs_over_grpc_are_the_accounts_own(agent, upstream):
    base = tether(upstream)
    target = grpc_target(base)
    mine, my_context = a_task_of(base, "a")
    theirs, _ = a_task_of(base, "b")

    def listed(which, **fields):
        response, error = stub_call(target, "ListTasks", ListTasksRequest(**fields), metadata(which))
        assert error is None, error
        return [t.id for t in response.tasks]

    a_sees, b_sees = listed("a"), listed("b")
    assert mine in a_sees and theirs not in a_sees, a_sees
    assert theirs in b_sees and mine not in b_sees, b_sees
    assert listed("b", context_id=my_context) == []

    url = hook("a")
    made, error = stub_call(
        target, "CreateTaskPushNotificationConfig", TaskPushNotificationConfig(task_id=mine, url=url), metadata("a"))
    assert error is None and made.url == url, error
    for method, request in [
        ("CreateTaskPushNotificationConfig", TaskPushNotificationConfig(task_id=mine, url=hook("b"))),
        ("GetTaskPushNotificationConfig", GetTaskPushNotificationConfigRequest(task_id=mine, id=made.id)),
        ("ListTaskPushNotificationConfigs", ListTaskPushNotificationConfigsRequest(task_id=mine)),
        ("DeleteTaskPushNotificationConfig", DeleteTaskPushNotificationConfigRequest(task_id=mine, id=made.id)),
    ]:
        _, error = stub_call(target, method, request, metadata("b"))
        assert error is not None and error.code() == grpc.StatusCode.NOT_FOUND, (method, error)
    own, error = stub_call(
        target, "ListTaskPushNotificationConfigs", ListTaskPushNotificationConfigsRequest(task_id=mine), metadata("a"))
    assert error is None and [c.url for c in own.configs] == [url], (error, own)


# ---- 4. errors are statuses, and nothing refused reaches the agent ----------------------------


def llm_calls() -> int:
    return len(agents.llm_requests())


@pytest.fixture
def untouched(agent):
    """Asserts, after the test, that the agent was given nothing and its LLM not called."""
    before, llm_before = len(agent.received()), llm_calls()
    yield agent
    assert agent.received()[before:] == [], "a refused call reached the agent's executor"
    assert llm_calls() == llm_before, "the agent's LLM was called"


def send_request(text="hello") -> "SendMessageRequest":
    return SendMessageRequest(message=new_message(text, None))


@pytest.mark.parametrize("upstream", ["jsonrpc", "grpc"])
def test_unauthenticated_calls_are_refused(untouched, upstream):
    target = grpc_target(tether(upstream))
    for md in (None, [("authorization", "Bearer not-a-key")], [("x-api-key", "nope")]):
        _, error = stub_call(target, "SendMessage", send_request(), md)
        assert error and error.code() == grpc.StatusCode.UNAUTHENTICATED, (md, error)
        assert error.details(), "an error status without a message"
    # The API key as x-api-key metadata is accepted like the bearer token.
    _, error = stub_call(target, "GetTask", GetTaskRequest(id="no-such-task"), [("x-api-key", key())])
    assert error and error.code() == grpc.StatusCode.NOT_FOUND, error


def test_rate_limited_calls_are_resource_exhausted_with_retry_info(untouched):
    target = grpc_target(tether("grpc"))
    codes = []
    for _ in range(3):
        _, error = stub_call(target, "GetTask", GetTaskRequest(id="no-such-task"), metadata("c"))
        codes.append(error.code() if error else grpc.StatusCode.OK)
        if error and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            retry = [d for d in details_of(error) if isinstance(d, error_details_pb2.RetryInfo)]
            assert retry and retry[0].retry_delay.seconds >= 1, details_of(error)
            assert "retry-after" in dict(error.initial_metadata() or ()), error.initial_metadata()
            break
    assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes, codes


@pytest.mark.parametrize("upstream", ["jsonrpc", "grpc"])
def test_unknown_and_foreign_tasks_are_not_found(agent, upstream):
    target = grpc_target(tether(upstream))
    response, error = stub_call(target, "SendMessage", send_request("Reply with OK."), metadata("a"))
    assert error is None, error
    mine = response.task.id
    before = len(agent.received())
    for md, task in ((metadata("a"), "no-such-task"), (metadata("b"), mine)):
        for method, request in (("GetTask", GetTaskRequest(id=task)), ("CancelTask", CancelTaskRequest(id=task))):
            _, error = stub_call(target, method, request, md)
            assert error and error.code() == grpc.StatusCode.NOT_FOUND, (method, task, error)
            # The reason a2a-sdk's client raises TaskNotFoundError for.
            reasons = [(d.domain, d.reason) for d in details_of(error) if isinstance(d, error_details_pb2.ErrorInfo)]
            assert reasons == [("a2a-protocol.org", "TASK_NOT_FOUND")], (method, reasons)
        events, error = stream_call(target, "SubscribeToTask", SubscribeToTaskRequest(id=task), md)
        assert events == [] and error and error.code() == grpc.StatusCode.NOT_FOUND, (task, events, error)
    assert len(agent.received()) == before, "a refused call reached the agent's executor"


@pytest.mark.parametrize("upstream", ["jsonrpc", "grpc"])
def test_bad_and_oversized_messages_are_invalid_arguments(untouched, upstream):
    target = grpc_target(tether(upstream))
    path = "/lf.a2a.v1.A2AService/SendMessage"
    error = raw_call(target, path, b"\x12\xff\xff\xff", metadata())
    assert error and error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert "SendMessageRequest" in error.details(), error.details()
    # A valid message without its required parts: the SDK's validation error, in kind.
    empty = SendMessageRequest(message=Message(role=Role.ROLE_USER, message_id="m"))
    _, error = stub_call(target, "SendMessage", empty, metadata())
    assert error and error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    big = send_request("x" * (int(agents.env("TETHER_MAX_BODY_BYTES")) + 1))
    _, error = stub_call(target, "SendMessage", big, metadata())
    assert error and error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert "larger than" in error.details(), error.details()


def test_other_versions_and_methods_are_refused(untouched):
    target = grpc_target(tether("grpc"))
    _, error = stub_call(target, "SendMessage", send_request(), metadata(**{"a2a-version": "0.3"}))
    assert error and error.code() == grpc.StatusCode.FAILED_PRECONDITION, error
    error = raw_call(target, "/lf.a2a.v1.A2AService/NoSuchMethod", b"", metadata())
    assert error and error.code() == grpc.StatusCode.UNIMPLEMENTED, error
    error = raw_call(target, "/a2a.v1.A2AService/SendMessage", b"", metadata())
    assert error and error.code() == grpc.StatusCode.UNIMPLEMENTED, error


@pytest.mark.parametrize("upstream", ["jsonrpc", "grpc"])
def test_an_unreachable_agent_is_unavailable(agent, upstream):
    target = grpc_target(tether(upstream))
    agent.kill()
    try:
        _, error = stub_call(target, "SendMessage", send_request(), metadata())
        assert error and error.code() == grpc.StatusCode.UNAVAILABLE, error
        events, error = stream_call(target, "SendStreamingMessage", send_request(), metadata())
        assert events == [] and error and error.code() == grpc.StatusCode.UNAVAILABLE, (events, error)
    finally:
        agent.start()


@pytest.mark.parametrize("upstream", ["jsonrpc", "grpc"])
def test_a_stream_cut_by_the_agent_ends_with_a_status(agent, upstream):
    target = grpc_target(tether(upstream))

    def kill_after_two_chunks(events):
        if sum(e.HasField("artifact_update") for e in events) == 2:
            agent.kill()

    request = SendMessageRequest(message=new_message("slow:40:100", None))
    try:
        events, error = stream_call(target, "SendStreamingMessage", request, metadata(), on_event=kill_after_two_chunks)
    finally:
        agent.start()
    assert error and error.code() == grpc.StatusCode.UNAVAILABLE, (error, events[-2:])
    assert state_of(events[-1]) == TaskState.TASK_STATE_FAILED, events[-2:]
    _, context = task_of(events[0])
    log = wait_terminal(context, None, key(), base=tether(upstream))
    assert terminal_statuses(log) == ["failed"], describe(log)


def test_a_client_that_leaves_does_not_stop_the_run(agent):
    target = grpc_target(tether("grpc"))
    request = SendMessageRequest(message=new_message("slow:10:50", None))
    events, _ = stream_call(target, "SendStreamingMessage", request, metadata(),
                            stop_after=lambda evs: any(e.HasField("artifact_update") for e in evs))
    task_id, context = task_of(events[0])
    log = wait_terminal(context, None, key(), base=tether("grpc"))
    assert terminal_statuses(log) == ["completed"], describe(log)
    replay, error = stream_call(target, "SubscribeToTask", SubscribeToTaskRequest(id=task_id),
                                metadata(**{"last-event-id": "-1"}))
    assert error is None and words(replay) == "".join(f"w{k} " for k in range(1, 11)), words(replay)


# ---- conformance: what the A2A TCK checks, in every binding (issue 39) ------------------------


def rpc(base: str, method: str, params: dict, headers: dict | None = None) -> dict:
    """A v1.0 JSON-RPC call to `base` as account a; its response object."""
    body = {"jsonrpc": "2.0", "id": "c1", "method": method, "params": params}
    h = {"A2A-Version": "1.0", **auth_headers(key()), **(headers or {})}
    r = httpx.post(base + "/", json=body, headers=h, timeout=CALL_TIMEOUT)
    assert r.status_code == 200, (r.status_code, r.text)
    return r.json()


def rest(base: str, method: str, path: str, body: dict | None = None, headers: dict | None = None) -> httpx.Response:
    """A v1.0 HTTP+JSON call under the agent's `/rest` prefix, as account a."""
    h = {"A2A-Version": "1.0", **auth_headers(key()), **(headers or {})}
    return httpx.request(method, base + "/rest" + path, json=body, headers=h, timeout=CALL_TIMEOUT)


def json_message(text: str, **ids) -> dict:
    return {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}], **ids}


def waiting_task(base: str) -> tuple[str, str]:
    """(taskId, contextId) of a task the agent left INPUT_REQUIRED."""
    answer = rpc(base, "SendMessage", {"message": json_message("need-input")})
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", answer
    return task["id"], task["contextId"]


def completed_task(base: str) -> tuple[str, str]:
    answer = rpc(base, "SendMessage", {"message": json_message("Reply with OK.")})
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer
    return task["id"], task["contextId"]


def reason_of(error) -> list[str]:
    return [d.reason for d in details_of(error) if isinstance(d, error_details_pb2.ErrorInfo)]


@pytest.mark.parametrize("upstream", ["jsonrpc", "grpc"])
def test_a_message_naming_only_its_task_continues_it_in_every_binding(agent, upstream):
    base = tether(upstream)
    # JSON-RPC; HTTP+JSON in ProtoJSON's snake_case field names; gRPC.
    def json_rpc(task):
        return rpc(base, "SendMessage", {"message": json_message(FIRST, taskId=task)})["result"]["task"]

    def http_json(task):
        message = {"role": "ROLE_USER", "message_id": str(uuid.uuid4()), "task_id": task, "parts": [{"text": FIRST}]}
        r = rest(base, "POST", "/message:send", {"message": message})
        assert r.status_code == 200, r.text
        return r.json()["task"]

    def over_grpc(task):
        message = new_message(FIRST, None)
        message.task_id = task
        response, error = stub_call(grpc_target(base), "SendMessage", SendMessageRequest(message=message), metadata())
        assert error is None, error
        return MessageToDict(response.task)

    for send in (json_rpc, http_json, over_grpc):
        task, context = waiting_task(base)
        continued = send(task)
        assert (continued["id"], continued["contextId"]) == (task, context), (send.__name__, continued)
        assert continued["status"]["state"] == "TASK_STATE_COMPLETED", (send.__name__, continued)
        received = [r for r in agent.received() if r["contextId"] == context]
        assert [r["text"] for r in received] == ["need-input", FIRST], (send.__name__, received)

    # Across a kill -9: the agent forgot the task and the conversation; the taskId alone
    # still finds the session in Tether's log, which is restored into the agent first.
    task, context = waiting_task(base)
    json_rpc(task)
    agent.restart()
    answer = rpc(base, "SendMessage", {"message": json_message(SECOND, taskId=task)})
    result = answer["result"]["task"]
    assert result["contextId"] == context, answer
    assert result["status"]["message"]["parts"][0]["text"] == "zebra42", answer
    events = session_events(context, base=base)
    assert [e["EventType"] for e in events].count("session_restore") == 1, describe(events)


@pytest.mark.parametrize("upstream", ["jsonrpc", "grpc"])
def test_an_unknown_task_is_not_found_in_every_binding(agent, upstream):
    base = tether(upstream)
    before = len(agent.received())
    # Another account's task is as unknown as one that never was.
    theirs = rpc(base, "SendMessage", {"message": json_message("need-input")},
                 headers=auth_headers(key("b")))["result"]["task"]["id"]
    before = len(agent.received())
    for task in ("no-such-task", theirs):
        answer = rpc(base, "SendMessage", {"message": json_message(FIRST, taskId=task)})
        assert answer["error"]["code"] == -32001, answer
        r = rest(base, "POST", "/message:send", {"message": json_message(FIRST, taskId=task)})
        assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND", r.text
        message = new_message(FIRST, None)
        message.task_id = task
        _, error = stub_call(grpc_target(base), "SendMessage", SendMessageRequest(message=message), metadata())
        assert error and error.code() == grpc.StatusCode.NOT_FOUND, error
        assert reason_of(error) == ["TASK_NOT_FOUND"], error
    assert len(agent.received()) == before, "a refused message reached the agent"


def test_subscribing_to_a_finished_task_is_unsupported_unless_the_client_resumes(agent):
    base = tether("jsonrpc")
    task, _ = completed_task(base)
    answer = rpc(base, "SubscribeToTask", {"id": task})
    assert answer["error"]["code"] == -32004, answer
    r = rest(base, "POST", f"/tasks/{task}:subscribe")
    assert r.status_code == 400 and r.json()["error"]["status"] == "FAILED_PRECONDITION", r.text
    events, error = stream_call(grpc_target(base), "SubscribeToTask", SubscribeToTaskRequest(id=task), metadata())
    assert events == [] and error and error.code() == grpc.StatusCode.FAILED_PRECONDITION, error
    assert reason_of(error) == ["UNSUPPORTED_OPERATION"], error
    # Asked for with a cursor, Tether's replay of the finished task, in each binding.
    with httpx.stream("POST", base + "/rest/tasks/" + task + ":subscribe", timeout=CALL_TIMEOUT,
                      headers={"A2A-Version": "1.0", **auth_headers(key()), "Last-Event-ID": "-1"}) as r:
        assert r.status_code == 200, r.read()
        frames = [line for line in r.iter_lines() if line.startswith("data:")]
    assert frames and "TASK_STATE_COMPLETED" in frames[-1], frames
    events, error = stream_call(grpc_target(base), "SubscribeToTask", SubscribeToTaskRequest(id=task),
                                metadata(**{"last-event-id": "-1"}))
    # (A non-streaming send is recorded as its one answer: the whole task.)
    last = events[-1].task if events and events[-1].HasField("task") else events[-1].status_update
    assert error is None and last.status.state == TaskState.TASK_STATE_COMPLETED, events


def test_a_cancel_error_is_an_error_in_every_binding(agent):
    base = tether("jsonrpc")
    task, _ = completed_task(base)
    answer = rpc(base, "CancelTask", {"id": task})
    assert answer["error"]["code"] == -32002, answer
    r = rest(base, "POST", f"/tasks/{task}:cancel", {})
    assert r.status_code == 400 and r.json()["error"]["status"] == "FAILED_PRECONDITION", r.text
    _, error = stub_call(grpc_target(base), "CancelTask", CancelTaskRequest(id=task), metadata())
    assert error and error.code() == grpc.StatusCode.FAILED_PRECONDITION, error


def test_an_attachment_type_tether_does_not_take_is_content_type_not_supported(agent):
    base = tether("jsonrpc")
    part = {"raw": "dGNr", "mediaType": "application/x-unsupported-tck-type"}
    message = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [part]}
    before = len(agent.received())
    answer = rpc(base, "SendMessage", {"message": message})
    assert answer["error"]["code"] == -32005, answer
    r = rest(base, "POST", "/message:send", {"message": message})
    assert r.status_code == 400 and r.json()["error"]["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED", r.text
    grpc_message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()),
                           parts=[Part(raw=b"tck", media_type="application/x-unsupported-tck-type")])
    _, error = stub_call(grpc_target(base), "SendMessage", SendMessageRequest(message=grpc_message), metadata())
    assert error and error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert reason_of(error) == ["CONTENT_TYPE_NOT_SUPPORTED"], error
    assert len(agent.received()) == before, "a refused message reached the agent"


def test_the_card_keeps_the_agents_caching_and_protojson_names_are_accepted(agent):
    base = tether("jsonrpc")
    direct = httpx.get(agent.url + "/.well-known/agent-card.json", timeout=10)
    through = httpx.get(base + "/.well-known/agent-card.json", headers=auth_headers(key()), timeout=10)
    assert direct.headers.get("etag"), direct.headers
    etag = through.headers.get("etag")
    # Tether's own ETag: the card it serves names Tether, not the agent.
    assert etag and etag != direct.headers["etag"], through.headers
    again = httpx.get(base + "/.well-known/agent-card.json", headers=auth_headers(key()), timeout=10)
    assert again.headers.get("etag") == etag, "the same card, a different ETag"
    # ProtoJSON's snake_case request field (`task_id`) names the task, as `taskId` does.
    task, _ = completed_task(base)
    listed = rpc(base, "ListTaskPushNotificationConfigs", {"task_id": task})
    assert "result" in listed, listed
    foreign = rpc(base, "ListTaskPushNotificationConfigs", {"task_id": "no-such-task"})
    assert foreign["error"]["code"] == -32001, foreign


@pytest.mark.parametrize("upstream", ["jsonrpc", "grpc"])
def test_a_task_waiting_for_input_is_canceled_by_the_agent_in_every_binding(agent, upstream):
    base = tether(upstream)
    task, _ = waiting_task(base)
    answer = rpc(base, "CancelTask", {"id": task})
    assert answer["result"]["status"]["state"] == "TASK_STATE_CANCELED", answer
    task, _ = waiting_task(base)
    r = rest(base, "POST", f"/tasks/{task}:cancel", {})
    assert r.status_code == 200 and r.json()["status"]["state"] == "TASK_STATE_CANCELED", r.text
    task, _ = waiting_task(base)
    response, error = stub_call(grpc_target(base), "CancelTask", CancelTaskRequest(id=task), metadata())
    assert error is None and response.status.state == TaskState.TASK_STATE_CANCELED, error


def test_push_configuration_of_an_unknown_task_is_the_agents_answer(agent):
    base = tether("jsonrpc")
    before = len(agent.received())
    # The agent keeps push configs: an unknown task is not found, by the agent's own answer.
    answer = rpc(base, "CreateTaskPushNotificationConfig", {"taskId": "no-such-task", "url": "https://example.com"})
    assert answer["error"]["code"] == -32001, answer
    r = rest(base, "GET", "/tasks/no-such-task/pushNotificationConfigs")
    assert r.status_code == 404, r.text
    assert len(agent.received()) == before


@pytest.mark.parametrize("binding", ["jsonrpc", "http_json", "grpc"])
def test_a_subscription_to_a_task_waiting_for_input_follows_its_next_turn(agent, binding):
    base = tether("jsonrpc")
    task, _ = waiting_task(base)

    def go_on():
        time.sleep(0.5)
        rpc(base, "SendMessage", {"message": json_message(FIRST, taskId=task)})

    thread = threading.Thread(target=go_on)
    thread.start()
    if binding == "grpc":
        events, error = stream_call(grpc_target(base), "SubscribeToTask", SubscribeToTaskRequest(id=task), metadata())
        assert error is None and events, (events, error)
        last = events[-1].task if events[-1].HasField("task") else events[-1].status_update
        state = TaskState.Name(last.status.state)
    else:
        url, body = base + "/rest/tasks/" + task + ":subscribe", None
        if binding == "jsonrpc":
            url, body = base + "/", {"jsonrpc": "2.0", "id": "s", "method": "SubscribeToTask", "params": {"id": task}}
        headers = {"A2A-Version": "1.0", **auth_headers(key())}
        with httpx.stream("POST", url, json=body, headers=headers, timeout=CALL_TIMEOUT) as r:
            assert r.status_code == 200, r.read()
            frames = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]
        last = frames[-1].get("result", frames[-1])
        state = (last.get("task") or last.get("statusUpdate"))["status"]["state"]
    thread.join()
    assert state == "TASK_STATE_COMPLETED", (binding, state)


# ---- the unmodified @a2a-js/sdk client (tests/a2a-js, Node 20) -------------------------------

def a2a_js_turn(base: str, transport: str, text: str, context: str | None) -> dict:
    """One turn with @a2a-js/sdk over `transport`, chosen from Tether's card."""
    import subprocess
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "a2a-js"
    assert (folder / "node_modules" / "@a2a-js" / "sdk").is_dir(), "run `npm ci` in tests/a2a-js (tests/run does)"
    args = ["node", str(folder / "turn.mjs"), base, transport, key(), text, *([context] if context else [])]
    done = subprocess.run(args, capture_output=True, text=True, timeout=CALL_TIMEOUT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("transport", ["JSONRPC", "HTTP+JSON", "GRPC"])
def test_a2a_js_client_through_tether_across_an_agent_kill(agent, transport):
    base = tether("jsonrpc")
    first = a2a_js_turn(base, transport, FIRST, None)
    assert first["transport"] == transport, first
    agent.restart()  # SIGKILL between the turns
    second = a2a_js_turn(base, transport, SECOND, first["contextId"])
    assert second["contextId"] == first["contextId"], (first, second)
    assert second["answer"] == "zebra42", f"the conversation was lost across the agent restart: {second}"
    events = session_events(first["contextId"], base=base)
    assert [e["EventType"] for e in events].count("session_restore") == 1, describe(events)
