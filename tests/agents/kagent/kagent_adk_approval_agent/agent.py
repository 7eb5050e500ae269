"""A kagent-adk agent whose tool `deploy` needs a person's approval, as kagent builds one.

Test fixture for approvals through Tether. kagent's runtime builds an agent whose tools are
listed under `requireApproval` with its own `make_approval_callback` as the
`before_tool_callback` (it asks with ADK's `tool_context.request_confirmation()`) and
`strip_confirmation_parts_callback` before the model (kagent_adk 0.10.4, `types.py`); this
agent is built the same way, with those two functions, around one local tool. kagent serves
the wait as an A2A task in `input-required` whose status message carries the
`adk_request_confirmation` call, and takes the answer as a message continuing the task with
a data part `{"decision_type": "approve"|"reject"}`.

The model is Tether's fake LLM at $FAKE_LLM_URL (a user message `tool:deploy` makes it call
`deploy` with {"x": 1}); `deploy` appends `{"tool", "arguments"}` to $APPROVAL_TOOL_LOG,
which outlives the process, and returns 42. Served in local mode, which keeps sessions in
ADK's `InMemorySessionService`: a restart forgets the pending confirmation.
"""

import json
import os

from google.adk.agents import LlmAgent
from kagent.adk._approval import make_approval_callback, strip_confirmation_parts_callback
from kagent.adk.models import OpenAI


def deploy(x: int) -> int:
    """Deploys x."""
    with open(os.environ["APPROVAL_TOOL_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": "deploy", "arguments": {"x": x}}) + "\n")
    return 42


root_agent = LlmAgent(
    name="kagent_adk_approval_agent",
    model=OpenAI(
        type="openai",
        model="fake-model",
        base_url=os.environ.get("FAKE_LLM_URL", "http://127.0.0.1:8000/v1"),
        api_key="unused",
    ),
    instruction="You are a concise assistant.",
    tools=[deploy],
    before_tool_callback=make_approval_callback({"deploy"}),
    before_model_callback=[strip_confirmation_parts_callback],
)
