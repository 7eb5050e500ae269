"""A kagent-adk agent whose model is Tether's fake LLM (tests/fake_agent.py).

Test fixture, the kind of agent kagent runs in its Python runtime: a Google ADK `LlmAgent`
with kagent's own `OpenAI` model class pointed at an OpenAI-compatible server
($FAKE_LLM_URL, e.g. http://127.0.0.1:P/v1). Served unmodified by kagent's CLI in local
mode, which keeps sessions in ADK's `InMemorySessionService` (the seed's failure: a restart
forgets every conversation):

    KAGENT_URL=http://127.0.0.1:1 KAGENT_NAME=kagent-adk-agent KAGENT_NAMESPACE=kagent \\
    FAKE_LLM_URL=http://127.0.0.1:P/v1 kagent-adk run kagent_adk_agent --local \\
        --working-dir tests/agents/kagent --port N

`agent-card.json` beside this file is the card kagent serves (A2A v0.3, JSON-RPC at `/`);
`config.json` carries the one setting `run` reads from it (`stream`: model deltas as
artifact updates).
"""

import os

from google.adk.agents import LlmAgent
from kagent.adk.models import OpenAI

root_agent = LlmAgent(
    name="kagent_adk_agent",
    model=OpenAI(
        type="openai",
        model="fake-model",
        base_url=os.environ.get("FAKE_LLM_URL", "http://127.0.0.1:8000/v1"),
        api_key="unused",
    ),
    instruction="You are a concise assistant.",
)
