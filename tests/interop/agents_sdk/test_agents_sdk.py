"""Interop: the OpenAI Agents SDK (`openai-agents`) through Tether, as people write it.

Tether sits in front of tests/fake_agent.py (an `openai-chat` agent that remembers
nothing). Each test runs two turns of one conversation, kills the agent between them and
brings it back a moment late, so turn 2's first attempt meets a dead agent and the SDK's
default retries (on, as shipped) carry it. Each asserts turn 2's answer (the project name
from turn 1: only a conversation that survived the restart knows it) and the log: every
user message in the conversation's history once.

- `SQLiteSession`: the SDK keeps the history and resends all of it every turn.
- `previous_response_id`: the SDK sends only the new input and the last response's id.
- `conversation_id`: a conversation made with `client.conversations.create()` (Tether's
  Conversations API), only the new input each turn.
- `OpenAIConversationsSession`: the SDK keeps the history in `/v1/conversations/{id}/items`
  (served by Tether from its log) and resends it.
- `run_streamed`: the streamed run, in a conversation.

This file lives apart from tests/interop/ because the SDK's package is `agents`, the name
of the interop helpers module there; the helpers are loaded here under another name.

Environment (gateway/tests/e2e/agents_sdk.rs sets it): TETHER_URL, AGENT_PORT,
OPENAI_AGENTS_DISABLE_TRACING=1. Unset: every test here is skipped.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import time
import uuid
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "interop_helpers", Path(__file__).resolve().parents[1] / "agents.py"
)
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)

_missing = helpers.missing_env("TETHER_URL", "AGENT_PORT")
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"not set: {', '.join(_missing)}")

if not _missing:
    from agents import (
        Agent,
        OpenAIConversationsSession,
        OpenAIResponsesModel,
        Runner,
        SQLiteSession,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

FIRST = "My project is named zebra42. Reply with OK."
SECOND = "What is my project named?"

# Turn 2's first attempt goes out at once; the agent is back after this long, within the
# SDK's two default retries (about 0.5 s, then 1 s more).
BACK_AFTER = 0.3


@pytest.fixture(scope="module")
def fake():
    a = helpers.FakeAgent(int(helpers.env("AGENT_PORT"))).start()
    yield a
    a.kill()
    a.log_path.unlink(missing_ok=True)


def client() -> "AsyncOpenAI":
    # The SDK's defaults: two retries with its backoff.
    return AsyncOpenAI(base_url=helpers.tether_url() + "/v1", api_key="unused", timeout=60)


def assistant(c: "AsyncOpenAI") -> "Agent":
    return Agent(
        name="assistant",
        instructions="You are terse.",
        model=OpenAIResponsesModel(model="fake", openai_client=c),
    )


def restart_late(fake) -> threading.Thread:
    """Kills the agent now, and starts it again `BACK_AFTER` seconds later."""
    fake.kill()

    def back():
        time.sleep(BACK_AFTER)
        fake.start()

    t = threading.Thread(target=back)
    t.start()
    return t


def messages(session: str) -> list[tuple[str, str]]:
    """The user and assistant messages of a session's history (what a next turn sees)."""
    return [
        (e["Role"], e["Content"].get("text", ""))
        for e in helpers.session_events(session)
        if e["EventType"] == "message" and not e["Superseded"]
    ]


def assert_each_user_message_once(session: str) -> None:
    users = [text for role, text in messages(session) if role == "user"]
    assert users == [FIRST, SECOND], f"the history of {session}: {messages(session)}"


async def conversation_of(c: "AsyncOpenAI", response_id: str) -> str:
    """The Tether session a response was answered in."""
    response = await c.responses.retrieve(response_id)
    return response.conversation.id


async def two_turns(fake, turn) -> tuple:
    """Turn 1, the agent killed and back late, turn 2: both turns' results."""
    first = await turn(FIRST)
    back = restart_late(fake)
    try:
        second = await turn(SECOND)
    finally:
        back.join(30)
    return first, second


def test_sqlite_session(fake, tmp_path):
    async def main():
        c = client()
        session = SQLiteSession(f"sdk-{uuid.uuid4().hex[:8]}", str(tmp_path / "history.db"))
        first, second = await two_turns(
            fake, lambda text: Runner.run(assistant(c), text, session=session)
        )
        assert first.final_output == "OK."
        assert second.final_output == "zebra42"
        # The SDK resent the whole history as items; Tether answered in a session of its
        # own that holds each message once.
        assert_each_user_message_once(await conversation_of(c, second.last_response_id))

    asyncio.run(main())


def test_previous_response_id(fake):
    async def main():
        c = client()
        last: dict[str, str | None] = {"id": None}

        async def turn(text):
            result = await Runner.run(assistant(c), text, previous_response_id=last["id"])
            last["id"] = result.last_response_id
            return result

        first, second = await two_turns(fake, turn)
        assert second.final_output == "zebra42"
        s1 = await conversation_of(c, first.last_response_id)
        s2 = await conversation_of(c, second.last_response_id)
        assert s2 == s1, "turn 2 went on in turn 1's conversation"
        assert_each_user_message_once(s1)

    asyncio.run(main())


def test_conversation_id(fake):
    async def main():
        c = client()
        conversation = (await c.conversations.create()).id
        first, second = await two_turns(
            fake, lambda text: Runner.run(assistant(c), text, conversation_id=conversation)
        )
        assert first.final_output == "OK."
        assert second.final_output == "zebra42"
        assert await conversation_of(c, second.last_response_id) == conversation
        assert_each_user_message_once(conversation)

    asyncio.run(main())


def test_openai_conversations_session(fake):
    async def main():
        c = client()
        session = OpenAIConversationsSession(openai_client=c)
        first, second = await two_turns(
            fake, lambda text: Runner.run(assistant(c), text, session=session)
        )
        assert first.final_output == "OK."
        assert second.final_output == "zebra42"
        listed = [i async for i in c.conversations.items.list(session.session_id, order="asc")]
        said = [
            (i.role, "".join(part.text for part in i.content))
            for i in listed
            if i.type == "message"
        ]
        assert said == [
            ("user", FIRST),
            ("assistant", "OK."),
            ("user", SECOND),
            ("assistant", "zebra42"),
        ]
        # The conversation is a Tether session: its log holds each message once.
        assert_each_user_message_once(session.session_id)

    asyncio.run(main())


def test_run_streamed(fake):
    async def main():
        c = client()
        conversation = (await c.conversations.create()).id

        async def turn(text):
            result = Runner.run_streamed(assistant(c), text, conversation_id=conversation)
            async for _ in result.stream_events():
                pass
            return result

        first, second = await two_turns(fake, turn)
        assert first.final_output == "OK."
        assert second.final_output == "zebra42"
        assert await conversation_of(c, second.last_response_id) == conversation
        assert_each_user_message_once(conversation)

    asyncio.run(main())
