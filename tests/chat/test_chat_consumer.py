"""The chat consumer's handling of bad frames and faults, with a fault-injecting engine."""

import asyncio
import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model

from chat import consumers
from chat.consumers import ChatConsumer
from conversations.models import Conversation, Message
from inference.client import EngineError
from tests.support.consumer_client import connected, until_closed
from tests.support.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def users():
    User = get_user_model()
    return User.objects.create_user("alice", password="x" * 12), User.objects.create_user(
        "bob", password="y" * 12
    )


@pytest.fixture
def engine(monkeypatch):
    fake = FakeEngine(["Hel", "lo", "!"])
    monkeypatch.setattr(consumers, "engine_client", lambda: fake)
    return fake


async def error_for(communicator, raw) -> dict:
    if isinstance(raw, bytes):
        await communicator.send_to(bytes_data=raw)
    else:
        await communicator.send_to(text_data=raw if isinstance(raw, str) else json.dumps(raw))
    frame = await communicator.receive_json_from(timeout=5)
    assert frame["type"] == "chat.error"
    return frame


@pytest.mark.parametrize(
    "raw, code",
    [
        ("{not json", "invalid_json"),
        ("[" * 20_000, "invalid_json"),  # deeper than the parser goes
        (b"\x00\x01", "binary_frame"),
        ("[1, 2]", "invalid_frame"),
        ({"content": "no type"}, "invalid_frame"),
        ({"type": "chat.dance"}, "unknown_type"),
        ({"type": "chat.send", "content": "hi"}, "invalid_field"),
        ({"type": "chat.send", "conversation": None}, "invalid_field"),
        ({"type": "chat.send", "conversation": None, "content": "   "}, "invalid_field"),
        ({"type": "chat.send", "conversation": "7", "content": "hi"}, "invalid_field"),
        ({"type": "chat.send", "conversation": True, "content": "hi"}, "invalid_field"),
        ({"type": "chat.stop"}, "invalid_field"),
        ({"type": "chat.stop", "message": 999999}, "not_found"),
        # Ids and positions past the database's 64-bit range: refused, not echoed into a frame.
        ({"type": "chat.resume", "message": 2**64}, "invalid_field"),
        ({"type": "chat.stop", "message": 2**64}, "invalid_field"),
        ({"type": "chat.continue", "message": 2**64}, "invalid_field"),
        ({"type": "chat.send", "conversation": 2**63, "content": "hi"}, "invalid_field"),
        ({"type": "chat.resume", "message": 1, "after": 2**63}, "invalid_field"),
    ],
)
async def test_it_answers_a_malformed_frame_with_an_error_and_stays_usable(users, engine, raw, code):
    communicator = await connected(users[0])
    frame = await error_for(communicator, raw)
    assert frame["code"] == code
    assert frame["detail"]
    assert await Message.objects.acount() == 0
    await communicator.send_json_to({"type": "chat.send", "conversation": None, "content": "hi"})
    frames = await until_closed(communicator)
    assert frames[-1]["type"] == "chat.done"
    await communicator.disconnect()


async def test_it_refuses_content_over_the_configured_maximum(users, engine, settings):
    settings.CHAT_MAX_CONTENT_CHARS = 10
    communicator = await connected(users[0])
    frame = await error_for(communicator, {"type": "chat.send", "conversation": None, "content": "x" * 11})
    assert frame["code"] == "too_large"
    assert await Message.objects.acount() == 0
    await communicator.disconnect()


async def test_it_treats_another_users_conversation_as_missing_and_writes_nothing(users, engine):
    alice, bob = users
    theirs = await Conversation.objects.acreate(owner=bob, title="bob's")
    communicator = await connected(alice)
    frame = await error_for(
        communicator, {"type": "chat.send", "conversation": theirs.pk, "content": "let me in"}
    )
    assert frame["code"] == "not_found"
    assert await Message.objects.acount() == 0
    assert engine.requests == []
    await communicator.disconnect()


