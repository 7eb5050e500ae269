"""Interop: LangChain and LlamaIndex through Tether, as apps written with them talk to an agent.

Tether sits in front of tests/fake_agent.py on AGENT_PORT, which this file owns. Each case
sends turn 1, kills the agent, sends turn 2 and starts the agent again 1.5 s later, while
the client's own default retries are waiting (Tether answers 502 with `Retry-After: 2`
while the agent is down, streamed or not). Each asserts turn 2's answer (it needs turn
1's history) and the log: every user message once on the session's history, no fork.

- LangChain `ChatOpenAI`: Chat Completions resending the history (streamed) in a session
  named by `x-session-id`; Responses with `use_previous_response_id` (only the new message
  and `previous_response_id`).
- LlamaIndex `OpenAIResponses(track_previous_responses=True)` (a bare-string input and
  `previous_response_id`) and `OpenAILike` (Chat Completions resending the history).

Runs in its own venv (tests/interop/requirements-openai-clients.txt: LlamaIndex pins
openai<3). Environment (gateway/tests/e2e/sdk_clients.rs sets it): TETHER_URL, AGENT_PORT.
"""

from __future__ import annotations

import threading
import uuid

import httpx
import pytest

import agents
from agents import FakeAgent, session_events, tether_url

_missing = agents.missing_env("TETHER_URL", "AGENT_PORT")
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"not set: {', '.join(_missing)}")

U1 = "My project is named zebra42. Reply with OK."
Q = "What is my project named?"


@pytest.fixture(scope="module")
def agent():
    a = FakeAgent(int(agents.env("AGENT_PORT"))).start()
    yield a
    a.kill()
    a.log_path.unlink(missing_ok=True)


def outage(agent, turn2):
    """Kills the agent, sends turn 2, and starts the agent again 1.5 s after sending."""
    agent.kill()
    back = threading.Timer(1.5, agent.start)
    back.start()
    try:
        return turn2()
    finally:
        back.join()


def user_messages(session: str) -> list[str]:
    return [
        e["Content"].get("text", "")
        for e in session_events(session)
        if e["EventType"] == "message" and e["Role"] == "user" and not e["Superseded"]
    ]


def forks(session: str) -> int:
    return sum(1 for e in session_events(session) if e["EventType"] == "session_fork")


def session_of_response(response_id: str) -> str:
    r = httpx.get(f"{tether_url()}/v1/responses/{response_id}", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["conversation"]["id"]


def test_langchain_chat_resending_history_streamed(agent):
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI

    s = f"lc-chat-{uuid.uuid4().hex[:12]}"
    llm = ChatOpenAI(model="fake", base_url=tether_url() + "/v1", api_key="unused",
                     default_headers={"x-session-id": s})
    history = [HumanMessage(U1)]
    history.append(llm.invoke(history))
    assert history[-1].content == "OK."
    history.append(HumanMessage(Q))
    answer = outage(agent, lambda: "".join(c.content for c in llm.stream(history)))
    assert answer == "zebra42"
    assert user_messages(s) == [U1, Q]
    assert forks(s) == 0


def test_langchain_responses_with_previous_response_id(agent):
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="fake", base_url=tether_url() + "/v1", api_key="unused",
                     use_responses_api=True, use_previous_response_id=True)
    history = [HumanMessage(U1)]
    first = llm.invoke(history)
    assert first.text == "OK."
    session = session_of_response(first.response_metadata["id"])
    history += [first, HumanMessage(Q)]
    second = outage(agent, lambda: llm.invoke(history))
    assert second.text == "zebra42"
    assert session_of_response(second.response_metadata["id"]) == session, "no fork from the retry"
    assert user_messages(session) == [U1, Q]


def test_llamaindex_openai_responses_tracking_previous_responses(agent):
    from llama_index.core.llms import ChatMessage
    from llama_index.llms.openai import OpenAIResponses

    # It looks the model's context size up by name: a name it knows, whatever the agent is.
    llm = OpenAIResponses(model="gpt-4o-mini", api_base=tether_url() + "/v1", api_key="unused",
                          track_previous_responses=True)
    first = llm.chat([ChatMessage(role="user", content=U1)])
    assert first.message.content == "OK."
    first_id = llm._previous_response_id
    session = session_of_response(first_id)
    second = outage(agent, lambda: llm.chat([ChatMessage(role="user", content=Q)]))
    assert second.message.content == "zebra42"
    assert llm._previous_response_id != first_id
    assert session_of_response(llm._previous_response_id) == session, "no fork from the retry"
    assert user_messages(session) == [U1, Q]


def test_llamaindex_openai_like_resending_history(agent):
    from llama_index.core.llms import ChatMessage
    from llama_index.llms.openai_like import OpenAILike

    s = f"li-like-{uuid.uuid4().hex[:12]}"
    llm = OpenAILike(model="fake", api_base=tether_url() + "/v1", api_key="unused",
                     is_chat_model=True, default_headers={"x-session-id": s})
    history = [ChatMessage(role="user", content=U1)]
    history.append(llm.chat(history).message)
    assert history[-1].content == "OK."
    history.append(ChatMessage(role="user", content=Q))
    second = outage(agent, lambda: llm.chat(history))
    assert second.message.content == "zebra42"
    assert user_messages(s) == [U1, Q]
    assert forks(s) == 0
