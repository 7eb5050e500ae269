"""Interop: LangGraph's API server (`langgraph dev`, in memory) through Tether, with the
official `langgraph-sdk` client.

The graph (tests/agents/langgraph_agent) answers from its thread's messages through the fake
LLM. `langgraph dev` keeps threads in memory (and in .langgraph_api/ of its working
directory, which each start gets fresh: a restarted container), so after a `kill -9` a run
on an old thread answers 404. Through Tether (`--protocol langgraph`) the thread is the
session: Tether re-creates it under the same id with its earlier messages and the turn
goes on. Also: background runs with join, a dropped stream re-joined from Last-Event-ID,
cancel, and one account never reaching another's threads.

Environment (gateway/tests/e2e/agents.rs sets it; run with the LangGraph venv's python,
tests/interop/venvs.sh): TETHER_STACK_PYTHON, TETHER_URL (Tether in front of
127.0.0.1:$AGENT_PORT with API keys), TETHER_API_KEY, TETHER_API_KEY_B, AGENT_PORT,
FAKE_LLM_URL. Unset: every test here is skipped.
"""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest

import agents
from agents import LangGraphServer, describe, llm_requests, session_events, terminal_statuses, tether_url, wait_terminal

_missing = agents.missing_env("TETHER_URL", "AGENT_PORT", "FAKE_LLM_URL", "TETHER_API_KEY", "TETHER_API_KEY_B")
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"not set: {', '.join(_missing)}")

if not _missing:
    from langgraph_sdk import get_sync_client

GRAPH = "agent"
FIRST = "My project is named zebra42. Reply with OK."
SECOND = "What is my project named? Reply with just the name."


agent_process, agent = agents.fixtures(lambda: LangGraphServer(int(agents.env("AGENT_PORT"))))


def client(base: str | None = None, key: str | None = None):
    """The official sync client, at Tether (with account A's key) or at `base`."""
    if base is not None:
        return get_sync_client(url=base, api_key=None)
    return get_sync_client(url=tether_url(), api_key=key or agents.env("TETHER_API_KEY"))


