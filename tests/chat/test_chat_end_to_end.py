"""Chat over the real WebSocket, served by daphne, answered by the real vLLM engine."""

import time

import pytest
from django.contrib.auth import get_user_model
from websockets.exceptions import InvalidStatus

from conversations.models import Conversation, Message
from tests.support.chat_client import collect_answer, long_answer_conversation, open_chat, receive, send
from tests.support.product import engine_gauge

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def user():
    return get_user_model().objects.create_user("alice", password="pw-alice-123")


# Long enough that the first turn's prompt alone fills a KV block (32 tokens): the second turn's
# cache hit then never depends on how the first answer's text tokenizes again. With a short
# question the first full block held answer tokens, and an answer whose text tokenized
# differently the second time (seen once in ten suite runs) shared no block.
FIRST_QUESTION = (
    "I am painting a small kitchen with one window facing north, white cupboards and a grey "
    "stone floor. Name three colours for the walls."
)


def test_it_streams_tokens_and_serves_the_second_turn_from_the_prefix_cache(ws_url, origin, user):
    with open_chat(ws_url, origin, user) as ws:
        send(ws, {"type": "chat.send", "conversation": None, "content": FIRST_QUESTION})
        started, tokens, done = collect_answer(ws)
        assert done["type"] == "chat.done", done
        assert len(tokens) >= 2
        assert [t["seq"] for t in tokens] == list(range(len(tokens)))
        assert all(t["message"] == started["message"] for t in tokens)
        assert done["status"] == "complete"
        assert done["usage"]["completion_tokens"] >= len(tokens) - 1
        assert done["ttft_ms"] > 0
        first = Message.objects.get(pk=started["message"])
        assert first.status == Message.Status.COMPLETE
        assert first.content == "".join(t["text"] for t in tokens)
        assert first.conversation.owner == user

        send(ws, {"type": "chat.send", "conversation": started["conversation"], "content": "And three more?"})
        second, tokens, done = collect_answer(ws)
        assert second["conversation"] == started["conversation"]
        assert done["type"] == "chat.done", done
        assert done["usage"]["cached_tokens"] > 0
        stored = Message.objects.get(pk=second["message"])
        assert stored.cached_tokens == done["usage"]["cached_tokens"]
        assert stored.prompt_tokens > first.prompt_tokens
        assert stored.content == "".join(t["text"] for t in tokens)


def test_it_runs_an_answer_to_the_conversations_minimum_length(ws_url, origin, user):
    conversation = long_answer_conversation(user, max_tokens=40)
    with open_chat(ws_url, origin, user) as ws:
        send(ws, {"type": "chat.send", "conversation": conversation, "content": "Reply with one word: yes."})
        started, tokens, done = collect_answer(ws)
    assert done["type"] == "chat.done", done
    assert (done["status"], done["finish_reason"]) == ("complete", "length")
    assert done["usage"]["completion_tokens"] == 40
    assert Message.objects.get(pk=started["message"]).completion_tokens == 40


def test_it_aborts_the_engine_request_and_keeps_the_partial_answer_on_stop(ws_url, origin, user, engine_url):
    with open_chat(ws_url, origin, user) as ws:
        send(
            ws,
            {
                "type": "chat.send",
                "conversation": long_answer_conversation(user),
                "content": "Write a very long story about a dragon who learns to bake bread.",
            },
        )
        started = receive(ws)
        tokens = [receive(ws), receive(ws)]
        assert [t["type"] for t in tokens] == ["chat.token", "chat.token"]
        assert engine_gauge(engine_url, "vllm:num_requests_running") >= 1
        send(ws, {"type": "chat.stop", "message": started["message"]})
        while (frame := receive(ws))["type"] == "chat.token":
            tokens.append(frame)
        assert frame["type"] == "chat.done"
        assert frame["status"] == "stopped"

    # The answer had over a thousand tokens to go; on a starved engine an abort still lands in seconds.
    deadline = time.monotonic() + 20
    while engine_gauge(engine_url, "vllm:num_requests_running") > 0:
        assert time.monotonic() < deadline, "the engine kept generating after stop"
        time.sleep(0.1)
    stored = Message.objects.get(pk=started["message"])
    assert stored.status == Message.Status.STOPPED
    assert stored.content == "".join(t["text"] for t in tokens)
    assert stored.content


