"""A small synchronous chat client over the real WebSocket, for end-to-end tests."""

import json
import time

from django.test import Client
from websockets.sync.client import ClientConnection, connect


def long_answer_conversation(user, max_tokens: int = 1024) -> int:
    """A conversation whose answers run to exactly `max_tokens`: the engine may not end an
    answer before its `min_tokens` floor, so a test that stops, kills or reloads mid-answer
    acts while the answer is still running, whatever the model would have said."""
    from conversations import services

    settings_data = {"max_tokens": max_tokens, "min_tokens": max_tokens, "temperature": 0}
    return services.conversation_create(user=user, settings_data=settings_data).pk


def answered_turn(user, question: str, answer: str, **fields):
    """A new conversation with one question and its finished answer (message_finish's `fields`)."""
    from conversations import turns

    turn = turns.chat_turn_start(user=user, conversation_id=None, content=question)
    turns.message_finish(
        message_id=turn.assistant_message_id, content=answer, **{"status": "complete", **fields}
    )
    return turn


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def open_chat(ws_url: str, origin: str, user, *, cookie: str | None = None) -> ClientConnection:
    """A chat socket of `user`: a new session, or `cookie`'s (a thread with no database connection
    of its own opens one that way)."""
    return connect(
        ws_url,
        origin=origin,
        additional_headers={"Cookie": f"sessionid={cookie or session_cookie(user)}"},
        open_timeout=10,
    )


def receive(ws: ClientConnection, timeout: float = 60) -> dict:
    return json.loads(ws.recv(timeout=timeout))


def send(ws: ClientConnection, frame: dict) -> None:
    ws.send(json.dumps(frame))


def collect_answer(ws: ClientConnection, timeout: float = 120) -> tuple[dict, list[dict], dict]:
    """Read one answer: (chat.started, chat.token frames, the closing chat.done or chat.error)."""
    deadline = time.monotonic() + timeout
    started = receive(ws)
    assert started["type"] == "chat.started", started
    tokens = []
    while True:
        frame = receive(ws, timeout=max(deadline - time.monotonic(), 0.1))
        if frame["type"] == "chat.token":
            tokens.append(frame)
        else:
            return started, tokens, frame


def ends_as_shown(ws: ClientConnection, message: int, tokens: list[dict], *, timeout: float = 180):
    """Read an answer on to its end (its `chat.notice` frames passed over), `tokens` the token frames
    read so far, and check it is one answer: complete, gapless, ended and stored with the text shown.
    The stored message."""
    from conversations.models import Message

    while (frame := receive(ws, timeout=timeout))["type"] in {"chat.token", "chat.notice"}:
        if frame["type"] == "chat.token":
            tokens.append(frame)
    assert (frame["type"], frame["status"]) == ("chat.done", "complete"), frame
    assert [token["seq"] for token in tokens] == list(range(len(tokens)))
    shown = "".join(token["text"] for token in tokens)
    assert frame["content"] == shown
    stored = Message.objects.get(pk=message)
    assert (stored.status, stored.content) == ("complete", shown)
    return stored


def start_long_answer(ws: ClientConnection, user, content: str) -> dict:
    """Ask for an answer long by construction (long_answer_conversation) and read up to its
    first token: the answer is running when this returns. Its chat.started frame."""
    send(ws, {"type": "chat.send", "conversation": long_answer_conversation(user), "content": content})
    started = receive(ws)
    assert started["type"] == "chat.started", started
    first = receive(ws)
    assert first["type"] == "chat.token", first
    return started


def browser(user) -> Client:
    """A test client logged in as `user` that checks CSRF as a browser is checked, with its cookie set."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.get("/")
    return client
