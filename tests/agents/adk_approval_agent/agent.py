"""A Google ADK agent with a tool that needs confirmation (`require_confirmation=True`):
ADK asks with an `adk_request_confirmation` call before it runs it.

Test fixture for approvals through Tether. The model is Tether's fake LLM at $FAKE_LLM_URL
(a user message `tool:deploy` makes it call `deploy`); `deploy` appends `{"tool",
"arguments"}` to $APPROVAL_TOOL_LOG (which outlives the process) and returns 42. App name
`adk_approval_agent`.
"""

import json
import os

from google.adk.agents import LlmAgent
from google.adk.integrations.openai import OpenAILlm
from google.adk.tools import FunctionTool


def deploy(x: int) -> int:
    """Deploys x."""
    with open(os.environ["APPROVAL_TOOL_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": "deploy", "arguments": {"x": x}}) + "\n")
    return 42


root_agent = LlmAgent(
    name="assistant",
    model=OpenAILlm(
        model="fake-model",
        base_url=os.environ.get("FAKE_LLM_URL", "http://127.0.0.1:8000/v1"),
        api_key="unused",
    ),
    instruction="You are a helpful assistant.",
    tools=[FunctionTool(deploy, require_confirmation=True)],
)