def test_it_refuses_anonymous_connections(ws_url, origin):
    from websockets.sync.client import connect

    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url, origin=origin, open_timeout=10)
    assert refused.value.response.status_code == 403


def test_it_refuses_a_foreign_origin_even_with_a_session(ws_url, user):
    with pytest.raises(InvalidStatus) as refused:
        open_chat(ws_url, "http://evil.example", user)
    assert refused.value.response.status_code == 403


def test_it_closes_the_sessions_sockets_when_the_user_logs_out(ws_url, origin, user):
    from django.test import Client
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    client = Client()
    client.force_login(user)
    cookie = client.cookies["sessionid"].value
    with connect(ws_url, origin=origin, additional_headers={"Cookie": f"sessionid={cookie}"}) as ws:
        assert client.post("/accounts/logout/").status_code == 302
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=5)
        assert closed.value.rcvd.code == 4401


def socket_of(client, ws_url: str, origin: str):
    from websockets.sync.client import connect

    cookie = client.cookies["sessionid"].value
    return connect(
        ws_url, origin=origin, additional_headers={"Cookie": f"sessionid={cookie}"}, open_timeout=10
    )


def close_code(ws, within: float = 10) -> int:
    from websockets.exceptions import ConnectionClosed

    with pytest.raises(ConnectionClosed) as closed:
        while True:
            ws.recv(timeout=within)
    return closed.value.rcvd.code


def logged_in(user):
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("change", ["deactivate", "new_password", "delete"])
def test_it_closes_a_users_sockets_when_they_may_no_longer_log_in(ws_url, origin, user, change):
    with socket_of(logged_in(user), ws_url, origin) as ws:
        if change == "deactivate":
            user.is_active = False
            user.save()
        elif change == "new_password":
            user.set_password("pw-alice-changed-456")
            user.save()
        else:
            user.delete()
        assert close_code(ws) == 4401


@pytest.mark.parametrize("kind", ["chat.send", "chat.edit", "chat.regenerate", "chat.resume"])
def test_it_refuses_the_frames_of_a_user_deactivated_behind_its_back(ws_url, origin, user, kind):
    # The frames that start an answer check the login in their turn's own trip, the others on arrival.
    conversation = Conversation.objects.create(owner=user)
    question = Message.objects.create(conversation=conversation, role="user", content="Hi")
    answer = Message.objects.create(
        conversation=conversation, parent=question, role="assistant", content="Hello", status="complete"
    )
    frame = {
        "chat.send": {"conversation": conversation.pk, "content": "Still there?"},
        "chat.edit": {"message": question.pk, "content": "Still there?"},
        "chat.regenerate": {"message": answer.pk},
        "chat.resume": {"message": answer.pk, "after": -1},
    }[kind]
    with socket_of(logged_in(user), ws_url, origin) as ws:
        # No signal: as a change made straight in the database.
        get_user_model().objects.filter(pk=user.pk).update(is_active=False)
        send(ws, {"type": kind, **frame})
        assert close_code(ws) == 4401
    assert Message.objects.count() == 2


def test_it_closes_a_socket_when_its_session_expires(ws_url, origin, user):
    client = logged_in(user)
    session = client.session
    session.set_expiry(3)
    session.save()
    with socket_of(client, ws_url, origin) as ws:
        assert close_code(ws, within=20) == 4401


def test_logout_closes_the_sockets_opened_under_an_earlier_key_of_the_same_login(ws_url, origin, user):
    client = logged_in(user)
    with socket_of(client, ws_url, origin) as before:
        # The session gets a new key, as Django gives it on login and on a password change.
        session = client.session
        session.cycle_key()
        client.cookies["sessionid"] = session.session_key
        with socket_of(client, ws_url, origin) as after:
            assert client.post("/accounts/logout/").status_code == 302
            assert close_code(after) == 4401
            assert close_code(before) == 4401
