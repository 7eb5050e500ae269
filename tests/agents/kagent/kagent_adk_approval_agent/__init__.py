"""kagent-adk test agent with a tool that needs approval: `kagent-adk run kagent_adk_approval_agent --local --working-dir tests/agents/kagent`."""

from . import agent  # noqa: F401  (ADK's loader looks for kagent_adk_approval_agent.agent.root_agent)
