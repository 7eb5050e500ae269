"""Interop: the seed's fork scenario in front of Google ADK's `adk api_server`
(tests/agents/adk_agent, in-memory sessions), through Tether's ADK surface.

A fork is a session id the agent never saw: its first turn gets ADK's `404 Session not
found`, and Tether re-creates it from the history the fork inherited, as it restores any
forgotten session. The agent is killed (SIGKILL) and restarted mid-scenario. ADK's own
session reads through Tether then show each session's own history.

Environment (gateway/tests/e2e/history.rs sets it; see tests/interop/agents.py):
TETHER_URL (Tether with `--protocol adk --upstream http://127.0.0.1:$AGENT_PORT` and two
API keys), TETHER_API_KEY, TETHER_API_KEY_B, AGENT_PORT, FAKE_LLM_URL. Unset: every test
here is skipped.
"""

from __future__ import annotations

import json
import uuid

import pytest

import agents
from agents import control, control_ok, describe, session_events, tether_url, wait_terminal

_missing = agents.missing_env("TETHER_URL", "AGENT_PORT", "FAKE_LLM_URL", "TETHER_API_KEY")
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"not set: {', '.join(_missing)}")

# The agent process fixtures and the ADK client, as test_adk.py has them.
from test_adk import FIRST, FIRST_ANSWER, Adk, agent, agent_process, key_a, new_session  # noqa: E402,F401

QUESTION = "What is my project named?"
RENAMED = "My project is now named koala7."


def test_a_fork_is_a_new_adk_session_that_remembers_across_an_agent_kill(agent):
    adk, user, s = Adk(tether_url(), key_a()), "u1", new_session()
    assert adk.create(user, s).status_code == 200
    assert adk.turn("run", user, s, FIRST) == FIRST_ANSWER
    wait_terminal(s, None)

    f = f"fork-{uuid.uuid4().hex[:12]}"
    forked = control_ok("ForkSession", {"SessionId": s, "NewSessionId": f})
    assert forked["SessionId"] == f and forked["ForkedFrom"]["SessionId"] == s

    agent.restart()
    assert adk.turn("run", user, f, QUESTION) == "zebra42", "the fork remembers turn 1"
    assert adk.turn("run_sse", user, s, QUESTION) == "zebra42", "the original remembers"
    adk.turn("run", user, f, RENAMED)
    assert adk.turn("run_sse", user, f, QUESTION) == "koala7"
    assert adk.turn("run", user, s, QUESTION) == "zebra42", "the original never saw the fork's turns"

    # The fork's first turn re-created it in the agent, from what it inherited.
    own = [e for e in session_events(f) if not e["Inherited"]]
    assert own[0]["EventType"] == "session_fork", describe(own)
    assert [e for e in own if e["EventType"] == "session_restore"], describe(own)

    # ADK's session reads through Tether: each session's own history.
    fork_view = adk.get(user, f)
    assert fork_view.status_code == 200, fork_view.text
    texts = json.dumps(fork_view.json()["events"])
    assert "zebra42" in texts and "koala7" in texts
    original = adk.get(user, s)
    assert original.status_code == 200, original.text
    assert "koala7" not in json.dumps(original.json()["events"])
