"""chat.continue: an answer cut off at its length limit grows in place, over the WebSocket and the SSE
stream, and a process that takes a continued answer over keeps the text it had before."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model

from answers import takeover
from chat import consumers, streams
from chat.generation import Generation
from conversations import turns
from conversations.models import Conversation, Message
from redisconn import client as redis_client
from tests.chat.test_answer_takeover import died, tokens
from tests.support.consumer_client import connected, first_frames, until_closed
from tests.support.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def engine(monkeypatch):
    engines = {"now": FakeEngine(["Once ", "upon "], finish_reason="length")}
    monkeypatch.setattr(consumers, "engine_client", lambda: engines["now"])
    return engines


async def asked(communicator, frame: dict) -> list[dict]:
    await communicator.send_json_to(frame)
    return await until_closed(communicator)


async def test_it_continues_a_cut_off_answer_in_place_from_its_text_so_far(alice, engine):
    communicator = await connected(alice)
    cut = await asked(communicator, {"type": "chat.send", "conversation": None, "content": "A tale"})
    assert (cut[-1]["finish_reason"], cut[-1]["content"]) == ("length", "Once upon ")
    started, answer_id = cut[0], cut[0]["message"]
    count = await Message.objects.acount()

    engine["now"] = FakeEngine(["a ", "time."])
    more = await asked(communicator, {"type": "chat.continue", "message": answer_id})
    assert more[0] == {**started, "type": "chat.started"}  # the same answer and question
    assert tokens(more) == [(0, "a "), (1, "time.")]
    assert (more[-1]["status"], more[-1]["finish_reason"]) == ("complete", "stop")
    assert more[-1]["content"] == "Once upon a time."
    # The engine carries the partial answer on, with a budget of its own.
    [request] = engine["now"].requests
    assert request.continue_final_message
    assert request.messages[-1] == {"role": "assistant", "content": "Once upon "}
    assert request.messages[-2] == {"role": "user", "content": "A tale"}
    assert request.max_tokens == settings.CHAT_MAX_TOKENS
    stored = await Message.objects.aget(pk=answer_id)
    assert (stored.status, stored.finish_reason, stored.content) == ("complete", "stop", "Once upon a time.")
    assert await Message.objects.acount() == count
    assert (await Conversation.objects.aget(pk=started["conversation"])).current_leaf_id == answer_id

    # Only a cut-off answer continues.
    refused = await asked(communicator, {"type": "chat.continue", "message": answer_id})
    assert [(f["type"], f["code"]) for f in refused] == [("chat.error", "not_continuable")]
    await communicator.disconnect()


@pytest.mark.parametrize(
    "which, code", [("QUESTION", "invalid_field"), ("THEIRS", "not_found"), ("STOPPED", "not_continuable")]
)
async def test_it_refuses_to_continue_anything_else_and_changes_nothing(alice, engine, which, code):
    bob = await get_user_model().objects.acreate(username="bob")
    communicator = await connected(alice)
    cut = await asked(communicator, {"type": "chat.send", "conversation": None, "content": "A tale"})
    theirs = await Conversation.objects.acreate(owner=bob)
    their_answer = await Message.objects.acreate(
        conversation=theirs, role="assistant", content="x", finish_reason="length"
    )
    await Message.objects.filter(pk=cut[0]["message"]).aupdate(
        **({"status": "stopped", "finish_reason": "abort"} if which == "STOPPED" else {})
    )
    ids = {"QUESTION": cut[0]["user_message"], "THEIRS": their_answer.pk, "STOPPED": cut[0]["message"]}
    before = [m async for m in Message.objects.order_by("pk").values()]
    refused = await asked(communicator, {"type": "chat.continue", "message": ids[which]})
    assert [(f["type"], f["code"]) for f in refused] == [("chat.error", code)]
    assert [m async for m in Message.objects.order_by("pk").values()] == before
    await communicator.disconnect()


async def test_a_continued_answer_taken_over_keeps_the_text_it_had_before(alice):
    turn = await sync_to_async(turns.chat_turn_start)(user=alice, conversation_id=None, content="A tale")
    await Message.objects.filter(pk=turn.assistant_message_id).aupdate(
        content="Once upon ", status="complete", finish_reason="length"
    )
    turn = await sync_to_async(turns.chat_turn_continue)(user=alice, message_id=turn.assistant_message_id)
    assert turn.prefix == "Once upon "
    owner = await streams.open_stream(redis_client(), turn.assistant_message_id, user_id=alice.pk)
    gate = asyncio.Event()
    dead = Generation(turn, user_id=alice.pk, engine=FakeEngine(["a ", gate], hang=True), owner=owner)
    dead.start()
    assert len([f async for f in first_frames(dead.frames_after(-1), 1)]) == 1  # written
    await died(dead)
    heir = FakeEngine(["time."])
    [continued] = await takeover.scan(redis_client(), heir)
    await asyncio.wait_for(continued.task, 10)
    [request] = heir.requests
    assert request.messages[-1] == {"role": "assistant", "content": "Once upon a "}
    # The stream's own token counts against the continuation's budget, not the text before it.
    assert request.max_tokens == settings.CHAT_MAX_TOKENS - 1
    frames = [frame async for frame in streams.follow(redis_client(), dead.message_id)]
    assert tokens(frames) == [(0, "a "), (1, "time.")]
    assert frames[-1]["content"] == "Once upon a time."
    stored = await Message.objects.aget(pk=dead.message_id)
    assert (stored.status, stored.content) == ("complete", "Once upon a time.")


def test_two_continues_of_one_answer_at_once_start_it_once(alice):
    """The first continue holds its transaction open; the second, meanwhile, must wait for it and
    then see the answer generating, not read the old status and start it a second time."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection, connections, transaction

    from httpkit.errors import Refusal

    if not connection.features.has_select_for_update:
        pytest.skip("SQLite serialises writers itself; the row lock is PostgreSQL's")
    turn = turns.chat_turn_start(user=alice, conversation_id=None, content="A tale")
    Message.objects.filter(pk=turn.assistant_message_id).update(
        content="Once upon ", status="complete", finish_reason="length"
    )
    first_in, second_sent = threading.Event(), threading.Event()

    def first():
        try:
            with transaction.atomic():
                turns.chat_turn_continue(user=alice, message_id=turn.assistant_message_id)
                first_in.set()
                second_sent.wait(10)
                threading.Event().wait(0.5)  # the second is inside by now, at the lock or past it
        finally:
            connections.close_all()

    def second():
        first_in.wait(10)
        second_sent.set()
        try:
            turns.chat_turn_continue(user=alice, message_id=turn.assistant_message_id)
            return "started"
        except Refusal as refusal:
            return refusal.code
        finally:
            connections.close_all()

    with ThreadPoolExecutor(2) as pool:
        done = pool.submit(first)
        outcome = pool.submit(second).result(30)
        done.result(30)
    assert outcome == "not_continuable"
