#!/usr/bin/env python3
"""A real A2A agent (official a2a-sdk 1.3) that forgets everything when it restarts.

Test fixture for Tether's A2A support. Built only from the SDK's own pieces:
DefaultRequestHandler + InMemoryTaskStore + an AgentExecutor, served by uvicorn with the
SDK's Starlette routes. The executor keeps each contextId's conversation in a
process-global dict (memory only: a restart forgets it, which is the point) and, for
every message, sends that whole history plus the new user text to an OpenAI-compatible
LLM (tests/fake_agent.py) with `stream: true`, forwarding each delta as it arrives.

    python tests/agents/a2a_agent.py --port N --llm http://127.0.0.1:P [--public-url URL]
                                     [--grpc-port G] [--mount /PREFIX] [--v03-only]

`--port 0` picks a free port; `READY <port>` is printed on stdout once listening (and,
with `--grpc-port`, the gRPC server too).

Served (one process, one port):
  GET  /.well-known/agent-card.json  card; its URLs start with --public-url
                                     (default http://127.0.0.1:PORT)
  POST /                             JSON-RPC: v1.0 methods (SendMessage, ... with header
                                     `A2A-Version: 1.0`) and v0.3 methods (message/send ...)
  /rest/...                          HTTP+JSON: v1.0 (/rest/message:send, /rest/tasks/{id},
                                     ...) and v0.3 (/rest/v1/message:send, ...)
  GET  /_received                    what the executor was given, in order (tests read the
                                     agent's view): [{contextId, transport, account, text, version}]
With --mount /PREFIX, JSON-RPC is at /PREFIX/jsonrpc and HTTP+JSON below /PREFIX/api instead
(the card says so; nothing is served at / but the card), as agents mounted in a larger app
are. With --v03-only, the card lists only v0.3 interfaces and v1.0 requests are refused as
a v0.3-only agent refuses them (JSON-RPC -32601 Method not found; HTTP+JSON 404), like
kagent's runtimes or ADK's `to_a2a()`.
With --grpc-port G, also (second port, HTTP/2 without TLS, grpcio):
  lf.a2a.v1.A2AService               gRPC, the same handler and task store; the card lists
                                     it as a v1.0 GRPC interface at 127.0.0.1:G

A task: status WORKING, then the answer as artifact-update chunks (artifact "answer", one
per LLM delta, append=true after the first; each is sent when the next delta arrives, so
the last can say lastChunk=true), then COMPLETED with the whole answer as the status
message. A user text that is exactly `need-input` leaves the task INPUT_REQUIRED instead
(the next message with its taskId continues it). A user text containing `slow:N:MS` is passed on as is, so fake_agent answers
slowly and the task can be canceled mid-way; cancel emits CANCELED. An LLM failure
(fake_agent's "error" trigger) ends the task FAILED with the error as the status message.
Push-notification configs are kept (in memory) and served, but no notification is sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import sys

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a.helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import InMemoryPushNotificationConfigStore, InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
)

ARTIFACT_ID = "answer"
# A message of exactly this text leaves its task INPUT_REQUIRED (no LLM call).
NEED_INPUT = "need-input"
REST_PREFIX = "/rest"

# contextId -> [{"role": "user"|"assistant", "content": str}, ...]  (memory only)
HISTORY: dict[str, list[dict]] = {}
# Every message the executor was given: the transport it came over ("grpc" or "http"), the
# x-account-id and A2A-Version it carried (memory only, like everything else here).
RECEIVED: list[dict] = []


def arrival(context: RequestContext) -> tuple[str, str | None, str | None]:
    """(transport, x-account-id, A2A-Version) of the call that brought this message."""
    state = context.call_context.state if context.call_context else {}
    if "grpc_context" in state:
        metadata = dict(state["grpc_context"].invocation_metadata() or ())
        return "grpc", metadata.get("x-account-id"), metadata.get("a2a-version")
    headers = state.get("headers") or {}
    return "http", headers.get("x-account-id"), headers.get("a2a-version")


class LlmAgentExecutor(AgentExecutor):
    """Answers each message by asking the LLM with the context's whole history."""

    def __init__(self, llm_url: str):
        self.llm_url = llm_url.rstrip("/") + "/v1/chat/completions"

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        user_text = context.get_user_input()
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        transport, account, version = arrival(context)
        RECEIVED.append(
            {"contextId": task.context_id, "transport": transport, "account": account, "text": user_text,
             "version": version}
        )
        if user_text.strip() == NEED_INPUT:
            # The task waits for the user (INPUT_REQUIRED); their next message continues it.
            await updater.requires_input(updater.new_agent_message([new_text_part("Go on.")]))
            return
        await updater.start_work()

        history = HISTORY.setdefault(task.context_id, [])
        messages = history + [{"role": "user", "content": user_text}]
        # Each delta is sent when the next one arrives, so the last can carry lastChunk.
        answer, pending = "", None
        try:
            async for delta in self.llm_deltas(messages):
                if pending is not None:
                    await self.send_chunk(updater, pending, first=not answer, last=False)
                    answer += pending
                pending = delta
        except httpx.HTTPError as error:  # the LLM failed or is unreachable: task FAILED
            await updater.failed(updater.new_agent_message([new_text_part(f"LLM error: {error}")]))
            return
        await self.send_chunk(updater, pending or "", first=not answer, last=True)
        answer += pending or ""
        # Remembered only once the turn completed (a canceled turn is forgotten).
        history += [
            {"role": "user", "content": user_text},
            {"role": "assistant", "content": answer},
        ]
        await updater.complete(updater.new_agent_message([new_text_part(answer)]))

    @staticmethod
    async def send_chunk(updater: TaskUpdater, text: str, first: bool, last: bool) -> None:
        await updater.add_artifact(
            [new_text_part(text)],
            artifact_id=ARTIFACT_ID,
            name=ARTIFACT_ID if first else None,
            append=not first,
            last_chunk=last,
        )

    async def llm_deltas(self, messages: list[dict]):
        """Text deltas of a streamed Chat Completion, yielded as they arrive."""
        body = {"model": "fake-model", "messages": messages, "stream": True}
        async with httpx.AsyncClient(timeout=None) as client:
            async with client.stream("POST", self.llm_url, json=body) as response:
                response.raise_for_status()
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    for choice in json.loads(data).get("choices") or []:
                        text = (choice.get("delta") or {}).get("content")
                        if text:
                            yield text

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        # The SDK cancels the running execute() right after this returns.
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def agent_card(
    public_url: str, grpc_address: str | None = None, mount: str = "", v03_only: bool = False
) -> AgentCard:
    base = public_url.rstrip("/")
    rpc_url, rest_url = paths(mount)
    # v1.0 first (what v1.0 clients pick); the 0.3 ones become the card's v0.3 `url` fields.
    interfaces = [
        AgentInterface(url=url, protocol_binding=binding, protocol_version=version)
        for version in (("0.3",) if v03_only else ("1.0", "0.3"))
        for binding, url in (("JSONRPC", base + rpc_url), ("HTTP+JSON", base + rest_url))
    ]
    if grpc_address:
        interfaces.append(AgentInterface(url=grpc_address, protocol_binding="GRPC", protocol_version="1.0"))
    return AgentCard(
        name="Tether test A2A agent",
        description="Answers from the conversation of its contextId, kept in memory only.",
        version="1.0.0",
        supported_interfaces=interfaces,
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="chat",
                name="Chat",
                description="Remembers 'My project is named X'; answers 'What is my project named?'",
                tags=["test"],
                examples=["My project is named zebra42.", "What is my project named?"],
            )
        ],
    )


