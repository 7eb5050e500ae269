#!/usr/bin/env python3
"""A kagent-langgraph agent whose model is Tether's fake LLM (tests/fake_agent.py).

Test fixture, the kind of agent kagent runs for LangGraph graphs: the graph of
tests/agents/langgraph_agent/graph.py (its node sends the thread's messages to the fake LLM
through langchain-openai's `ChatOpenAI`, $FAKE_LLM_URL), checkpointed in memory
(`InMemorySaver`), served by kagent-langgraph's own `KAgentApp` (A2A v0.3 JSON-RPC at `/`,
the graph run by its `LangGraphAgentExecutor`, thread id = contextId).

kagent-langgraph has no local mode: `KAgentApp.build()` keeps tasks in the kagent
controller's API (`KAgentTaskStore`, at $KAGENT_URL), which is not on this machine. This
fixture swaps in a2a-sdk's `InMemoryTaskStore` there, as kagent-adk's own `--local` mode
does; everything else is kagent's code, unmodified. A restart forgets every task and
thread: the seed's failure.

    KAGENT_URL=http://127.0.0.1:1 KAGENT_NAME=kagent-langgraph-agent KAGENT_NAMESPACE=kagent \\
    FAKE_LLM_URL=http://127.0.0.1:P/v1 python tests/agents/kagent/kagent_langgraph_agent.py --port N
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvicorn
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import AgentCapabilities, AgentCard, AgentSkill
from langgraph.checkpoint.memory import InMemorySaver

import kagent.langgraph._a2a as kagent_a2a
from kagent.core import KAgentConfig
from kagent.langgraph import KAgentApp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "langgraph_agent"))
from graph import builder  # noqa: E402  (the LangGraph fixture's graph)


def card(port: int) -> AgentCard:
    return AgentCard(
        name="kagent_langgraph_agent",
        description="A LangGraph graph served by kagent-langgraph, its model the fake LLM",
        url=f"http://127.0.0.1:{port}/",
        version="0.1.0",
        protocol_version="0.3.0",
        preferred_transport="JSONRPC",
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text"],
        default_output_modes=["text"],
        skills=[AgentSkill(id="chat", name="Chat", description="Answers from the thread", tags=["test"])],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    # The one part of kagent's app that needs the controller (see the module's docstring).
    kagent_a2a.KAgentTaskStore = lambda _client: InMemoryTaskStore()
    graph = builder.compile(checkpointer=InMemorySaver())
    app = KAgentApp(graph=graph, agent_card=card(args.port), config=KAgentConfig(), tracing=False)
    uvicorn.run(app.build(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
