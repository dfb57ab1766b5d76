"""chat.regenerate and chat.edit over the WebSocket: new versions of a turn, answered like a send."""

import pytest
from django.contrib.auth import get_user_model

from chat import consumers
from conversations.models import Conversation, Message
from tests.support.consumer_client import connected
from tests.support.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def engine(monkeypatch):
    fake = FakeEngine(["An", "swer"])
    monkeypatch.setattr(consumers, "engine_client", lambda: fake)
    return fake


async def answer(communicator, frame: dict) -> list[dict]:
    await communicator.send_json_to(frame)
    frames = [await communicator.receive_json_from(timeout=5)]
    while frames[-1]["type"] not in {"chat.done", "chat.error"}:
        frames.append(await communicator.receive_json_from(timeout=5))
    return frames


async def test_it_regenerates_and_edits_as_new_versions_sharing_the_history(alice, engine):
    communicator = await connected(alice)
    first = await answer(communicator, {"type": "chat.send", "conversation": None, "content": "One"})
    started = first[0]
    conversation = started["conversation"]
    second = await answer(communicator, {"type": "chat.send", "conversation": conversation, "content": "Two"})

    again = await answer(communicator, {"type": "chat.regenerate", "message": second[0]["message"]})
    assert [f["type"] for f in again] == ["chat.started", "chat.token", "chat.token", "chat.done"]
    assert again[0]["user_message"] == second[0]["user_message"]
    regenerated = await Message.objects.aget(pk=again[0]["message"])
    assert regenerated.parent_id == second[0]["user_message"]
    assert [m["content"] for m in engine.requests[-1].messages[1:]] == ["One", "Answer", "Two"]
    # Every turn of one conversation asks for the same engine replica.
    assert {r.affinity for r in engine.requests} == {f"conversation-{conversation}"}

    edited = await answer(
        communicator, {"type": "chat.edit", "message": second[0]["user_message"], "content": "Zwei"}
    )
    assert edited[-1]["type"] == "chat.done"
    copy = await Message.objects.aget(pk=edited[0]["user_message"])
    assert (copy.content, copy.parent_id) == ("Zwei", started["message"])
    assert [m["content"] for m in engine.requests[-1].messages[1:]] == ["One", "Answer", "Zwei"]
    shown = await Conversation.objects.aget(pk=conversation)
    assert shown.current_leaf_id == edited[0]["message"]

    # A send with an explicit parent continues another version.
    later = await answer(
        communicator,
        {
            "type": "chat.send",
            "conversation": conversation,
            "content": "Three",
            "parent": again[0]["message"],
        },
    )
    assert [m["content"] for m in engine.requests[-1].messages[1:]] == [
        "One",
        "Answer",
        "Two",
        "Answer",
        "Three",
    ]
    assert (await Message.objects.aget(pk=later[0]["user_message"])).parent_id == again[0]["message"]
    await communicator.disconnect()


@pytest.mark.parametrize(
    "frame, code",
    [
        ({"type": "chat.regenerate"}, "invalid_field"),
        ({"type": "chat.regenerate", "message": 10**9}, "not_found"),
        ({"type": "chat.edit", "message": 10**9, "content": "x"}, "not_found"),
        ({"type": "chat.edit", "message": "USER", "content": "  "}, "invalid_field"),
        ({"type": "chat.regenerate", "message": "USER"}, "invalid_field"),
        ({"type": "chat.edit", "message": "ANSWER", "content": "x"}, "invalid_field"),
        ({"type": "chat.regenerate", "message": "THEIRS"}, "not_found"),
    ],
)
async def test_it_refuses_a_bad_regenerate_or_edit_and_stores_nothing(alice, engine, frame, code):
    bob = await get_user_model().objects.acreate(username="bob")
    communicator = await connected(alice)
    done = await answer(communicator, {"type": "chat.send", "conversation": None, "content": "One"})
    theirs = await Conversation.objects.acreate(owner=bob)
    their_answer = await Message.objects.acreate(conversation=theirs, role="assistant", content="x")
    ids = {"USER": done[0]["user_message"], "ANSWER": done[0]["message"], "THEIRS": their_answer.pk}
    if frame.get("message") in ids:
        frame = {**frame, "message": ids[frame["message"]]}
    count = await Message.objects.acount()
    await communicator.send_json_to(frame)
    error = await communicator.receive_json_from(timeout=5)
    assert (error["type"], error["code"]) == ("chat.error", code)
    assert await Message.objects.acount() == count
    await communicator.disconnect()