def paths(mount: str) -> tuple[str, str]:
    """(JSON-RPC path, HTTP+JSON prefix) of an agent mounted at `mount` ("" for none)."""
    return (mount + "/jsonrpc", mount + "/api") if mount else ("/", REST_PREFIX)


class RefuseV10:
    """ASGI middleware: v1.0 requests refused as an agent that speaks only v0.3 does."""

    def __init__(self, app, rpc_url: str, rest_url: str):
        self.app, self.rpc_url, self.rest_url = app, rpc_url, rest_url

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] != "http" or path == "/_received" or "/.well-known/" in path:
            return await self.app(scope, receive, send)
        if path.startswith(self.rest_url + "/") and not path.startswith(self.rest_url + "/v1/"):
            return await JSONResponse({"detail": "Not Found"}, status_code=404)(scope, receive, send)
        if path != self.rpc_url:
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            request = json.loads(body)
        except ValueError:
            request = {}
        if isinstance(request, dict) and "/" not in str(request.get("method", "/")):
            error = {"code": -32601, "message": "Method not found"}
            answer = JSONResponse({"jsonrpc": "2.0", "id": request.get("id"), "error": error})
            return await answer(scope, receive, send)
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)


def build_app(card: AgentCard, handler: DefaultRequestHandler, mount: str = "", v03_only: bool = False):
    rpc_url, rest_url = paths(mount)
    routes = [Route("/_received", lambda _request: JSONResponse(RECEIVED))]
    routes += create_agent_card_routes(card)  # first: the REST tenant mount is a catch-all
    routes += create_jsonrpc_routes(handler, rpc_url=rpc_url, enable_v0_3_compat=True)
    routes += create_rest_routes(handler, enable_v0_3_compat=True, path_prefix=rest_url)
    app = Starlette(routes=routes)
    return RefuseV10(app, rpc_url, rest_url) if v03_only else app


async def start_grpc(handler: DefaultRequestHandler, host: str, port: int):
    """The SDK's gRPC servicer on grpcio's asyncio server (imported only when asked for)."""
    import grpc
    from a2a.server.request_handlers import GrpcHandler
    from a2a.types import a2a_pb2_grpc

    server = grpc.aio.server()
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
    if server.add_insecure_port(f"{host}:{port}") == 0:
        raise SystemExit(f"cannot listen for gRPC on {host}:{port}")
    await server.start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--llm", required=True, help="fake LLM base URL, e.g. http://127.0.0.1:P")
    parser.add_argument("--public-url", help="base URL named in the agent card")
    parser.add_argument("--grpc-port", type=int, help="also serve gRPC on this port")
    parser.add_argument("--mount", default="", help="serve JSON-RPC and HTTP+JSON below this path")
    parser.add_argument("--v03-only", action="store_true", help="offer and accept only A2A v0.3")
    args = parser.parse_args()

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    port = sock.getsockname()[1]
    public_url = args.public_url or f"http://127.0.0.1:{port}"
    grpc_address = f"{args.host}:{args.grpc_port}" if args.grpc_port else None

    card = agent_card(public_url, grpc_address, args.mount.rstrip("/"), args.v03_only)
    handler = DefaultRequestHandler(
        agent_executor=LlmAgentExecutor(args.llm),
        task_store=InMemoryTaskStore(),
        agent_card=card,
        # Push configs are stored (and listed, read, deleted), never sent: no push_sender.
        push_config_store=InMemoryPushNotificationConfigStore(),
    )
    app = build_app(card, handler, args.mount.rstrip("/"), args.v03_only)
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)

    async def serve() -> None:
        grpc_server = await start_grpc(handler, args.host, args.grpc_port) if args.grpc_port else None
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            print(f"READY {port}", flush=True)
        await task
        if grpc_server is not None:
            await grpc_server.stop(None)

    asyncio.run(serve())


if __name__ == "__main__":
    main()
