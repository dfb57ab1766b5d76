"""Sharing a read-only snapshot of a conversation, and exporting one as Markdown or JSON."""

import json

import pytest
from django.test import Client

from conversations import services, turns
from conversations.models import Conversation, SharedLink
from tests.support.chat_client import browser

pytestmark = pytest.mark.django_db


def answer(user, content, conversation_id=None, reply="An answer.", parent_id=None):
    turn = turns.chat_turn_start(
        user=user, conversation_id=conversation_id, content=content, parent_id=parent_id
    )
    turns.message_finish(message_id=turn.assistant_message_id, content=reply, status="complete")
    return turn


def post(client: Client, url: str):
    token = client.cookies["csrftoken"].value
    return client.post(url, "{}", content_type="application/json", HTTP_X_CSRFTOKEN=token)


def test_it_shares_a_snapshot_of_the_version_shown_and_nothing_later(alice):
    first = answer(alice, "First question", reply="First answer")
    conversation = Conversation.objects.get(pk=first.conversation_id)
    conversation.system_prompt = "Secret instructions"
    conversation.save()
    # Another version of the first turn, then back to the first version.
    other = turns.chat_turn_edit(user=alice, message_id=first.user_message_id, content="Other branch")
    turns.message_finish(message_id=other.assistant_message_id, content="Other answer", status="complete")
    services.conversation_show(
        user=alice, conversation_id=first.conversation_id, message_id=first.assistant_message_id
    )
    response = post(browser(alice), f"/c/{first.conversation_id}/share")
    assert response.status_code == 201
    url = response.json()["url"]
    # A later turn, after the link was made.
    answer(alice, "Later question", first.conversation_id, reply="Later answer")
    page = Client().get(url)  # anyone with the link, no login
    assert page.status_code == 200 and page["X-Robots-Tag"] == "noindex"
    shared = SharedLink.objects.get().snapshot["messages"]
    assert [(m["role"], m["content"]) for m in shared] == [
        ("user", "First question"),
        ("assistant", "First answer"),
    ]
    body = page.content.decode()
    assert "First question" in body
    for hidden in ("Later question", "Other branch", "Other answer", "Secret instructions"):
        assert hidden not in body, hidden


def test_it_stops_a_shared_link_when_its_owner_revokes_it(alice):
    turn = answer(alice, "Question")
    client = browser(alice)
    url = post(client, f"/c/{turn.conversation_id}/share").json()["url"]
    assert Client().get(url).status_code == 200
    assert post(client, f"/c/{turn.conversation_id}/unshare").json() == {"revoked": 1}
    assert Client().get(url).status_code == 404
    assert Client().get("/s/not-a-token/").status_code == 404


def test_a_shared_page_is_never_cached_and_dies_with_its_owners_account(alice):
    turn = answer(alice, "Question")
    url = post(browser(alice), f"/c/{turn.conversation_id}/share").json()["url"]
    response = Client().get(url)
    assert response.status_code == 200
    # A revoked link must not live on in a shared cache.
    assert response["Cache-Control"] == "private, no-store"
    alice.is_active = False
    alice.save()
    assert Client().get(url).status_code == 404


def test_it_lets_only_the_owner_share_export_or_revoke(alice, bob):
    turn = answer(alice, "Mine")
    client = browser(bob)
    for path in ("share", "unshare"):
        assert post(client, f"/c/{turn.conversation_id}/{path}").status_code == 404
    assert client.get(f"/c/{turn.conversation_id}/export?format=json").status_code == 404
    assert not SharedLink.objects.exists()
    empty = Conversation.objects.create(owner=alice)
    refused = post(browser(alice), f"/c/{empty.pk}/share")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_field"


def test_it_exports_the_shown_version_as_markdown_and_every_version_as_json(alice):
    first = answer(alice, "What is 2+2?", reply="**4**")
    answer(alice, "And 3+3?", first.conversation_id, reply="6")
    Conversation.objects.filter(pk=first.conversation_id).update(system_prompt="Be exact.")
    client = browser(alice)
    markdown = client.get(f"/c/{first.conversation_id}/export?format=md")
    assert (
        markdown["Content-Disposition"] == f'attachment; filename="conversation-{first.conversation_id}.md"'
    )
    assert markdown.content.decode() == (
        "# What is 2+2?\n\n**System prompt**\n\nBe exact.\n\n"
        "## User\n\nWhat is 2+2?\n\n## Assistant\n\n**4**\n\n"
        "## User\n\nAnd 3+3?\n\n## Assistant\n\n6\n"
    )
    exported = json.loads(client.get(f"/c/{first.conversation_id}/export?format=json").content)
    assert exported["id"] == first.conversation_id and len(exported["messages"]) == 4
    assert client.get(f"/c/{first.conversation_id}/export?format=pdf").status_code == 400
    assert Client().get(f"/c/{first.conversation_id}/export?format=md").status_code == 302