async def test_it_does_not_stop_another_users_message(users, engine):
    alice, bob = users
    theirs = await Conversation.objects.acreate(owner=bob)
    message = await Message.objects.acreate(
        conversation=theirs, role="assistant", status=Message.Status.GENERATING
    )
    communicator = await connected(alice)
    frame = await error_for(communicator, {"type": "chat.stop", "message": message.pk})
    assert frame["code"] == "not_found"
    await communicator.disconnect()


async def test_it_refuses_anonymous_users():
    from django.contrib.auth.models import AnonymousUser

    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat/")
    communicator.scope["user"] = AnonymousUser()
    connected, _ = await communicator.connect()
    assert not connected


async def test_it_stores_an_engine_failure_as_interrupted_with_its_code_and_partial_text(
    users, monkeypatch, settings
):
    settings.CHAT_ENGINE_RESUME_SECONDS = 0  # the answer does not wait for the engine to come back
    fake = FakeEngine(["par", "tial"], fail_with=EngineError("gone", code="engine_unavailable"))
    monkeypatch.setattr(consumers, "engine_client", lambda: fake)
    communicator = await connected(users[0])
    await communicator.send_json_to({"type": "chat.send", "conversation": None, "content": "hi"})
    frames = await until_closed(communicator)
    assert [f["type"] for f in frames] == ["chat.started", "chat.token", "chat.token", "chat.error"]
    assert frames[-1]["code"] == "engine_unavailable"
    stored = await Message.objects.aget(pk=frames[0]["message"])
    assert (stored.status, stored.error_code, stored.content) == (
        "interrupted",
        "engine_unavailable",
        "partial",
    )
    await communicator.disconnect()


async def test_it_refuses_a_second_answer_in_the_same_conversation_while_one_runs(users, monkeypatch):
    fake = FakeEngine(["a"], hang=True)
    monkeypatch.setattr(consumers, "engine_client", lambda: fake)
    communicator = await connected(users[0])
    await communicator.send_json_to({"type": "chat.send", "conversation": None, "content": "hi"})
    started = await communicator.receive_json_from(timeout=5)
    await communicator.receive_json_from(timeout=5)
    frame = await error_for(
        communicator, {"type": "chat.send", "conversation": started["conversation"], "content": "again"}
    )
    assert frame["code"] == "conversation_busy"
    await communicator.send_json_to({"type": "chat.stop", "message": started["message"]})
    done = await communicator.receive_json_from(timeout=5)
    assert (done["type"], done["status"]) == ("chat.done", "stopped")
    await communicator.disconnect()


async def test_it_says_the_engine_is_starting_when_it_cannot_be_reached_while_it_loads(users, monkeypatch):
    from enginehost import state

    fake = FakeEngine([], fail_with=EngineError("The engine is not reachable.", code="engine_unavailable"))
    monkeypatch.setattr(consumers, "engine_client", lambda: fake)
    await database_sync_to_async(state.publish)("starting", "sizing its KV cache and warming up")
    communicator = await connected(users[0])
    try:
        await communicator.send_json_to({"type": "chat.send", "conversation": None, "content": "Hi"})
        closing = (await until_closed(communicator))[-1]
    finally:
        await communicator.disconnect()
        await database_sync_to_async(state.publish)("serving", "")
    assert closing["code"] == "engine_unavailable"
    assert (
        closing["detail"]
        == "The engine is starting: sizing its KV cache and warming up; try again in a moment."
    )


async def test_a_frame_for_a_socket_its_client_closed_is_not_logged_as_an_error(caplog):
    from autobahn.exception import Disconnected

    async def fails(error):
        raise error

    consumer = ChatConsumer()
    consumer.followers = {}
    for error in (Disconnected("Attempt to send on a closed protocol"), ValueError("a bug")):
        task = asyncio.ensure_future(fails(error))
        await asyncio.wait([task])
        consumer._forgotten(1, task)
    errors = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert errors == ["forwarding answer 1 failed"]
