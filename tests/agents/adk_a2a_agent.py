#!/usr/bin/env python3
"""A Google ADK agent served over A2A by ADK's own `to_a2a()`, its model Tether's fake LLM.

Test fixture for `--protocol a2a`. `to_a2a(agent)` builds a Starlette app with a2a-sdk's
request handler, an in-memory task store and ADK's `InMemorySessionService` (contextId =
ADK session id): a restart forgets every conversation, the seed's failure. Its card is
given as a file (A2A v0.3 JSON, which both ADK versions read) only to say that it streams:
the card `to_a2a` builds by default declares no capabilities, and a2a-sdk then refuses
`message/stream`. The model is an
OpenAI-compatible class pointed at $FAKE_LLM_URL (e.g. http://127.0.0.1:P/v1): ADK 2.x's
own `OpenAILlm`; under ADK 1.x, which has none, kagent's `OpenAI` model class (the venv
that pins google-adk<2 is kagent's).

    FAKE_LLM_URL=http://127.0.0.1:P/v1 python tests/agents/adk_a2a_agent.py --port N
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import uvicorn
from google.adk.a2a.utils.agent_to_a2a import to_a2a
from google.adk.agents import LlmAgent

BASE_URL = os.environ.get("FAKE_LLM_URL", "http://127.0.0.1:8000/v1")

try:
    from google.adk.integrations.openai import OpenAILlm

    model = OpenAILlm(model="fake-model", base_url=BASE_URL, api_key="unused")
except ImportError:  # google-adk 1.x
    from kagent.adk.models import OpenAI

    model = OpenAI(type="openai", model="fake-model", base_url=BASE_URL, api_key="unused")

root_agent = LlmAgent(name="adk_a2a_agent", model=model, instruction="You are a concise assistant.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    card = {
        "name": root_agent.name,
        "description": "An ADK agent served by to_a2a(), its model the fake LLM",
        "url": f"http://{args.host}:{args.port}/",
        "version": "0.1.0",
        "protocolVersion": "0.3.0",
        "preferredTransport": "JSONRPC",
        "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "chat", "name": "Chat", "description": "Answers from the conversation", "tags": ["test"]}],
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(card, f)
    app = to_a2a(root_agent, host=args.host, port=args.port, agent_card=f.name)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
