"""Bounds on one socket and one user beside admission control: frames per socket, open sockets
per user (across web processes, in Redis), and changes to conversations per user."""

import json

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

from chat import rates
from chat.consumers import ChatConsumer
from conversations.models import Conversation
from httpkit.errors import Refusal
from tests.support.consumer_client import connected

pytestmark = pytest.mark.django_db(transaction=True)


async def test_it_refuses_frames_past_the_sockets_rate_and_stays_usable(alice, settings):
    settings.CHAT_SOCKET_FRAMES_PER_MINUTE = 5
    communicator = await connected(alice)
    other = await connected(alice)  # another socket of the same user has its own window
    try:
        for _ in range(5):
            await communicator.send_json_to({"type": "chat.stop", "message": 999999})
            assert (await communicator.receive_json_from(timeout=30))["code"] == "not_found"
        await communicator.send_json_to({"type": "chat.stop", "message": 999999})
        refused = await communicator.receive_json_from(timeout=30)
        assert (refused["code"], refused["reason"]) == ("busy", "socket_rate")
        assert 1 <= refused["retry_after"] <= 60
        await other.send_json_to({"type": "chat.stop", "message": 999999})
        assert (await other.receive_json_from(timeout=30))["code"] == "not_found"
        # Refused, not closed: the socket still answers.
        await communicator.send_to(text_data="not json")
        assert (await communicator.receive_json_from(timeout=30))["reason"] == "socket_rate"
    finally:
        await communicator.disconnect()
        await other.disconnect()


async def test_it_refuses_a_socket_past_the_users_open_sockets(alice, settings):
    settings.CHAT_MAX_SOCKETS_PER_USER = 2
    first, second = await connected(alice), await connected(alice)
    third = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat/")
    third.scope["user"] = alice
    # Refused at the handshake: no frame can be sent into it and lost.
    assert (await third.connect())[0] is False
    bob = await get_user_model().objects.acreate_user("bob", password="pw-bob-123456")
    theirs = await connected(bob)  # another user's count is their own
    await first.disconnect()
    again = await connected(alice)  # a closed socket gives its slot back
    for communicator in (second, theirs, again):
        await communicator.disconnect()


def test_it_refuses_changes_to_conversations_past_the_users_rate(alice, bob, settings):
    settings.CHAT_CONVERSATION_CHANGES_PER_MINUTE = 3
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    client.get("/")
    token = client.cookies["csrftoken"].value

    def post(url: str, data: dict):
        return client.post(url, json.dumps(data), content_type="application/json", HTTP_X_CSRFTOKEN=token)

    created = [post("/c/new", {}) for _ in range(2)]
    assert [r.status_code for r in created] == [201, 201]
    conversation = created[0].json()["id"]
    assert post(f"/c/{conversation}/rename", {"title": "One"}).status_code == 200
    refused = post("/c/new", {})
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert refused.json()["error"]["code"] == "busy"
    assert post(f"/c/{conversation}/rename", {"title": "Two"}).status_code == 429
    assert post(f"/c/{conversation}/settings", {"temperature": 0.1}).status_code == 429
    assert Conversation.objects.count() == 2 and Conversation.objects.get(pk=conversation).title == "One"
    # Another user's changes are their own.
    client.force_login(bob)
    client.get("/")
    token = client.cookies["csrftoken"].value
    assert post("/c/new", {}).status_code == 201


def test_a_sockets_window_moves_a_frame_is_let_through_a_minute_after_the_oldest(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(rates.time, "monotonic", lambda: now[0])
    window = rates.FrameWindow(3)
    for moment in (1000.0, 1010.0, 1020.0):
        now[0] = moment
        window.check()
    now[0] = 1050.0
    with pytest.raises(Refusal) as refused:
        window.check()
    assert refused.value.extra["retry_after"] == 10  # the oldest frame leaves the window at 1060
    now[0] = 1060.0
    window.check()  # the oldest left: one more fits, and the refused frame was not counted
    now[0] = 1065.0
    with pytest.raises(Refusal):
        window.check()
