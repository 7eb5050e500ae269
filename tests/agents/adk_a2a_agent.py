#!/usr/bin/env python3
"""A Google ADK agent served over A2A by ADK's own `to_a2a()`, its model Tether's fake LLM.

Test fixture for `--protocol a2a`. `to_a2a(agent)` builds a Starlette app with a2a-sdk's
request handler, an in-memory task store and ADK's `InMemorySessionService` (contextId =
ADK session id): a restart forgets every conversation, the seed's failure. The model is an
OpenAI-compatible class pointed at $FAKE_LLM_URL (e.g. http://127.0.0.1:P/v1): ADK 2.x's
own `OpenAILlm`; under ADK 1.x, which has none, kagent's `OpenAI` model class (the venv
that pins google-adk<2 is kagent's).

    FAKE_LLM_URL=http://127.0.0.1:P/v1 python tests/agents/adk_a2a_agent.py --port N
"""

from __future__ import annotations

import argparse
import os

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
    app = to_a2a(root_agent, host=args.host, port=args.port)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
