"""Interop: Google ADK's `adk api_server` HTTP API through Tether.

The agent is a real ADK app (tests/agents/adk_agent, app `adk_agent`, agent `assistant`)
served with in-memory sessions (`--session_service_uri memory://`), its model the fake LLM
(tests/fake_agent.py). A restart forgets every session, and ADK then answers
`404 Session not found`: the motivating bug. Through Tether the conversation must go on,
with the earlier turns given back to the model as the assistant's own turns, and one
account must never reach another's sessions.

Environment (gateway/tests/e2e/agents.rs sets it; see tests/interop/agents.py):
TETHER_URL (Tether started with `--protocol adk --upstream http://127.0.0.1:$AGENT_PORT`
and two API keys), TETHER_API_KEY (account A), TETHER_API_KEY_B (account B), AGENT_PORT,
FAKE_LLM_URL. Unset: every test here is skipped.
"""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

import agents
from agents import AdkAgent, auth_headers, describe, llm_requests, session_events, sse_events, tether_url

_missing = agents.missing_env("TETHER_URL", "AGENT_PORT", "FAKE_LLM_URL", "TETHER_API_KEY", "TETHER_API_KEY_B")
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"not set: {', '.join(_missing)}")

APP = "adk_agent"
AGENT_NAME = "assistant"
FIRST = "My project is named zebra42."
FIRST_ANSWER = "You said: My project is named zebra42."
SECOND = "What is my project named?"


@pytest.fixture(scope="module")
def agent_process():
    """One agent process for the module (starting one takes seconds); tests restart it."""
    a = AdkAgent(int(agents.env("AGENT_PORT")))
    yield a
    a.kill()
    a.log_path.unlink(missing_ok=True)


@pytest.fixture
def agent(agent_process):
    since = agent_process.log_size()
    yield agent_process.ensure_running()
    # Shown by pytest only when the test failed.
    print(f"--- {agent_process.name} log during this test ---\n{agent_process.log_tail(since=since)}")


def key_a() -> str:
    return agents.env("TETHER_API_KEY")


def key_b() -> str:
    return agents.env("TETHER_API_KEY_B")


class Adk:
    """The ADK HTTP API at `base`, as one caller (an API key, or none for the agent itself)."""

    def __init__(self, base: str, key: str | None):
        self.base = base.rstrip("/")
        self.headers = auth_headers(key) if key else {}

    def sessions_url(self, user: str) -> str:
        return f"{self.base}/apps/{APP}/users/{user}/sessions"

    def create(self, user: str, session: str) -> httpx.Response:
        return httpx.post(self.sessions_url(user), json={"session_id": session}, headers=self.headers, timeout=30)

    def get(self, user: str, session: str) -> httpx.Response:
        return httpx.get(f"{self.sessions_url(user)}/{session}", headers=self.headers, timeout=30)

    def list(self, user: str) -> httpx.Response:
        return httpx.get(self.sessions_url(user), headers=self.headers, timeout=30)

    def body(self, user: str, session: str, text: str) -> dict:
        return {
            "app_name": APP,
            "user_id": user,
            "session_id": session,
            "new_message": {"role": "user", "parts": [{"text": text}]},
        }

    def run(self, user: str, session: str, text: str) -> httpx.Response:
        return httpx.post(f"{self.base}/run", json=self.body(user, session, text), headers=self.headers, timeout=60)

    def run_sse(self, user: str, session: str, text: str) -> tuple[httpx.Response, list[dict]]:
        """The response and its SSE events' JSON (none when the answer is not a stream)."""
        body = {**self.body(user, session, text), "streaming": True}
        r = httpx.post(f"{self.base}/run_sse", json=body, headers=self.headers, timeout=60)
        if not r.headers.get("content-type", "").startswith("text/event-stream"):
            return r, []
        return r, [e.json for e in sse_events(r.text)]

    def turn(self, mode: str, user: str, session: str, text: str) -> str:
        """The model's answer to one turn by /run or /run_sse; fails on anything else."""
        if mode == "run":
            r = self.run(user, session, text)
            assert r.status_code == 200, f"/run {text!r}: {r.status_code} {r.text}"
            events = r.json()
        else:
            r, events = self.run_sse(user, session, text)
            assert r.status_code == 200 and events, f"/run_sse {text!r}: {r.status_code} {r.text if not events else ''}"
            assert not any("error" in e or "errorCode" in e for e in events), events
            events = [e for e in events if not e.get("partial")]
        answers = [e for e in events if (e.get("content") or {}).get("role") == "model"]
        assert answers, f"no model event in the answer to {text!r}: {events}"
        assert answers[-1].get("author") == AGENT_NAME, answers[-1]
        return "".join(p.get("text", "") for p in answers[-1]["content"]["parts"])


