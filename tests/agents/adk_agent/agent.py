"""A Google ADK agent whose model is Tether's fake LLM (tests/fake_agent.py).

Test fixture. ADK's own OpenAI-compatible model class (OpenAILlm) calls the fake LLM's
Chat Completions endpoint at $FAKE_LLM_URL (e.g. http://127.0.0.1:P/v1). ADK sends the
session's whole history on every turn, so the fake LLM "remembers" exactly what the ADK
session holds. Serve it with in-memory sessions, which a restart forgets:

    FAKE_LLM_URL=http://127.0.0.1:P/v1 adk api_server --session_service_uri memory:// \\
        --host 127.0.0.1 --port N tests/agents

App name `adk_agent` (this folder's name); agent name `assistant` (the `author` of the
model's events, which a re-created session's model turns must carry).
"""

import os

from google.adk.agents import LlmAgent
from google.adk.integrations.openai import OpenAILlm

root_agent = LlmAgent(
    name="assistant",
    model=OpenAILlm(
        model="fake-model",
        base_url=os.environ.get("FAKE_LLM_URL", "http://127.0.0.1:8000/v1"),
        api_key="unused",
    ),
    instruction="You are a helpful assistant.",
)
