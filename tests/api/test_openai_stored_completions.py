"""Stored completions (`store: true`) as the openai SDK lists, reads, updates and deletes them,
against the running product and the real engine; and the same endpoints' checks, read-all keys
and their audit, and the store's other side (the chat's delete), through Django's client."""

import uuid

import openai
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from audit.models import ConversationRead
from conversations.exchanges import api_exchange_store
from conversations.models import Conversation, StoredCompletion
from conversations.services import conversation_delete
from tests.api.test_openai_api_sdk import client, question, user
from tests.support.api_keys import bearer

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_lists_reads_updates_and_deletes_stored_completions_with_the_sdk(product_server):
    owner, other = user("sc"), user("sd")
    api, theirs = client(product_server, owner), client(product_server, other)
    model, run = settings.INFERENCE_MODEL_NAME, uuid.uuid4().hex[:8]
    made = [
        api.chat.completions.create(
            model=model,
            messages=question(f"Say {word}."),
            max_tokens=2,
            store=True,
            metadata={"run": run, "word": word},
        ).id
        for word in ("one", "two", "three")
    ]
    api.chat.completions.create(model=model, messages=question("Not kept."), max_tokens=2)

    # Auto-pagination: pages of two, oldest first, then newest first.
    listed = api.chat.completions.list(metadata={"run": run}, limit=2)
    assert listed.has_more and len(listed.data) == 2
    assert [c.id for c in listed] == made
    assert [c.id for c in api.chat.completions.list(limit=2, order="desc")] == made[::-1]
    assert [c.id for c in api.chat.completions.list(metadata={"run": run, "word": "two"})] == [made[1]]
    assert [c.id for c in api.chat.completions.list(model="other-model")] == []

    one = api.chat.completions.retrieve(made[0])
    assert one.model == model and one.choices[0].message.content and one.usage.completion_tokens
    assert one.metadata == {"run": run, "word": "one"}
    messages = api.chat.completions.messages.list(made[0])
    assert [(m.role, m.content) for m in messages] == [("system", "Answer briefly."), ("user", "Say one.")]

    assert api.chat.completions.update(made[0], metadata={"kept": "yes"}).metadata == {"kept": "yes"}
    assert [c.id for c in api.chat.completions.list(metadata={"kept": "yes"})] == [made[0]]

    # Another user's ids answer as if they did not exist, and change nothing.
    for call in (
        lambda: theirs.chat.completions.retrieve(made[1]),
        lambda: theirs.chat.completions.update(made[1], metadata={"x": "y"}),
        lambda: theirs.chat.completions.delete(made[1]),
        lambda: theirs.chat.completions.messages.list(made[1]),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert [c.id for c in theirs.chat.completions.list()] == []

    conversation_id = StoredCompletion.objects.get(completion_id=made[1]).conversation_id
    assert api.chat.completions.delete(made[1]).deleted
    assert not Conversation.objects.filter(pk=conversation_id).exists()
    with pytest.raises(openai.NotFoundError):
        api.chat.completions.retrieve(made[1])


def stored(owner, *, metadata=None, text="Hello") -> str:
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    api_exchange_store(
        user=owner,
        messages=[{"role": "user", "content": text}],
        model_name="m",
        answer={"content": "Hi", "finish_reason": "stop", "completion_tokens": 1},
        completion_id=completion_id,
        metadata=metadata,
    )
    return completion_id


@pytest.mark.parametrize(
    "metadata, message",
    [
        ({f"k{i}": "v" for i in range(17)}, "'metadata' holds at most 16 pairs"),
        ({"k" * 65: "v"}, "a 'metadata' key is at most 64 characters"),
        ({"k": "v" * 513}, "a 'metadata' value is at most 512 characters"),
        ({"k": 1}, "'metadata' must be an object whose values are strings"),
    ],
)
def test_it_refuses_metadata_past_openais_bounds(alice, metadata, message):
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}],
        "store": True,
        "metadata": metadata,
    }
    response = Client().post(
        "/v1/chat/completions", body, content_type="application/json", headers=bearer(alice, "openai")
    )
    assert response.status_code == 400
    assert response.json()["error"] | {"message": message} == response.json()["error"]
    assert response.json()["error"]["param"] == "metadata"
    completion_id = stored(alice)
    response = Client().post(
        f"/v1/chat/completions/{completion_id}",
        {"metadata": metadata},
        content_type="application/json",
        headers=bearer(alice, "openai"),
    )
    assert (response.status_code, response.json()["error"]["message"]) == (400, message)


def test_it_refuses_a_bad_list_query(alice):
    headers = bearer(alice, "openai")
    for query, param in (("limit=0", "limit"), ("limit=101", "limit"), ("order=up", "order")):
        response = Client().get(f"/v1/chat/completions?{query}", headers=headers)
        assert (response.status_code, response.json()["error"]["param"]) == (400, param)
    response = Client().get("/v1/chat/completions?after=chatcmpl-none", headers=headers)
    assert response.status_code == 400


def test_a_staff_key_with_store_read_reads_everyones_and_each_read_is_recorded(alice, bob):
    staff = get_user_model().objects.create_user(f"staff-{uuid.uuid4().hex[:6]}", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="read_all_conversations"))
    theirs = stored(alice, metadata={"tag": "a"})
    stored(bob)
    own_only = Client().get("/v1/chat/completions", headers=bearer(staff, "openai"))
    assert own_only.json()["data"] == []
    reading_all = bearer(staff, "openai", "store.read")
    listed = Client().get("/v1/chat/completions?metadata[tag]=a", headers=reading_all).json()
    assert [c["id"] for c in listed["data"]] == [theirs]
    assert Client().get(f"/v1/chat/completions/{theirs}", headers=reading_all).status_code == 200
    reads = ConversationRead.objects.filter(reader=staff, through=ConversationRead.Through.API)
    assert reads.count() == 2 and {r.owner_id for r in reads} == {alice.pk}
    # Reading is not changing: the owner's exchange is not the staff key's to delete.
    assert Client().delete(f"/v1/chat/completions/{theirs}", headers=reading_all).status_code == 404
    # A store.read key of a user without the permission sees its own only.
    assert (
        Client()
        .get("/v1/chat/completions", headers=bearer(bob, "openai", "store.read"))
        .json()["data"][0]["id"]
        != theirs
    )


def test_deleting_the_conversation_in_the_chat_deletes_the_stored_completion(alice):
    completion_id = stored(alice)
    conversation = StoredCompletion.objects.get(completion_id=completion_id).conversation
    headers = bearer(alice, "openai")
    assert Client().get(f"/v1/chat/completions/{completion_id}", headers=headers).status_code == 200
    conversation_delete(user=alice, conversation_id=conversation.pk)
    assert Client().get(f"/v1/chat/completions/{completion_id}", headers=headers).status_code == 404
