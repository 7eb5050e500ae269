"""Interop with an A2A agent mounted under a prefix: Tether calls each binding and version
at the URL the agent's card lists for it, and calls an agent whose card offers only v0.3
in v0.3, with no `a2a_upstream_transport` set.

The agents (tests/agents/a2a_agent.py, a2a-sdk 1.3) serve JSON-RPC at /agent/jsonrpc and
HTTP+JSON below /agent/api, nothing at / but the card: MOUNTED_AGENT_PORT (also gRPC at
MOUNTED_AGENT_GRPC_PORT) speaks v1.0 and v0.3; V03_AGENT_PORT offers only v0.3 in its card
and refuses v1.0 (-32601, 404) as kagent's runtimes and ADK's `to_a2a()` do. Gateways:
TETHER_URL in front of the mounted agent as configured by default, TETHER_GRPC_URL in
front of it over gRPC (`--a2a-upstream-transport grpc`, its address from the card),
TETHER_V03_URL in front of the v0.3-only agent by default, TETHER_PINNED_URL in front of the
mounted agent with `--a2a-upstream-transport jsonrpc-0.3` (configuration wins over the card). Clients, the official a2a-sdk
1.3 client over each binding in v1.0, reach Tether at its root (`/`, `/rest`, gRPC on its
port): paths the agents do not serve, so a call sent to the client's path would fail.
Each case kills the agent (SIGKILL) between two turns, so the probe and the restore go to
the card's URLs too; one restarts it under another mount, found by its new card.

Environment (gateway/tests/e2e/agents.rs sets it): TETHER_URL, TETHER_GRPC_URL,
TETHER_V03_URL, TETHER_PINNED_URL, MOUNTED_AGENT_PORT, MOUNTED_AGENT_GRPC_PORT, V03_AGENT_PORT, FAKE_LLM_URL,
TETHER_API_KEY. Unset: every test here is skipped (and the Rust wrapper fails on a skip).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest

import agents
from agents import A2aAgent, auth_headers, describe, session_events, terminal_statuses

_missing = agents.missing_env(
    "TETHER_URL", "TETHER_GRPC_URL", "TETHER_V03_URL", "TETHER_PINNED_URL", "MOUNTED_AGENT_PORT", "MOUNTED_AGENT_GRPC_PORT",
    "V03_AGENT_PORT", "FAKE_LLM_URL", "TETHER_API_KEY",
)
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"not set: {', '.join(_missing)}")

if not _missing:
    import grpc
    from a2a.client import ClientConfig, ClientFactory
    from a2a.client.client import ClientCallContext
    from a2a.types.a2a_pb2 import (
        AgentCapabilities, AgentCard, AgentInterface, Message, Part, Role, SendMessageRequest,
    )
    from google.protobuf.json_format import MessageToDict

FIRST = "My project is named zebra42."
SECOND = "What is my project named?"
MOUNT = ("--mount", "/agent")
CALL_TIMEOUT = 30
CARD_TTL = 5  # s Tether keeps the agent's card before reading it again

TETHERS = {
    "jsonrpc": "TETHER_URL", "grpc": "TETHER_GRPC_URL", "v03": "TETHER_V03_URL", "pinned": "TETHER_PINNED_URL",
}


@pytest.fixture(scope="module")
def mounted_process():
    a = A2aAgent(int(agents.env("MOUNTED_AGENT_PORT")), int(agents.env("MOUNTED_AGENT_GRPC_PORT")), MOUNT)
    yield a
    a.kill()
    a.log_path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def v03_process():
    a = A2aAgent(int(agents.env("V03_AGENT_PORT")), None, (*MOUNT, "--v03-only"))
    a.name = "a2a-agent-v03"
    yield a
    a.kill()
    a.log_path.unlink(missing_ok=True)


def tethers_card(base: str) -> "AgentCard":
    """Tether's own v1.0 interfaces at its root: where the clients here call it."""
    interfaces = [
        AgentInterface(url=base + "/", protocol_binding="JSONRPC", protocol_version="1.0"),
        AgentInterface(url=base + "/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"),
        AgentInterface(url=base.split("://", 1)[-1], protocol_binding="GRPC", protocol_version="1.0"),
    ]
    return AgentCard(
        name="Tether", description="", version="1", supported_interfaces=interfaces,
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
    )


def turn(base: str, binding: str, streaming: bool, text: str, context_id: str | None):
    """(answer, contextId, the events as dicts) of one turn with the official client."""

    async def go():
        async with httpx.AsyncClient(headers=auth_headers(), timeout=CALL_TIMEOUT) as http:
            config = ClientConfig(
                streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding],
                grpc_channel_factory=grpc.aio.insecure_channel,
            )
            client = ClientFactory(config).create(tethers_card(base))
            context = ClientCallContext(
                service_parameters={"authorization": f"Bearer {agents.env('TETHER_API_KEY')}"},
                timeout=CALL_TIMEOUT,
            )
            message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)])
            if context_id:
                message.context_id = context_id
            try:
                request = SendMessageRequest(message=message)
                return [e async for e in client.send_message(request, context=context)]
            finally:
                await client.close()

    events = asyncio.run(go())
    shown = [MessageToDict(e) for e in events]
    answer, context = agents.completed_answer(events)
    assert answer is not None, f"no completed status in the answer to {text!r}: {shown}"
    return answer, context, shown


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("client", ["JSONRPC", "HTTP+JSON", "GRPC"])
@pytest.mark.parametrize("upstream", ["jsonrpc", "grpc", "v03", "pinned"])
def test_a_mounted_agent_is_called_where_its_card_says(mounted_process, v03_process, upstream, client, streaming):
    agent = v03_process if upstream == "v03" else mounted_process
    agent.ensure_running()
    base = agents.env(TETHERS[upstream]).rstrip("/")
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
    # transport and in the version Tether calls it with: v0.3 (no A2A-Version) where the
    # card offers only that or configuration says so, v1.0 where the client speaks it.
    received = [r for r in agent.received() if r["contextId"] == context]
    transport = "grpc" if upstream == "grpc" else "http"
    assert [r["transport"] for r in received] == [transport, transport], received
    assert FIRST in received[0]["text"] and received[1]["text"] == SECOND, received
    if upstream in ("v03", "pinned"):
        assert [r["version"] for r in received] == [None, None], received
    elif client != "HTTP+JSON":
        assert [r["version"] for r in received] == ["1.0", "1.0"], received


def test_an_agent_restarted_under_another_mount_is_found_by_its_new_card(mounted_process):
    """The card is read again (after 5 s): an agent that comes back mounted elsewhere is
    called there, its conversation restored from the log."""
    base = agents.env("TETHER_URL").rstrip("/")
    mounted_process.ensure_running()
    _, context, _ = turn(base, "JSONRPC", True, FIRST, None)
    mounted_process.kill()
    mounted_process.extra = ("--mount", "/moved")
    try:
        mounted_process.start()
        time.sleep(CARD_TTL + 0.5)
        answer, context2, shown = turn(base, "JSONRPC", True, SECOND, context)
        assert (context2, "zebra42" in answer) == (context, True), shown
        received = [r for r in mounted_process.received() if r["contextId"] == context]
        assert FIRST in received[0]["text"] and received[1]["text"] == SECOND, received
    finally:
        mounted_process.kill()
        mounted_process.extra = MOUNT
