"""The chat page: login required, the user's own conversations only."""

import json

import pytest

from conversations.models import Conversation, Message

pytestmark = pytest.mark.django_db


def test_it_sends_anonymous_visitors_to_the_login_page(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_it_logs_in_through_the_login_form(client, alice):
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    response = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-123"})
    assert response.status_code == 302
    assert client.get("/").status_code == 200


def test_it_lists_only_the_users_conversations_and_embeds_the_history_as_data(client, alice, bob):
    mine = Conversation.objects.create(owner=alice, title="Mine")
    Conversation.objects.create(owner=bob, title="Bobs secret")
    Message.objects.create(conversation=mine, role="user", content="<script>alert(1)</script>")
    client.force_login(alice)
    page = client.get(f"/c/{mine.pk}/").content.decode()
    assert "Mine" in page
    assert "Bobs secret" not in page
    assert "<script>alert(1)</script>" not in page
    data = page.split('id="initial-state" type="application/json">')[1].split("</script>")[0]
    assert json.loads(data)["conversation"]["messages"][0]["content"] == "<script>alert(1)</script>"


def test_it_answers_another_users_conversation_as_missing(client, alice, bob):
    theirs = Conversation.objects.create(owner=bob, title="Bobs")
    client.force_login(alice)
    assert client.get(f"/c/{theirs.pk}/").status_code == 404
    assert client.get("/c/999999/").status_code == 404
