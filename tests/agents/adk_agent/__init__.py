"""Google ADK test agent for Tether: `adk api_server ... tests/agents` serves it as app `adk_agent`."""

from . import agent  # noqa: F401  (ADK's loader looks for adk_agent.agent.root_agent)
