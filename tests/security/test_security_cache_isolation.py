"""Prefix-cache isolation on the real engine: one user's cached prompt serves that user again and
no one else, and no client can choose the salt. Sharing across users is an explicit opt-in."""

import json
import uuid

import httpx
import pytest
from django.contrib.auth import get_user_model

from answers.run import cache_salt_for
from apitokens.services import token_issue
from conversations import services
from tests.support.chat_client import collect_answer, open_chat, send
from tests.support.product import running_daphne

pytestmark = pytest.mark.django_db(transaction=True)


def long_prefix() -> str:
    """A few hundred tokens no other test sends, so only this test can have cached them."""
    tag = uuid.uuid4().hex
    return f"Reference {tag}. " + " ".join(
        f"Clause {i}: the tenant keeps the garden tidy and reports leaks within {i} days." for i in range(25)
    )


def user(name: str):
    return get_user_model().objects.create_user(f"{name}-{uuid.uuid4().hex[:6]}", password="pw-cache-12345")


def ask(ws_url: str, origin: str, who, content: str, **extra) -> dict:
    """One short answer in a new conversation; its `chat.done` frame."""
    conversation = services.conversation_create(user=who, settings_data={"max_tokens": 4, "temperature": 0})
    with open_chat(ws_url, origin, who) as ws:
        send(ws, {"type": "chat.send", "conversation": conversation.pk, "content": content, **extra})
        _, _, done = collect_answer(ws)
    assert done["type"] == "chat.done", done
    return done["usage"]


def test_it_serves_a_users_prefix_from_cache_to_that_user_only(ws_url, origin):
    alice, bob, carol = user("alice"), user("bob"), user("carol")
    prompt = long_prefix()
    first = ask(ws_url, origin, alice, prompt)
    assert first["prompt_tokens"] > 300
    assert first["cached_tokens"] == 0
    again = ask(ws_url, origin, alice, prompt)
    assert again["cached_tokens"] >= first["prompt_tokens"] - 64, again
    # The same text from another user is computed afresh: nothing of Alice's is served.
    assert ask(ws_url, origin, bob, prompt)["cached_tokens"] == 0
    # A client cannot pick the salt: Alice's salt sent in the frame is ignored.
    forged = ask(ws_url, origin, carol, prompt, cache_salt=cache_salt_for(alice.pk))
    assert forged["cached_tokens"] == 0


def test_it_ignores_a_salt_sent_to_the_http_chat_stream(product_server, ws_url, origin):
    alice, dave = user("alice"), user("dave")
    prompt = long_prefix()
    ask(ws_url, origin, alice, prompt)
    _, token = token_issue(user=dave, scopes=["chat"])
    body = {"prompt": prompt, "cache_salt": cache_salt_for(alice.pk), "salt": cache_salt_for(alice.pk)}
    events = []
    with httpx.stream(
        "POST",
        product_server + "/chat/stream",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=120,
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                events.append(json.loads(line.removeprefix("data: ")))
    done = events[-1]
    assert done["done"] is True and done["usage"]["cached_tokens"] == 0


def test_it_shares_the_cache_across_users_only_when_configured_to(django_db_setup, engine_url):
    erin, frank = user("erin"), user("frank")
    prompt = long_prefix()
    with running_daphne(engine_url, CHAT_CACHE_SALT_PER_USER="false") as server:
        ws_url = server.url.replace("http://", "ws://") + "/ws/chat/"
        first = ask(ws_url, server.url, erin, prompt)
        shared = ask(ws_url, server.url, frank, prompt)
    assert first["cached_tokens"] == 0 or first["cached_tokens"] < 64
    assert shared["cached_tokens"] >= first["prompt_tokens"] - 64, shared
