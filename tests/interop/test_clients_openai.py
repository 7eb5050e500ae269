"""Interop: real clients as they are written, through the official `openai` SDK.

Tether sits in front of tests/fake_agent.py (an `openai-chat` agent that remembers nothing
and records every request it gets). This file owns the agent process: it starts it on
AGENT_PORT, the port Tether's `--upstream` names, and kills it to play an outage.

- A Chat Completions client that resends the whole conversation in a session: the agent
  gets each message once, and the log holds each once.
- The same client with an edited turn: the turn goes to a fork at the last checkpoint
  where the histories agree (`x-session-id` names it, `x-previous-session-id` the
  session named); the fork holds the edited history, the original is untouched.
- An SDK retrying while the agent is down, then the user sending again: exactly one
  copy of the message in the agent's next request; the failed copies stay in the log,
  flagged superseded.
- `Idempotency-Key` repeated (after the run, and while it runs): the same response, and
  no second run in the log.

Environment (gateway/tests/e2e/clients.rs sets it): TETHER_URL, AGENT_PORT. Unset: every
test here is skipped.
"""

from __future__ import annotations

import threading
import uuid

import httpx
import pytest

import agents
from agents import FakeAgent, control_ok, session_events, tether_url

_missing = agents.missing_env("TETHER_URL", "AGENT_PORT")
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"not set: {', '.join(_missing)}")

if not _missing:
    import openai
    from openai import OpenAI


@pytest.fixture(scope="module")
def agent():
    a = FakeAgent(int(agents.env("AGENT_PORT"))).start()
    yield a
    a.kill()
    a.log_path.unlink(missing_ok=True)


@pytest.fixture
def client() -> "OpenAI":
    return OpenAI(base_url=tether_url() + "/v1", api_key="unused", max_retries=0, timeout=60)


def agent_requests(agent) -> list[dict]:
    return httpx.get(f"{agent.url}/_requests", timeout=10).json()


def sent_messages(request: dict) -> list[tuple[str, str]]:
    return [(m["role"], m.get("content") or "") for m in request["body"]["messages"]]


def messages_in_log(session: str, active_only: bool = True) -> list[tuple[str, str]]:
    return [
        (e["Role"], e["Content"].get("text", ""))
        for e in session_events(session)
        if e["EventType"] == "message" and not (active_only and e["Superseded"])
    ]


def chat(client, session: str, messages: list[dict], **kw):
    """One turn; returns (answer, the session the answer names in x-session-id, headers)."""
    raw = client.chat.completions.with_raw_response.create(
        model="fake", messages=messages, extra_headers={"x-session-id": session, **kw.pop("headers", {})}, **kw
    )
    reply = raw.parse()
    return reply.choices[0].message.content, raw.headers["x-session-id"], raw.headers


SYSTEM = {"role": "system", "content": "You are terse."}


def test_a_client_resending_the_whole_history_is_recorded_once(agent, client):
    s = f"full-{uuid.uuid4().hex[:12]}"
    history: list[dict] = [SYSTEM]
    for text in ["My project is named zebra42. Reply with OK.", "Hello there", "What is my project named?"]:
        history.append({"role": "user", "content": text})
        answer, session, _ = chat(client, s, history)
        assert session == s, "a matching history stays in its session"
        history.append({"role": "assistant", "content": answer})
    assert answer == "zebra42"
    # The agent's last request: the system message of this turn, then each message once.
    last = agent_requests(agent)[-1]
    assert sent_messages(last) == [(m["role"], m["content"]) for m in history[:-1]]
    # The log holds each user and assistant message once, and no system message.
    assert messages_in_log(s) == [(m["role"], m["content"]) for m in history[1:]]


def test_an_edited_history_forks_and_leaves_the_session_as_it_was(agent, client):
    s = f"edit-{uuid.uuid4().hex[:12]}"
    history: list[dict] = []
    for text in ["My project is named zebra42. Reply with OK.", "Hello there"]:
        history.append({"role": "user", "content": text})
        answer, _, _ = chat(client, s, history)
        history.append({"role": "assistant", "content": answer})
    before = session_events(s)

    # The client edits its second message and asks on.
    edited = [*history[:2], {"role": "user", "content": "My project is now named koala7."},
              {"role": "assistant", "content": "You said: My project is now named koala7."},
              {"role": "user", "content": "What is my project named?"}]
    answer, f, headers = chat(client, s, edited)
    assert answer == "koala7", "the agent got the edited history"
    assert f != s and headers["x-previous-session-id"] == s
    forked = control_ok("ListSessions", {"PageSize": 100})["Sessions"]
    row = next(r for r in forked if r["SessionId"] == f)
    assert row["ForkedFrom"]["SessionId"] == s
    # The fork: turn 1 inherited, then the edited turns and the new answer.
    assert messages_in_log(f) == [(m["role"], m["content"]) for m in edited] + [("assistant", "koala7")]
    inherited = [e for e in session_events(f) if e["Inherited"]]
    assert [e["Content"].get("text") for e in inherited if e["EventType"] == "message"] == [
        history[0]["content"], history[1]["content"]]
    # The session named is untouched.
    assert session_events(s) == before
    # The client goes on in the fork it was told about: no further fork.
    edited.append({"role": "assistant", "content": answer})
    edited.append({"role": "user", "content": "Hello again"})
    _, again, headers = chat(client, f, edited)
    assert again == f and "x-previous-session-id" not in headers