def new_session() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


# ---- 5. the bug, without Tether -------------------------------------------------------------


def test_without_tether_a_restarted_agent_has_lost_the_session(agent):
    adk, user, session = Adk(agent.url, None), "u1", new_session()
    assert adk.create(user, session).status_code == 200
    assert adk.turn("run", user, session, FIRST) == FIRST_ANSWER
    assert adk.turn("run", user, session, SECOND) == "zebra42"

    agent.restart()
    r = adk.run(user, session, SECOND)
    assert r.status_code == 404, f"the agent still knows the session after a restart?! {r.status_code} {r.text}"
    assert "Session not found" in r.json()["detail"], r.text


# ---- 6. through Tether the conversation survives --------------------------------------------


def chat_turns(request: dict) -> list[tuple[str, str]]:
    """(role, text) of every message the model received in one request."""
    out = []
    for m in request["body"]["messages"]:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        out.append((m["role"], content or ""))
    return out


@pytest.mark.parametrize("mode", ["run", "run_sse"])
def test_conversation_survives_agent_restart_through_tether(agent, mode):
    adk, user, session = Adk(tether_url(), key_a()), "u1", new_session()
    r = adk.create(user, session)
    assert r.status_code == 200, f"create through Tether: {r.status_code} {r.text}"
    created = r.json()
    # The account namespace is Tether's business: the client sees its own ids.
    assert (created["id"], created["userId"], created["appName"]) == (session, user, APP), created

    assert adk.turn(mode, user, session, FIRST) == FIRST_ANSWER

    agent.restart()
    answer = adk.turn(mode, user, session, SECOND)
    assert "zebra42" in answer, f"the conversation was lost across the agent restart: {answer!r}"

    events = session_events(session)
    restores = [e for e in events if e["EventType"] == "session_restore"]
    assert len(restores) == 1, f"expected one session_restore in {session}:\n{describe(events)}"

    # The model saw the first turn as the assistant's own, not quoted as another agent's.
    last = llm_requests()[-1]
    turns = chat_turns(last)
    assert not any("For context" in text for _, text in turns), json.dumps(turns, indent=1)
    assert [t for t in turns if t[0] != "system"] == [
        ("user", FIRST),
        ("assistant", FIRST_ANSWER),
        ("user", SECOND),
    ], json.dumps(turns, indent=1)

    # The restored session reads back like the original one (through Tether, as the client).
    r = adk.get(user, session)
    assert r.status_code == 200, r.text
    texts = [
        (e.get("author"), "".join(p.get("text", "") for p in (e.get("content") or {}).get("parts") or []))
        for e in r.json()["events"]
    ]
    assert texts == [("user", FIRST), (AGENT_NAME, FIRST_ANSWER), ("user", SECOND), (AGENT_NAME, "zebra42")], texts


