"""The chat page's JSON actions: rename, delete, settings, choose the version shown."""

import json

import pytest
from django.conf import settings
from django.test import Client

from conversations import turns
from conversations.models import Conversation

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(alice) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    client.get("/")  # sets the CSRF cookie
    return client


def post(client: Client, url: str, data: dict):
    token = client.cookies["csrftoken"].value
    return client.post(url, json.dumps(data), content_type="application/json", HTTP_X_CSRFTOKEN=token)


def test_it_creates_a_conversation_with_settings_before_the_first_message(browser):
    response = post(browser, "/c/new", {"settings": {"temperature": 0.2, "max_tokens": 32}})
    assert response.status_code == 201
    conversation = Conversation.objects.get(pk=response.json()["id"])
    assert (conversation.temperature, conversation.max_tokens) == (0.2, 32)


def test_it_renames_changes_settings_and_deletes(browser, alice):
    turn = turns.chat_turn_start(user=alice, conversation_id=None, content="Hi")
    base = f"/c/{turn.conversation_id}"
    assert post(browser, base + "/rename", {"title": "Greetings"}).json()["title"] == "Greetings"
    response = post(browser, base + "/settings", {"system_prompt": "Pirate.", "temperature": 1.5})
    assert response.json() == {
        "model": settings.INFERENCE_MODEL_NAME,
        "system_prompt": "Pirate.",
        "temperature": 1.5,
        "max_tokens": None,
        "min_tokens": None,
    }
    response = post(browser, base + "/settings", {"temperature": 9})
    assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_field")
    response = post(browser, base + "/settings", {"system_prompt": "x" * 10_000})
    assert (response.status_code, response.json()["error"]["code"]) == (413, "too_large")
    assert post(browser, base + "/delete", {}).status_code == 200
    assert not Conversation.objects.exists()


def test_it_remembers_the_version_shown_so_a_reload_shows_it(browser, alice):
    turn = turns.chat_turn_start(user=alice, conversation_id=None, content="Hi")
    turns.message_finish(message_id=turn.assistant_message_id, content="Hello!", status="complete")
    turns.chat_turn_regenerate(user=alice, message_id=turn.assistant_message_id)
    base = f"/c/{turn.conversation_id}"
    response = post(browser, base + "/show", {"message": turn.assistant_message_id})
    assert response.json() == {"current_leaf": turn.assistant_message_id}
    page = browser.get(base + "/").content.decode()
    state = json.loads(page.split('id="initial-state" type="application/json">')[1].split("</script>")[0])
    assert state["conversation"]["current_leaf"] == turn.assistant_message_id
    assert len(state["conversation"]["messages"]) == 3


def test_it_refuses_without_session_csrf_token_or_ownership(browser, alice, client, bob):
    turn = turns.chat_turn_start(user=alice, conversation_id=None, content="Hi")
    url = f"/c/{turn.conversation_id}/rename"
    response = client.post(url, {"title": "x"}, content_type="application/json")
    assert (response.status_code, response.json()["error"]["code"]) == (401, "unauthenticated")
    response = browser.post(url, json.dumps({"title": "x"}), content_type="application/json")
    assert (response.status_code, response.json()["error"]["code"]) == (403, "csrf_failed")
    other = Client(enforce_csrf_checks=True)
    other.force_login(bob)
    other.get("/")
    response = post(other, url, {"title": "mine now"})
    assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")
    assert post(browser, url, ["not", "an", "object"]).json()["error"]["code"] == "invalid_json"
    token = browser.cookies["csrftoken"].value
    nested = browser.post(url, "[" * 20_000, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert (nested.status_code, nested.json()["error"]["code"]) == (400, "invalid_json")
    assert browser.get(url).status_code == 405


def test_it_pins_and_archives_without_moving_the_conversation_in_time(browser, alice, client, bob):
    turn = turns.chat_turn_start(user=alice, conversation_id=None, content="Hi")
    base = f"/c/{turn.conversation_id}"
    before = Conversation.objects.get(pk=turn.conversation_id).updated_at
    assert post(browser, base + "/flags", {"pinned": True}).json() == {
        "id": turn.conversation_id,
        "pinned": True,
        "archived": False,
    }
    assert post(browser, base + "/flags", {"archived": True, "pinned": False}).json()["archived"] is True
    conversation = Conversation.objects.get(pk=turn.conversation_id)
    assert (conversation.pinned, conversation.archived, conversation.updated_at) == (False, True, before)
    # The chat page lists only the others; search still finds it (the store API's test).
    page = browser.get("/")
    listed = json.loads(
        page.content.decode().split('id="initial-state" type="application/json">')[1].split("<")[0]
    )
    assert listed["conversations"] == []
    for body in ({}, {"pinned": "yes"}, {"archived": 1}):
        response = post(browser, base + "/flags", body)
        assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_field")
    theirs = turns.chat_turn_start(user=bob, conversation_id=None, content="Mine")
    assert post(browser, f"/c/{theirs.conversation_id}/flags", {"pinned": True}).status_code == 404
    assert not Conversation.objects.get(pk=theirs.conversation_id).pinned


def test_it_says_which_share_links_are_live(browser, alice, bob):
    turn = turns.chat_turn_start(user=alice, conversation_id=None, content="Hi")
    turns.message_finish(message_id=turn.assistant_message_id, content="Hello.", status="complete")
    base = f"/c/{turn.conversation_id}"
    assert browser.get(base + "/shares").json() == {"live": []}
    first = post(browser, base + "/share", {}).json()
    second = post(browser, base + "/share", {}).json()
    assert [link["url"] for link in browser.get(base + "/shares").json()["live"]] == [
        second["url"],
        first["url"],
    ]
    post(browser, base + "/unshare", {})
    assert browser.get(base + "/shares").json() == {"live": []}
    theirs = turns.chat_turn_start(user=bob, conversation_id=None, content="Mine")
    assert browser.get(f"/c/{theirs.conversation_id}/shares").status_code == 404
    assert Client().get(base + "/shares").status_code == 401
