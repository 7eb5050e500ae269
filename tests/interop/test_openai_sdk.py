"""Interop tests: the official `openai` Python SDK against a RUNNING Tether.

Tether must sit in front of tests/fake_agent.py, an agent that keeps no memory at all:
it answers only from the history inside each request. So whenever a second turn here
remembers the first, it is Tether that kept the conversation and sent it again.

Environment:
  TETHER_URL      Tether's base URL, e.g. http://127.0.0.1:8080 (OpenAI routes under /v1).
                  Unset: every test here is skipped.
  TETHER_API_KEY  the caller's credential for Tether, if it requires one (default "unused").

The Rust end-to-end harness and the CI script start Tether and the fake agent and set
TETHER_URL. tests/interop/test_fake_agent.py proves the same SDK calls parse against the
fake agent directly.
"""

from __future__ import annotations

import os

import openai
import pytest
from openai import OpenAI

TETHER_URL = os.environ.get("TETHER_URL", "").rstrip("/")

pytestmark = pytest.mark.skipif(
    not TETHER_URL,
    reason="TETHER_URL is not set: start Tether in front of tests/fake_agent.py and export TETHER_URL",
)

FIRST_TURN = "My project is named zebra42. Reply with OK."
SECOND_TURN = "What is my project named? Reply with just the name."


@pytest.fixture
def client() -> OpenAI:
    # No retries: a retried request would be a second run in Tether's log.
    return OpenAI(
        base_url=TETHER_URL + "/v1",
        api_key=os.environ.get("TETHER_API_KEY", "unused"),
        max_retries=0,
        timeout=60,
    )


def conversation_id(raw) -> str:
    """The session id of a Responses call made through `with_raw_response`.

    Tether answers with `conversation: {"id": …}`; older SDK models may not declare the
    field, and the `x-session-id` header carries the same id either way.
    """
    resp = raw.parse()
    conversation = getattr(resp, "conversation", None)
    if conversation is None:
        conversation = (resp.model_extra or {}).get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    elif conversation is not None and not isinstance(conversation, str):
        conversation = conversation.id
    conversation = conversation or raw.headers.get("x-session-id")
    assert conversation, "Tether named no conversation (neither `conversation.id` nor x-session-id)"
    return conversation


# --------------------------------------------------------------------------------------
# Responses
# --------------------------------------------------------------------------------------


def test_responses_non_streaming(client):
    resp = client.responses.create(model="fake", input="hello through tether")
    assert resp.status == "completed"
    assert resp.output_text == "You said: hello through tether"


def test_responses_streaming(client):
    events = list(client.responses.create(model="fake", input="stream through tether please", stream=True))
    types = [event.type for event in events]
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert types[0] == "response.created"
    assert types[-1] == "response.completed"
    assert len(deltas) >= 3
    assert types.index("response.created") < types.index("response.output_text.delta")
    numbers = [event.sequence_number for event in events]
    assert numbers == sorted(set(numbers)), "sequence_number must strictly increase"
    assert events[-1].response.output_text == "".join(deltas) == "You said: stream through tether please"


def test_responses_conversation_continues(client):
    raw = client.responses.with_raw_response.create(model="fake", input=FIRST_TURN)
    assert raw.parse().output_text == "OK."
    session = conversation_id(raw)

    second = client.responses.create(model="fake", conversation=session, input=SECOND_TURN)
    assert "zebra42" in second.output_text


def test_responses_streamed_conversation_continues(client):
    raw = client.responses.with_raw_response.create(model="fake", input=FIRST_TURN)
    session = conversation_id(raw)

    events = list(client.responses.create(model="fake", conversation=session, input=SECOND_TURN, stream=True))
    assert events[-1].type == "response.completed"
    assert "zebra42" in events[-1].response.output_text


def test_responses_previous_response_id_continues(client):
    first = client.responses.create(model="fake", input=FIRST_TURN)
    assert first.output_text == "OK."

    second = client.responses.create(model="fake", previous_response_id=first.id, input=SECOND_TURN)
    assert "zebra42" in second.output_text


def test_responses_tool_call_round_trip(client):
    raw = client.responses.with_raw_response.create(model="fake", input="please use tool:lookup")
    call = raw.parse().output[-1]
    assert (call.type, call.name, call.call_id) == ("function_call", "lookup", "call_1")
    session = conversation_id(raw)

    answer = client.responses.create(
        model="fake",
        conversation=session,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "42"}],
    )
    assert answer.output_text == "tool said: 42"


# --------------------------------------------------------------------------------------
# Chat Completions
# --------------------------------------------------------------------------------------


def test_chat_non_streaming(client):
    completion = client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi via tether"}])
    assert completion.choices[0].message.content == "You said: hi via tether"
    assert completion.choices[0].finish_reason == "stop"


def test_chat_streaming(client):
    stream = client.chat.completions.create(
        model="fake", messages=[{"role": "user", "content": "chat stream via tether"}], stream=True
    )
    chunks = list(stream)  # ends cleanly, without raising
    contents = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(contents) >= 3
    assert "".join(contents) == "You said: chat stream via tether"
    assert finishes == ["stop"]


def test_chat_streamed_tool_call(client):
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    with client.chat.completions.stream(
        model="fake", messages=[{"role": "user", "content": "use tool:lookup"}], tools=tools
    ) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == ("call_1", "lookup", '{"x": 1}')


def test_chat_session_continues(client):
    raw = client.chat.completions.with_raw_response.create(
        model="fake", messages=[{"role": "user", "content": FIRST_TURN}]
    )
    assert raw.parse().choices[0].message.content == "OK."
    session = raw.headers.get("x-session-id")
    assert session, "Tether must name the session in the x-session-id response header"

    second = client.chat.completions.create(
        model="fake",
        messages=[{"role": "user", "content": SECOND_TURN}],
        extra_body={"session_id": session},
    )
    assert "zebra42" in second.choices[0].message.content


# --------------------------------------------------------------------------------------
# Errors from the agent
# --------------------------------------------------------------------------------------


def test_agent_error_non_streaming(client):
    with pytest.raises(openai.APIError):
        client.responses.create(model="fake", input="please error")


def test_agent_error_streaming(client):
    # Tether may fail before the stream starts (APIStatusError) or inside it (APIError).
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(
            model="fake", messages=[{"role": "user", "content": "please error"}], stream=True
        ):
            pass
