"""The chat path through daphne: an answer's frames written straight to its sockets' connections
(httpkit.websocket), from the stand-in engine streaming fast, each token shown once and in order
however a socket joins, and as stored."""

import pytest
from django.contrib.auth import get_user_model

from conversations.models import Message
from harness.stand_in_engine import StandInEngine, serving
from tests.support.chat_client import open_chat, receive, send, session_cookie
from tests.support.product import running_daphne

pytestmark = pytest.mark.django_db(transaction=True)

TOKENS = 400


def until_closed(ws) -> list[dict]:
    frames = [receive(ws, timeout=30)]
    while frames[-1]["type"] not in {"chat.done", "chat.error"}:
        frames.append(receive(ws, timeout=30))
    return frames


def test_sockets_joining_and_reloading_while_an_answer_streams_fast_see_each_token_once(django_db_setup):
    user = get_user_model().objects.create_user("gina", password="pw-gina-1234")
    cookie = session_cookie(user)
    with (
        serving(StandInEngine(interval=0.01)) as engine_url,
        running_daphne(engine_url, CHAT_MAX_TOKENS=str(TOKENS)) as server,
    ):
        ws_url = server.url.replace("http://", "ws://") + "/ws/chat/"
        with open_chat(ws_url, server.url, user, cookie=cookie) as first:
            send(first, {"type": "chat.send", "conversation": None, "content": "Count."})
            message = receive(first)["message"]
            before_reload = [receive(first) for _ in range(30)]
        assert Message.objects.get(pk=message).status == "generating"
        # A reload and a second tab, while the answer streams on.
        with (
            open_chat(ws_url, server.url, user, cookie=cookie) as reloaded,
            open_chat(ws_url, server.url, user, cookie=cookie) as joining,
        ):
            send(reloaded, {"type": "chat.resume", "message": message, "after": before_reload[-1]["seq"]})
            send(joining, {"type": "chat.resume", "message": message, "after": -1})
            after_reload, joined = until_closed(reloaded), until_closed(joining)

    stored = Message.objects.get(pk=message)
    assert stored.status == "complete" and stored.completion_tokens == TOKENS
    for frames in (before_reload + after_reload, joined):
        tokens = [f for f in frames if f["type"] == "chat.token"]
        # A frame a token, or several where the web process read two engine events at once (a busy
        # host): no gap, no duplicate either way.
        assert [f["seq"] for f in tokens] == list(range(len(tokens)))
        assert TOKENS - 40 <= len(tokens) <= TOKENS
        assert "".join(f["text"] for f in tokens) == stored.content == frames[-1]["content"]
