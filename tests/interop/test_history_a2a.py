"""Interop: the seed's fork scenario in front of the a2a-sdk agent (tests/agents/a2a_agent.py),
through the official a2a-sdk client, and compaction shortening what a restore sends.

The agent keeps each contextId's history in memory only. A fork is a new contextId the
agent never saw: its first turn through Tether restores it like a forgotten context, from
the history the fork inherited. The agent is killed (SIGKILL) and restarted mid-scenario.

Environment (gateway/tests/e2e/history.rs sets it; see tests/interop/agents.py):
TETHER_URL (Tether with `--protocol a2a --upstream http://127.0.0.1:$AGENT_PORT`),
AGENT_PORT, FAKE_LLM_URL. Unset: every test here is skipped.
"""

from __future__ import annotations

import json

import pytest

import agents
from agents import control, control_ok, describe, llm_requests, session_events, tether_url, wait_terminal

_missing = agents.missing_env("TETHER_URL", "AGENT_PORT", "FAKE_LLM_URL")
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"not set: {', '.join(_missing)}")

# The agent process fixtures and the official client's turn, as test_a2a.py has them.
from test_a2a import agent, agent_process, rpc, turn  # noqa: E402,F401

FIRST = "My project is named zebra42."
QUESTION = "What is my project named?"
RENAMED = "My project is now named koala7."


def ask(context: str, text: str) -> str:
    answer, ctx, shown = turn(tether_url(), "1.0", False, text, context)
    assert ctx == context, f"the answer came in another context: {shown}"
    return answer


def test_a_fork_is_a_new_context_that_remembers_across_an_agent_kill(agent):
    answer, s, shown = turn(tether_url(), "1.0", False, FIRST, None)
    assert "zebra42" in answer, shown
    wait_terminal(s, None)

    forked = control_ok("ForkSession", {"SessionId": s})
    f = forked["SessionId"]
    assert forked["ForkedFrom"]["SessionId"] == s

    agent.restart()
    assert ask(f, QUESTION) == "zebra42", "the fork, a new contextId, remembers turn 1"
    assert ask(s, QUESTION) == "zebra42", "the original remembers"
    ask(f, RENAMED)
    assert ask(f, QUESTION) == "koala7"
    assert ask(s, QUESTION) == "zebra42", "the original never saw the fork's turns"

    # The fork's first turn put its inherited history into the agent, as a restore does.
    events = session_events(f)
    own = [e for e in events if not e["Inherited"]]
    assert own[0]["EventType"] == "session_fork", describe(own)
    restores = [e for e in own if e["EventType"] == "session_restore"]
    assert len(restores) == 1, describe(own)
    assert all(e["SessionId"] == s for e in events if e["Inherited"])

    # GetTask through Tether answers from the fork's own log: its last task is the fork's.
    handles = [e["Metadata"].get("agent_ref") for e in own if e["EventType"] == "run_status"]
    last_task = [h for h in handles if h][-1]
    got = rpc(tether_url(), "1.0", "tasks/get", "GetTask", {"id": last_task})
    task = got["result"]
    assert task["contextId"] == f, got
    assert "koala7" in json.dumps(task), got
    # ListTasks through Tether (the agent answers it): the fork's tasks are its own.
    listed = rpc(tether_url(), "1.0", "tasks/list", "ListTasks", {"contextId": f})
    tasks = listed.get("result", {}).get("tasks") or []
    assert tasks and all(t["contextId"] == f for t in tasks), listed
    assert "koala7" in json.dumps(tasks), listed
    # ...and the original's log knows nothing of the fork.
    assert "koala7" not in json.dumps(session_events(s))


def test_compaction_shortens_what_a_restore_sends(agent):
    answer, s, _ = turn(tether_url(), "1.0", False, FIRST, None)
    for text in ("The colour is teal.", QUESTION):
        ask(s, text)
    wait_terminal(s, None)

    # An A2A agent cannot summarise: without a summarizer, a summary must be given.
    r = control("CompactSession", {"SessionId": s})
    assert r.status_code == 400 and r.json()["Data"]["code"] == "summarizer_not_configured", r.text
    summary = "Earlier, the user said their project is named zebra42."
    data = control_ok("CompactSession", {"SessionId": s, "KeepLastTurns": 1, "Summary": summary})
    assert data["Summary"] == summary and len(data["EventIds"]) == 2, data

    agent.restart()
    asked = len(llm_requests())
    assert ask(s, QUESTION) == "zebra42"
    sent = json.dumps(llm_requests()[asked:])
    assert summary in sent, f"the restore did not send the summary: {sent}"
    assert "My project is named zebra42." not in sent, "the restore sent what was compacted"
    assert "The colour is teal." not in sent, "the restore sent what was compacted"