@pytest.mark.parametrize("mode", ["run", "run_sse"])
def test_unknown_session_is_a_404_like_adk_says(agent, mode):
    """A session nobody has: Tether answers what ADK answers (404 JSON, also for /run_sse)."""
    user, session = "u1", new_session()
    answers = []
    for adk in (Adk(agent.url, None), Adk(tether_url(), key_a())):
        r = adk.run(user, session, SECOND) if mode == "run" else adk.run_sse(user, session, SECOND)[0]
        answers.append((r.status_code, r.headers.get("content-type", "").split(";")[0], r.text))
    direct, through = answers
    assert direct[:2] == (404, "application/json"), direct
    assert through[:2] == direct[:2], f"/{mode} of an unknown session: ADK says {direct}, Tether says {through}"
    assert "Session not found" in json.loads(through[2]).get("detail", ""), through


def test_a_session_deleted_through_tether_is_not_restored(agent):
    """A session the client deletes stays deleted: a later /run on its id gets ADK's own 404
    (Tether has the history, but must not bring back what the client deleted)."""
    adk, user, session = Adk(tether_url(), key_a()), "u1", new_session()
    assert adk.create(user, session).status_code == 200
    assert adk.turn("run", user, session, FIRST) == FIRST_ANSWER

    r = httpx.delete(f"{adk.sessions_url(user)}/{session}", headers=adk.headers, timeout=30)
    assert r.status_code in (200, 204), f"DELETE through Tether: {r.status_code} {r.text}"
    assert adk.get(user, session).status_code == 404

    through = adk.run(user, session, SECOND)
    # ADK itself, asked for a session it does not have under that id.
    direct = Adk(agent.url, None).run(user, session, SECOND)
    assert direct.status_code == 404, direct.text

    def answer(r: httpx.Response) -> tuple:
        return r.status_code, r.headers.get("content-type", "").split(";")[0], r.json()

    assert answer(through) == answer(direct), f"ADK says {direct.text}, Tether says {through.text}"
    assert through.json()["detail"] == f"Session not found: {session}", through.text

    events = session_events(session)
    cuts = [
        e["SeqId"]
        for e in events
        if e["EventType"] == "compaction" and (e.get("Content") or {}).get("reason") == "session_deleted"
    ]
    assert len(cuts) == 1, f"expected one session_deleted marker in {session}:\n{describe(events)}"
    after = [e for e in events if e["SeqId"] > cuts[0]]
    assert any(e["EventType"] == "run_status" for e in after), describe(events)
    assert not any(e["EventType"] == "session_restore" for e in after), (
        f"the deleted session was restored:\n{describe(events)}"
    )


# ---- 7. account binding ---------------------------------------------------------------------


def test_another_account_cannot_reach_a_session(agent):
    a, b = Adk(tether_url(), key_a()), Adk(tether_url(), key_b())
    user, session = "u1", new_session()
    assert a.create(user, session).status_code == 200
    assert a.turn("run", user, session, FIRST) == FIRST_ANSWER

    # B names A's user id and session id.
    r = b.get(user, session)
    assert r.status_code == 404, f"B read A's session: {r.status_code} {r.text}"
    assert "zebra42" not in r.text, r.text
    r = b.list(user)
    assert r.status_code == 200, r.text
    assert session not in r.text and "zebra42" not in r.text, f"B lists A's session: {r.text}"
    r = b.run(user, session, SECOND)
    assert r.status_code == 404, f"B ran a turn in A's session: {r.status_code} {r.text}"
    assert "zebra42" not in r.text, r.text
    r, events = b.run_sse(user, session, SECOND)
    assert "zebra42" not in r.text + json.dumps(events), f"B streamed A's data: {r.status_code} {events or r.text}"
    assert not any((e.get("content") or {}).get("role") == "model" for e in events), (
        f"B ran a turn in A's session: {events}"
    )

    # B's session of the same ids is its own, separate one.
    r = b.create(user, session)
    assert r.status_code == 200, f"B cannot have its own {user}/{session}: {r.status_code} {r.text}"
    assert "zebra42" not in b.turn("run", user, session, SECOND)
    assert "zebra42" in a.turn("run", user, session, SECOND)

    # Tether's log, per account.
    assert "zebra42" not in json.dumps(session_events(session, key_b()))
    assert "zebra42" in json.dumps(session_events(session, key_a()))
