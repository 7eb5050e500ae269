"""Interop: the seed's fork scenario through the official `openai` SDK.

Tether sits in front of tests/fake_agent.py (an `openai-chat` agent that remembers nothing:
it answers only from the history inside each request). This file owns the agent process:
it starts it on AGENT_PORT, the port Tether's `--upstream` names, and kills it with SIGKILL
mid-scenario, so everything remembered afterwards was kept by Tether.

Turn 1 "My project is named zebra42." in S; S forked at its latest checkpoint into F; the
agent killed and restarted; "What is my project named?" answers zebra42 in F and in S;
F is told "My project is now named koala7." and answers koala7, while S still answers
zebra42. Then a Responses turn after an older response continues in a fork.

Environment (gateway/tests/e2e/history.rs sets it; see tests/interop/agents.py): TETHER_URL
(Tether with `--protocol openai-chat --upstream http://127.0.0.1:$AGENT_PORT`), AGENT_PORT.
Unset: every test here is skipped.
"""

from __future__ import annotations

import uuid

import pytest

import agents
from agents import FakeAgent, control_ok, session_events, tether_url

_missing = agents.missing_env("TETHER_URL", "AGENT_PORT")
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"not set: {', '.join(_missing)}")

if not _missing:
    from openai import OpenAI

FIRST = "My project is named zebra42. Reply with OK."
QUESTION = "What is my project named?"
RENAMED = "My project is now named koala7."


@pytest.fixture(scope="module")
def agent():
    a = FakeAgent(int(agents.env("AGENT_PORT"))).start()
    yield a
    a.kill()
    a.log_path.unlink(missing_ok=True)


@pytest.fixture
def client() -> "OpenAI":
    # No retries: a retried request would be a second run in Tether's log.
    return OpenAI(base_url=tether_url() + "/v1", api_key="unused", max_retries=0, timeout=60)


def chat(client, session: str, text: str, stream: bool = False) -> str:
    """One Chat Completions turn in `session` (named in the x-session-id header)."""
    messages = [{"role": "user", "content": text}]
    headers = {"x-session-id": session}
    if stream:
        chunks = client.chat.completions.create(model="fake", messages=messages, extra_headers=headers, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reply = client.chat.completions.create(model="fake", messages=messages, extra_headers=headers)
    return reply.choices[0].message.content


def test_a_fork_and_the_original_both_remember_across_an_agent_kill(agent, client):
    s = f"sdk-fork-{uuid.uuid4().hex[:12]}"
    assert chat(client, s, FIRST) == "OK."

    forked = control_ok("ForkSession", {"SessionId": s})
    f = forked["SessionId"]
    assert forked["ForkedFrom"]["SessionId"] == s
    latest = control_ok("ListSessionCheckpoints", {"SessionId": s})["Checkpoints"][-1]
    assert forked["ForkedFrom"]["CheckpointId"] == latest["CheckpointId"]

    agent.restart()  # SIGKILL: the agent's memory (there is none to begin with) is gone
    assert chat(client, f, QUESTION) == "zebra42", "the fork remembers turn 1"
    assert chat(client, s, QUESTION, stream=True) == "zebra42", "so does the original"
    chat(client, f, RENAMED)
    assert chat(client, f, QUESTION, stream=True) == "koala7"
    assert chat(client, s, QUESTION) == "zebra42", "the original never saw the fork's turns"

    sessions = {row["SessionId"]: row for row in control_ok("ListSessions", {"PageSize": 100})["Sessions"]}
    assert sessions[f]["ForkedFrom"] == forked["ForkedFrom"]
    assert sessions[s]["ForkedFrom"] is None
    events = session_events(f)
    inherited = [e for e in events if e["Inherited"]]
    assert inherited and all(e["SessionId"] == s for e in inherited)
    assert [e["SeqId"] for e in inherited] == list(range(1, forked["ForkedFrom"]["SeqId"] + 1))
    own = events[len(inherited):]
    assert own[0]["EventType"] == "session_fork" and own[0]["SeqId"] == 1
    assert not any("koala7" in str(e["Content"]) for e in session_events(s))


def test_a_responses_turn_after_an_older_response_forks(agent, client):
    first = client.responses.create(model="fake", input="My project is named zebra42.")
    s = first.conversation.id
    client.responses.create(model="fake", conversation=s, input=RENAMED)

    agent.restart()
    branch = client.responses.create(model="fake", previous_response_id=first.id, input=QUESTION)
    assert branch.output_text == "zebra42"
    assert branch.conversation.id != s, "the older response's turn went to a fork"
    later = client.responses.create(model="fake", conversation=s, input=QUESTION)
    assert later.output_text == "koala7", "the session itself kept its own later turn"
    again = client.responses.create(model="fake", previous_response_id=branch.id, input=QUESTION)
    assert again.conversation.id == branch.conversation.id
    assert again.output_text == "zebra42"
