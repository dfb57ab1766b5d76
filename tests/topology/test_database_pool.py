"""PostgreSQL under ASGI: a web process lends its pooled connections to every ORM call instead
of opening one per call, and replaces connections the server dropped (chatsite/settings.py, PROCESS_ROLE)."""

import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections

from conversations import services
from conversations.models import Message
from tests.support.chat_client import collect_answer, open_chat, send
from tests.support.product import running_daphne

pytestmark = pytest.mark.django_db(transaction=True)

APP = "chat-web-pool-test"
POOL_SIZE = 4
CHATS = 50


class Backends:
    """The server's backends serving the web process (by its application_name), sampled every
    20 ms from a connection of its own: each distinct backend seen, and the most at once."""

    def __init__(self) -> None:
        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        self._conn = psycopg.connect(**params, autocommit=True)
        self.seen: set[tuple[int, object]] = set()
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def rows(self) -> list[tuple[int, object]]:
        return self._conn.execute(
            "SELECT pid, backend_start FROM pg_stat_activity WHERE application_name = %s", [APP]
        ).fetchall()

    def terminate_all(self) -> int:
        """What a server restart does to the process's connections."""
        rows = self._conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", [APP]
        ).fetchall()
        return len(rows)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            rows = self.rows()
            self.seen.update(rows)
            self.peak = max(self.peak, len(rows))

    def __enter__(self) -> "Backends":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()


def chat(ws_url: str, base: str, user, conversation_id: int) -> dict:
    try:
        with open_chat(ws_url, base, user) as ws:
            send(ws, {"type": "chat.send", "conversation": conversation_id, "content": "Say hi."})
            _, _, done = collect_answer(ws, timeout=300)
        return done
    finally:
        # open_chat logs in through this thread's own connection.
        connections.close_all()


def chats(server, users: list, conversations: list[int]) -> list[dict]:
    ws_url = server.url.replace("http://", "ws://") + "/ws/chat/"
    with ThreadPoolExecutor(len(users)) as pool:
        return list(
            pool.map(lambda pair: chat(ws_url, server.url, *pair), zip(users, conversations, strict=True))
        )


def test_fifty_concurrent_chats_share_a_few_pooled_connections_that_survive_a_server_restart(
    django_db_setup, engine_url
):
    if connection.vendor != "postgresql":
        pytest.skip("the connection pool is PostgreSQL's")
    users = [get_user_model().objects.create_user(f"pool{i}", password="pw-pool-1234") for i in range(CHATS)]
    conversations = [
        services.conversation_create(user=user, settings_data={"max_tokens": 8, "temperature": 0}).pk
        for user in users
    ]
    with running_daphne(
        engine_url,
        PGAPPNAME=APP,
        DATABASE_POOL_SIZE=str(POOL_SIZE),
        # Room beyond the 50: an answer an earlier test left running may still hold a slot.
        CHAT_MAX_ACTIVE_TOTAL=str(CHATS * 2),
    ) as server:
        with Backends() as backends:
            done = chats(server, users, conversations)
            # The server drops them all, as a restart does (checked below).
            dropped = backends.terminate_all()
        assert [frame["type"] for frame in done] == ["chat.done"] * CHATS, done
        # Every ORM call of 50 chats (a dozen each) went through the pool's few connections.
        assert 1 <= backends.peak <= POOL_SIZE
        assert len(backends.seen) <= POOL_SIZE, f"{len(backends.seen)} connections opened"

        # The pool finds the dropped connections dead and replaces them: no chat fails and
        # nothing is lost.
        assert dropped >= 1
        with Backends() as after:
            done = chats(server, users[:5], conversations[:5])
        assert [frame["type"] for frame in done] == ["chat.done"] * 5, done
        assert 1 <= len(after.seen) <= POOL_SIZE
    answers = Message.objects.filter(role="assistant", conversation_id__in=conversations)
    assert answers.count() == CHATS + 5
    assert set(answers.values_list("status", flat=True)) == {"complete"}
