"""Questions in a chat retrieve from the conversation's collections over the real WebSocket, with the
real engine: the answer names its sources, a follow-up on the same passages is served from the prefix
cache, and nobody retrieves from a collection they cannot read."""

import asyncio

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile

from conversations import services as conversation_services
from httpkit.errors import Refusal
from knowledge import indexing, quotes, services
from knowledge.models import Collection, Quote
from tests.support.chat_client import collect_answer, open_chat, send
from tests.support.knowledge import HANDBOOK

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedding_engine")]


@pytest.fixture
def handbook(alice):
    collection = services.collection_create(owner=alice, name="Handbook")
    services.documents_add(
        collection=collection, uploads=[SimpleUploadedFile(n, t.encode()) for n, t in HANDBOOK.items()]
    )
    assert (
        asyncio.run(indexing.index_collection(collection_id=collection.pk, worker="t/1", seconds=60))
        == "done"
    )
    return collection


def conversation_for(user, *collections: Collection) -> int:
    conversation = conversation_services.conversation_create(
        user=user, settings_data={"max_tokens": 12, "temperature": 0}
    )
    quotes.conversation_collections_set(
        conversation_id=conversation.pk, user=user, collection_ids=[c.pk for c in collections]
    )
    return conversation.pk


def asked(ws, conversation: int, content: str = "How many vacation days do I get?") -> tuple[dict, dict]:
    """One question on an open socket: its started frame and its end."""
    send(ws, {"type": "chat.send", "conversation": conversation, "content": content})
    started, _, done = collect_answer(ws)
    assert done["type"] == "chat.done", done
    return started, done


def ask(ws_url: str, origin: str, user, conversation: int) -> tuple[dict, dict]:
    with open_chat(ws_url, origin, user) as ws:
        return asked(ws, conversation)


def test_an_answer_names_its_sources_and_a_follow_up_is_served_from_the_prefix_cache(
    ws_url, origin, alice, handbook
):
    conversation = conversation_for(alice, handbook)
    with open_chat(ws_url, origin, alice) as ws:
        started, done = asked(ws, conversation)
        sources = done["sources"]
        assert [s["n"] for s in sources] == list(range(1, len(sources) + 1))
        assert "leave.txt" in {s["document_name"] for s in sources}
        assert all(s["collection"] == handbook.pk for s in sources)
        assert Quote.objects.filter(message_id=started["user_message"], new=True).count() == len(sources)

        second, follow_up = asked(ws, conversation, "Do unused vacation days carry over?")
        # The same passages: cited by their numbers, quoted again nowhere, so the prompt only grew.
        assert {s["n"] for s in follow_up["sources"]} & {s["n"] for s in sources}
        assert not Quote.objects.filter(message_id=second["user_message"], new=True).exists()
        usage = follow_up["usage"]
        assert usage["cached_tokens"] >= 0.8 * usage["prompt_tokens"], usage


def test_a_question_never_retrieves_from_a_collection_its_asker_cannot_read(ws_url, origin, alice, handbook):
    bob = get_user_model().objects.create_user("bob", password="pw-bob-123456")
    with pytest.raises(Refusal) as refused:
        conversation_for(bob, handbook)
    assert refused.value.code == "not_found"
    # Shared with the site, attached, then taken back: bob's next question retrieves nothing.
    handbook.visibility = Collection.Visibility.SITE
    handbook.save()
    conversation = conversation_for(bob, handbook)
    handbook.visibility = Collection.Visibility.PRIVATE
    handbook.save()
    started, done = ask(ws_url, origin, bob, conversation)
    assert "sources" not in done
    assert not Quote.objects.filter(message_id=started["user_message"]).exists()


def test_a_groups_collection_answers_its_members_and_nobody_once_they_leave(ws_url, origin, alice, handbook):
    hr = Group.objects.create(name="hr")
    dana = get_user_model().objects.create_user("dana", password="pw-dana-123456")
    dana.groups.add(hr)
    handbook.visibility = Collection.Visibility.GROUPS
    handbook.save()
    handbook.groups.add(hr)
    conversation = conversation_for(dana, handbook)
    _, done = ask(ws_url, origin, dana, conversation)
    assert done["sources"] and {s["collection"] for s in done["sources"]} == {handbook.pk}
    # Out of the group: her next question in the same conversation retrieves nothing.
    dana.groups.remove(hr)
    started, done = ask(ws_url, origin, dana, conversation)
    assert "sources" not in done
    assert not Quote.objects.filter(message_id=started["user_message"]).exists()
