"""kagent-adk test agent: `kagent-adk run kagent_adk_agent --local --working-dir tests/agents/kagent`."""

from . import agent  # noqa: F401  (ADK's loader looks for kagent_adk_agent.agent.root_agent)
