"""An answer's start runs to its end once called (chat.generation.answer_start): a socket that closes
while its turn is being stored, and whose consumer the server then cancels, leaves an answer that
runs and that a reload follows, not a stored question whose answer row nothing generates."""

import asyncio
import threading

import pytest

from answers import admission
from chat.generation import answer_start, follow
from conversations import turns
from conversations.models import Message
from redisconn import client as redis_client
from redisconn import keys
from tests.support.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)


async def test_an_answer_whose_caller_is_cancelled_while_its_turn_is_stored_runs_and_is_followed(alice):
    stored, go_on = threading.Event(), threading.Event()

    def slow_turn_start(**arguments) -> turns.Turn:
        """The turn stored, then a database slow to return it (a process past its knee)."""
        turn = turns.chat_turn_start(**arguments)
        stored.set()
        go_on.wait(10)
        return turn

    r = redis_client()
    held = await admission.active_count(r)  # other tests' answers may still hold theirs
    caller = asyncio.create_task(
        answer_start(
            user=alice,
            engine=FakeEngine(["Still ", "here."]),
            start_turn=slow_turn_start,
            conversation_id=None,
            content="hi",
        )
    )
    assert await asyncio.to_thread(stored.wait, 10)
    caller.cancel()  # the socket closed, and the server cancelled its consumer
    with pytest.raises(asyncio.CancelledError):
        await caller
    go_on.set()

    message = await Message.objects.filter(conversation__owner=alice, role="assistant").aget()
    for _ in range(1000):  # the start opens the answer's stream once its turn is back
        if await r.exists(keys.chat_stream(message.pk)):
            break
        await asyncio.sleep(0.01)
    # A reload follows the answer to its end.
    frames = [frame async for frame in follow(message.pk)]
    assert (frames[-1]["type"], frames[-1]["content"]) == ("chat.done", "Still here.")
    await message.arefresh_from_db()
    assert (message.status, message.content) == ("complete", "Still here.")
    assert await admission.active_count(r) <= held  # its slot given back