def test_a_retry_after_an_outage_leaves_one_copy_of_the_message(agent, client):
    s = f"outage-{uuid.uuid4().hex[:12]}"
    history = [{"role": "user", "content": "My project is named zebra42. Reply with OK."}]
    answer, _, _ = chat(client, s, history)
    history.append({"role": "assistant", "content": answer})
    history.append({"role": "user", "content": "What is my project named?"})

    agent.kill()
    retrying = OpenAI(base_url=tether_url() + "/v1", api_key="unused", max_retries=2, timeout=60)
    with pytest.raises(openai.APIStatusError):
        retrying.chat.completions.create(model="fake", messages=history, extra_headers={"x-session-id": s})
    agent.start()
    seen = len(agent_requests(agent))

    answer, session, _ = chat(client, s, history)
    assert (answer, session) == ("zebra42", s)
    requests = agent_requests(agent)[seen:]
    assert len(requests) == 1
    assert sent_messages(requests[0]) == [(m["role"], m["content"]) for m in history]
    # Three failed runs (the SDK's first try and two retries) left their copies in the log,
    # flagged; the history holds one.
    question = ("user", "What is my project named?")
    assert messages_in_log(s, active_only=False).count(question) == 4
    assert messages_in_log(s).count(question) == 1
    failed = [e for e in session_events(s) if e["EventType"] == "run_status" and e["Content"].get("status") == "failed"]
    assert len(failed) == 3


def runs_in_log(session: str) -> int:
    """The runs started in a session (0 while it does not exist yet)."""
    if agents.control("ListSessions", {"PageSize": 1}).status_code == 200 and agents.control(
        "ListSessionEvents", {"SessionId": session, "Limit": 1}
    ).status_code == 404:
        return 0
    return sum(
        1 for e in session_events(session)
        if e["EventType"] == "run_status" and e["Content"].get("status") == "in_progress"
    )


def test_an_idempotency_key_repeat_answers_with_the_first_run(agent, client):
    key = f"idem-{uuid.uuid4().hex}"
    first = client.responses.create(model="fake", input="Reply with OK", extra_headers={"Idempotency-Key": key})
    again = client.responses.create(model="fake", input="Reply with OK", extra_headers={"Idempotency-Key": key})
    assert again.id == first.id and again.output_text == first.output_text == "OK."
    assert again.conversation.id == first.conversation.id
    assert runs_in_log(first.conversation.id) == 1

    # Chat Completions, in a session, the repeat arriving while the run still streams.
    s = f"idem-chat-{uuid.uuid4().hex[:12]}"
    key = f"idem-{uuid.uuid4().hex}"
    headers = {"x-session-id": s, "Idempotency-Key": key}
    messages = [{"role": "user", "content": "slow:8:150"}]
    answers: dict[str, str] = {}

    def stream_first():
        chunks = client.chat.completions.create(model="fake", messages=messages, extra_headers=headers, stream=True)
        ids, text = set(), ""
        for c in chunks:
            ids.add(c.id)
            if c.choices:
                text += c.choices[0].delta.content or ""
        answers["first"] = text
        answers["first_id"] = ids.pop()

    t = threading.Thread(target=stream_first)
    t.start()
    agents.wait_for(lambda: runs_in_log(s) == 1, 10, "the first run to start")
    repeat = client.chat.completions.create(model="fake", messages=messages, extra_headers=headers)
    t.join(30)
    assert repeat.choices[0].message.content == answers["first"] == "w1 w2 w3 w4 w5 w6 w7 w8 "
    assert repeat.id == answers["first_id"]
    assert runs_in_log(s) == 1, "the repeat started no second run"


def test_an_idempotency_key_retry_after_an_outage_runs_once_more(agent, client):
    """A key whose first run failed before the agent answered is what the retry is for."""
    s = f"idem-outage-{uuid.uuid4().hex[:12]}"
    key = f"idem-{uuid.uuid4().hex}"
    messages = [{"role": "user", "content": "Reply with OK"}]
    headers = {"x-session-id": s, "Idempotency-Key": key}
    agent.kill()
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="fake", messages=messages, extra_headers=headers)
    agent.start()
    reply = client.chat.completions.create(model="fake", messages=messages, extra_headers=headers)
    assert reply.choices[0].message.content == "OK."
    repeat = client.chat.completions.create(model="fake", messages=messages, extra_headers=headers)
    assert repeat.id == reply.id
    assert runs_in_log(s) == 2, "the failed run and the retry; the repeat ran nothing"
    assert messages_in_log(s) == [("user", "Reply with OK"), ("assistant", "OK.")]