def user(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def last_ai(values: dict) -> str:
    messages = [m for m in values.get("messages") or [] if m.get("type") == "ai"]
    assert messages, f"no AI message in {json.dumps(values)[:2000]}"
    content = messages[-1]["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def turn(c, thread: str, text: str, mode: str) -> str:
    """The graph's answer to one run: `runs.wait`, or `runs.stream` read to its end."""
    if mode == "wait":
        values = c.runs.wait(thread, GRAPH, input=user(text))
        assert "__error__" not in values, values
        return last_ai(values)
    parts = list(c.runs.stream(thread, GRAPH, input=user(text), stream_mode=["values", "messages-tuple"]))
    events = [p.event for p in parts]
    assert "error" not in events, [p.data for p in parts if p.event == "error"]
    assert events[0] == "metadata" and "messages" in events, events
    values = [p.data for p in parts if p.event == "values"]
    assert values, events
    tokens = "".join(p.data[0].get("content", "") for p in parts if p.event == "messages")
    assert tokens == last_ai(values[-1]), (tokens, values[-1])
    return last_ai(values[-1])


def restores(thread: str) -> list[dict]:
    return [e for e in session_events(thread) if e["EventType"] == "session_restore"]


# ---- 1. the bug, without Tether ------------------------------------------------------------


def test_without_tether_a_killed_server_has_lost_the_thread(agent):
    c = client(agent.url)
    thread = c.threads.create()["thread_id"]
    assert turn(c, thread, FIRST, "wait") == "OK."
    agent.restart()  # kill -9, and a fresh working directory
    with pytest.raises(httpx.HTTPStatusError) as lost:
        c.runs.wait(thread, GRAPH, input=user(SECOND))
    assert lost.value.response.status_code == 404, lost.value.response.text


# ---- 2. through Tether the thread survives -------------------------------------------------


@pytest.mark.parametrize("mode", ["wait", "stream"])
def test_seed_turns_survive_kill_9_through_tether(agent, mode):
    c = client()
    thread = c.threads.create(metadata={"purpose": "seed"})
    assert thread["metadata"] == {"purpose": "seed"}, f"Tether's metadata leaked: {thread}"
    thread_id = thread["thread_id"]
    assert turn(c, thread_id, FIRST, mode) == "OK."

    agent.restart()
    answer = turn(c, thread_id, SECOND, mode)
    assert answer == "zebra42", f"the thread was lost across the kill -9: {answer!r}"
    events = session_events(thread_id)
    assert len(restores(thread_id)) == 1, describe(events)
    assert terminal_statuses(events) == ["completed", "completed"], describe(events)
    # The model got the first turn back as the thread's own messages.
    sent = [(m["role"], m["content"]) for m in llm_requests()[-1]["body"]["messages"]]
    assert sent == [("user", FIRST), ("assistant", "OK."), ("user", SECOND)], sent

    # The thread reads back through Tether as a whole, under the client's id.
    state = c.threads.get_state(thread_id)
    texts = [(m["type"], m["content"]) for m in state["values"]["messages"]]
    assert texts == [("human", FIRST), ("ai", "OK."), ("human", SECOND), ("ai", "zebra42")], texts
    assert thread_id in json.dumps(state) and c.threads.get(thread_id)["thread_id"] == thread_id
    assert c.threads.get_history(thread_id), "no checkpoints in the thread's history"


def test_a_fork_is_a_thread_of_its_own_that_remembers_across_a_kill_9(agent):
    """The seed's fork: a session forked after turn 1 (under a thread id the client picks) is
    a thread the server never had; its first run re-creates it with the inherited messages,
    and the original thread goes on apart."""
    c = client()
    thread_id = c.threads.create()["thread_id"]
    assert turn(c, thread_id, FIRST, "wait") == "OK."
    fork = str(uuid.uuid4())
    forked = agents.control_ok("ForkSession", {"SessionId": thread_id, "NewSessionId": fork})
    assert forked["SessionId"] == fork, forked

    agent.restart()
    assert turn(c, fork, SECOND, "stream") == "zebra42"
    assert turn(c, thread_id, SECOND, "wait") == "zebra42"
    own = [e for e in session_events(fork) if not e.get("Inherited")]
    assert own[0]["EventType"] == "session_fork", describe(own)
    assert [e["EventType"] for e in own].count("session_restore") == 1, describe(own)
    state = c.threads.get_state(fork)["values"]["messages"]
    assert [m["content"] for m in state] == [FIRST, "OK.", SECOND, "zebra42"], state


# ---- 3. background runs, join, re-join, cancel ---------------------------------------------


def test_background_run_join_and_rejoin_from_last_event_id(agent):
    c = client()
    thread_id = c.threads.create()["thread_id"]
    run = c.runs.create(thread_id, GRAPH, input=user("slow:10:300"), stream_mode=["values", "messages-tuple"])
    assert run["thread_id"] == thread_id and run["status"] in ("pending", "running"), run
    run_id = run["run_id"]

    # A stream joined, dropped after two events, and joined again from the last id.
    with httpx.Client(timeout=30, headers={"x-api-key": agents.env("TETHER_API_KEY")}) as http:
        url = f"{tether_url()}/threads/{thread_id}/runs/{run_id}/stream"
        with http.stream("GET", url) as r:
            assert r.status_code == 200, r.read()
            first = []
            for event in agents.sse_events(r):
                first.append(event)
                if len(first) == 2:
                    break
    last_id = first[-1]["id"]
    rest = list(c.runs.join_stream(thread_id, run_id, last_event_id=last_id))
    assert rest and rest[-1].event == "values", [p.event for p in rest]
    ids = [int(e["id"]) for e in first]
    assert ids == sorted(ids), ids

    values = c.runs.join(thread_id, run_id)
    assert last_ai(values).split() == [f"w{k}" for k in range(1, 11)], values
    assert c.runs.get(thread_id, run_id)["status"] == "success"
    tokens = "".join(p.data[0].get("content", "") for p in rest if p.event == "messages")
    assert tokens and last_ai(values).endswith(tokens), (tokens, last_ai(values))


def test_cancel_through_tether_stops_the_run(agent):
    c = client()
    thread_id = c.threads.create()["thread_id"]
    run = c.runs.create(thread_id, GRAPH, input=user("slow:40:200"))
    time.sleep(1.5)
    c.runs.cancel(thread_id, run["run_id"])
    events = wait_terminal(thread_id, None)
    assert terminal_statuses(events) == ["cancelled"], describe(events)
    assert c.runs.get(thread_id, run["run_id"])["status"] == "interrupted"


# ---- 4. accounts -------------------------------------------------------------------------


def test_another_account_never_reaches_a_thread(agent):
    a, b = client(), client(key=agents.env("TETHER_API_KEY_B"))
    thread_id = a.threads.create()["thread_id"]
    assert turn(a, thread_id, FIRST, "wait") == "OK."

    for read in (lambda: b.threads.get(thread_id), lambda: b.threads.get_state(thread_id)):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            read()
        assert refused.value.response.status_code == 404, refused.value.response.text
    with pytest.raises(httpx.HTTPStatusError) as refused:
        b.runs.wait(thread_id, GRAPH, input=user(SECOND))
    assert refused.value.response.status_code == 404 and "zebra42" not in refused.value.response.text
    assert thread_id not in json.dumps(b.threads.search(limit=100))
    assert thread_id in json.dumps(a.threads.search(limit=100))

    # B's thread of the same id is its own, and A's is untouched.
    b.threads.create(thread_id=thread_id)
    assert turn(b, thread_id, SECOND, "wait") != "zebra42"
    assert turn(a, thread_id, SECOND, "wait") == "zebra42"
