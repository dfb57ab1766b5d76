"""The read-only store API: tokens or session, own conversations only, staff see all."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.utils import timezone

from audit.models import ConversationRead
from conversations import services, turns
from conversations.models import Conversation, Message
from tests.support.api_keys import bearer

pytestmark = pytest.mark.django_db


def conversations(owner, n: int) -> list[int]:
    return [
        turns.chat_turn_start(user=owner, conversation_id=None, content=f"q{i}").conversation_id
        for i in range(n)
    ]


def test_it_refuses_anonymous_requests_and_tokens_without_the_scope(client, alice):
    response = client.get("/api/conversations/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"
    assert client.get("/api/conversations/", headers=bearer(alice, "chat")).status_code == 401
    assert (
        client.get("/api/conversations/", headers={"Authorization": "Bearer chat_nope_nope"}).status_code
        == 401
    )


def test_it_pages_the_users_own_conversations_newest_first(client, alice, bob):
    mine = conversations(alice, 5)
    conversations(bob, 2)
    headers = bearer(alice, "store.read")
    first = client.get("/api/conversations/?page_size=2", headers=headers).json()
    assert first["count"] == 5
    assert [c["id"] for c in first["results"]] == mine[::-1][:2]
    assert first["previous"] is None
    second = client.get(first["next"], headers=headers).json()
    third = client.get(second["next"], headers=headers).json()
    assert [c["id"] for c in second["results"] + third["results"]] == mine[::-1][2:]
    assert third["next"] is None
    assert client.get("/api/conversations/?page=9&page_size=2", headers=headers).status_code == 404
    assert (
        client.get("/api/conversations/?page=zero", headers=headers).json()["error"]["code"]
        == "invalid_field"
    )


def test_it_filters_by_search_and_since(client, alice):
    old, new = conversations(alice, 2)
    Conversation.objects.filter(pk=old).update(updated_at=timezone.now() - timedelta(days=10))
    services.conversation_rename(user=alice, conversation_id=new, title="Penguins")
    headers = bearer(alice, "store.read")
    since = (timezone.now() - timedelta(days=1)).date().isoformat()
    assert [
        c["id"] for c in client.get(f"/api/conversations/?since={since}", headers=headers).json()["results"]
    ] == [new]
    assert [
        c["id"] for c in client.get("/api/conversations/?search=q0", headers=headers).json()["results"]
    ] == [old]
    assert [
        c["id"] for c in client.get("/api/conversations/?search=PENGUIN", headers=headers).json()["results"]
    ] == [new]
    response = client.get("/api/conversations/?since=yesterday", headers=headers)
    assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_field")


def test_it_lets_readers_of_all_conversations_read_everyone_and_records_it(client, alice, bob):
    theirs = conversations(bob, 1)[0]
    conversations(alice, 1)
    staff = get_user_model().objects.create_user("root", password="pw-root-12345", is_staff=True)
    # is_staff alone reads its own conversations only, the sidebar's search included.
    assert client.get("/api/conversations/", headers=bearer(staff, "store.read")).json()["count"] == 0
    assert client.get("/api/conversations/?all=true", headers=bearer(staff, "store.read")).status_code == 403
    assert client.get(f"/api/conversations/{theirs}/", headers=bearer(staff, "store.read")).status_code == 404
    staff.user_permissions.add(Permission.objects.get(codename="read_all_conversations"))
    as_staff = bearer(get_user_model().objects.get(pk=staff.pk), "store.read")
    assert client.get("/api/conversations/", headers=as_staff).json()["count"] == 0
    assert client.get("/api/conversations/?all=true", headers=as_staff).json()["count"] == 2
    only_bob = client.get("/api/conversations/?user=bob", headers=as_staff).json()
    assert [(c["id"], c["owner"]) for c in only_bob["results"]] == [(theirs, "bob")]
    assert client.get(f"/api/conversations/{theirs}/", headers=as_staff).status_code == 200
    reads = list(
        ConversationRead.objects.order_by("id").values_list(
            "reader_name", "owner__username", "conversation_id", "through"
        )
    )
    assert reads == [
        ("root", None, None, "store_list"),
        ("root", "bob", None, "store_list"),
        ("root", "bob", theirs, "store_detail"),
    ]
    as_alice = bearer(alice, "store.read")
    response = client.get("/api/conversations/?user=bob", headers=as_alice)
    assert (response.status_code, response.json()["error"]["code"]) == (403, "forbidden")
    response = client.get(f"/api/conversations/{theirs}/", headers=as_alice)
    assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")


def test_it_returns_every_version_with_parents_and_figures(client, alice):
    turn = turns.chat_turn_start(user=alice, conversation_id=None, content="Hi")
    turns.message_finish(
        message_id=turn.assistant_message_id,
        content="Hello",
        status="complete",
        finish_reason="stop",
        prompt_tokens=20,
        cached_tokens=16,
        completion_tokens=2,
        ttft_ms=80.5,
        duration_ms=120.0,
    )
    again = turns.chat_turn_regenerate(user=alice, message_id=turn.assistant_message_id)
    client.force_login(alice)
    detail = client.get(f"/api/conversations/{turn.conversation_id}/").json()
    assert detail["current_leaf"] == again.assistant_message_id
    by_id = {m["id"]: m for m in detail["messages"]}
    assert len(by_id) == 3
    assert by_id[turn.assistant_message_id]["parent"] == turn.user_message_id
    assert by_id[again.assistant_message_id]["parent"] == turn.user_message_id
    assert by_id[turn.assistant_message_id]["usage"] == {
        "prompt_tokens": 20,
        "cached_tokens": 16,
        "completion_tokens": 2,
    }
    assert by_id[turn.assistant_message_id]["ttft_ms"] == 80.5
    assert detail["settings"]["system_prompt"]
    assert Message.objects.count() == 3


def test_it_filters_by_archived_and_gives_each_search_result_its_snippet(client, alice):
    [kept] = conversations(alice, 1)
    long = "Antarctic birds eat " + "a great deal of " * 10 + "KRILL, and fish, and squid " * 8
    turn = turns.chat_turn_start(user=alice, conversation_id=None, content="What do penguins eat?")
    archived = turn.conversation_id
    turns.message_finish(message_id=turn.assistant_message_id, content=long, status="complete")
    services.conversation_flag(user=alice, conversation_id=archived, data={"archived": True})
    headers = bearer(alice, "store.read")

    def ids(query: str) -> list[int]:
        return [
            c["id"] for c in client.get(f"/api/conversations/?{query}", headers=headers).json()["results"]
        ]

    assert ids("archived=false") == [kept] and ids("archived=true") == [archived]
    assert sorted(ids("")) == sorted([kept, archived])
    [found] = client.get("/api/conversations/?search=krill", headers=headers).json()["results"]
    assert (found["id"], found["archived"], found["pinned"]) == (archived, True, False)
    # The text around the first match, on one line, cut at both ends.
    snippet = found["snippet"]
    assert "KRILL" in snippet and snippet.startswith("…") and snippet.endswith("…") and len(snippet) < 160
    services.conversation_rename(user=alice, conversation_id=kept, title="Tea time")
    [titled] = client.get("/api/conversations/?search=TEA", headers=headers).json()["results"]
    assert (titled["id"], titled["snippet"]) == (kept, "")  # matched by its title alone
    response = client.get("/api/conversations/?archived=maybe", headers=headers)
    assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_field")
