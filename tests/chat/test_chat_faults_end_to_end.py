"""Faults against the real engine: killed mid-answer, back again, stalled."""

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model

from chat import consumers
from chat.consumers import ChatConsumer
from conversations.models import Message
from harness.processes import free_port
from harness.stand_in_engine import HANG, StandInEngine, serving
from harness.waiting import wait_for
from inference.client import OpenAIEngineClient
from tests.support.chat_client import (
    ends_as_shown,
    long_answer_conversation,
    open_chat,
    receive,
    send,
)
from tests.support.polling import HealthPoller
from tests.support.product import LOGS, product_env, running_daphne

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN_TIMEOUT = 5
# The engine's restart takes 40-106 s on this host, longer on a busy one: an answer may wait for it
# here as long as the test does.
WAITING_FOR_A_RESTART = {"CHAT_TOKEN_TIMEOUT": str(TOKEN_TIMEOUT), "CHAT_ENGINE_RESUME_SECONDS": "600"}


@contextmanager
def running_inference(url: str, log: Path):
    """`manage.py runinference`, as `make run` starts it, serving at `url`: (process, its log)."""
    env = product_env(url, INFERENCE_KV_CACHE_SPACE_GB="1", INFERENCE_MAX_NUM_SEQS="4")
    with open(log, "w") as output:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runinference"], env=env, stdout=output, stderr=subprocess.STDOUT
        )
        try:
            wait_for(lambda: process.poll() is None and engine_up(url), 600, "runinference")
            yield process
        finally:
            process.terminate()
            process.wait(30)


def engine_up(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_an_answer_outlives_an_out_of_memory_kill_of_its_one_engine_while_the_web_tier_serves(
    django_db_setup, redis_server
):
    user = get_user_model().objects.create_user("erin", password="pw-erin-1234")
    url = f"http://127.0.0.1:{free_port()}"
    log = LOGS / "test-runinference.log"
    with (
        running_inference(url, log) as inference,
        running_daphne(
            url, CHAT_TOKEN_TIMEOUT=str(TOKEN_TIMEOUT), CHAT_ENGINE_RESUME_SECONDS="600"
        ) as server,
        HealthPoller(server.url) as health,
    ):
        ws_url = server.url.replace("http://", "ws://") + "/ws/chat/"
        with open_chat(ws_url, server.url, user) as ws, open_chat(ws_url, server.url, user) as other:
            conversation = long_answer_conversation(user, max_tokens=256)
            send(ws, {"type": "chat.send", "conversation": conversation, "content": "Tell me a long story."})
            started = receive(ws)
            assert started["type"] == "chat.started", started
            tokens = [receive(ws)]
            assert tokens[0]["type"] == "chat.token", tokens[0]
            # The kernel's out-of-memory killer takes vLLM's server, not runinference above it.
            [engine_server] = psutil.Process(inference.pid).children()
            engine_server.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            # The reader is told the answer waits for the engine, not left with a frozen cursor.
            while (frame := receive(ws, timeout=TOKEN_TIMEOUT + 10))["type"] == "chat.token":
                tokens.append(frame)
            assert (frame["type"], frame["code"]) == ("chat.notice", "engine_waiting"), frame
            assert time.monotonic() - killed_at <= TOKEN_TIMEOUT + 2

            # While the engine starts again, new answers are refused with a time to retry, until one runs.
            refusals = []
            deadline = time.monotonic() + 600
            while True:
                send(other, {"type": "chat.send", "conversation": None, "content": "Hello?"})
                frame = receive(other)
                if frame["type"] == "chat.started":
                    frame = receive(other, timeout=120)
                    while frame["type"] == "chat.token":
                        frame = receive(other, timeout=120)
                if frame["type"] == "chat.done":
                    break
                assert frame["code"] == "engine_unavailable", frame
                assert frame["retry_after"] >= 1
                refusals.append(frame)
                assert time.monotonic() < deadline, "no answer within the engine's start time"
                time.sleep(frame["retry_after"])
            assert frame["status"] == "complete"
            assert refusals, "the engine was never seen down"

            # The long answer went on from where it was, on the engine started again: one answer,
            # gapless, stored as shown, its whole budget made across both requests.
            stored = ends_as_shown(ws, started["message"], tokens)
            assert stored.completion_tokens == 256 and stored.finish_reason == "length"
        assert engine_server.pid not in {child.pid for child in psutil.Process(inference.pid).children()}
    # The web process answered /healthz all along: the engine down, then up again.
    assert health.failures == []
    engine_states = [status["engine"] for status in health.statuses]
    assert any(state != "ok" for state in engine_states)
    assert engine_states[-1] == "ok"
    # While it came back, /healthz said what it was doing, as runinference told it, not an error.
    assert any(state.startswith(("starting: ", "restarting: ")) for state in engine_states), set(
        engine_states
    )
    assert all(status["database"] == "ok" for status in health.statuses)
    assert "The engine stopped: killed by SIGKILL" in log.read_text()
    # The chat was told the same: refusals while it loaded say it is on its way up.
    assert any(
        f["detail"].startswith(("The engine is starting", "The engine is restarting")) for f in refusals
    )


async def test_it_aborts_a_stalled_engine_request_at_the_first_token_timeout(monkeypatch, settings):
    settings.CHAT_FIRST_TOKEN_TIMEOUT = 1.0
    user = await get_user_model().objects.acreate_user("frank", password="pw-frank-123")
    with serving(StandInEngine(fault=HANG)) as url:
        client = OpenAIEngineClient(url, "m", connect_timeout=2, token_timeout=60)
        monkeypatch.setattr(consumers, "engine_client", lambda: client)
        communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat/")
        communicator.scope["user"] = user
        await communicator.connect()
        await communicator.send_json_to({"type": "chat.send", "conversation": None, "content": "hi"})
        started = await communicator.receive_json_from(timeout=5)
        failed = await communicator.receive_json_from(timeout=10)
        assert (failed["type"], failed["code"]) == ("chat.error", "timeout_first_token")
        stored = await Message.objects.aget(pk=started["message"])
        assert stored.status == "timeout"
        await communicator.disconnect()
        await client.aclose()


def raw_websocket(base: str, cookie: str) -> socket.socket:
    """A WebSocket opened by hand, so the test decides when (never) to read from it."""
    address = urlsplit(base)
    sock = socket.create_connection((address.hostname, address.port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /ws/chat/ HTTP/1.1\r\nHost: {address.netloc}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: {base}\r\nCookie: sessionid={cookie}\r\n\r\n"
        ).encode()
    )
    response = b""
    while b"\r\n\r\n" not in response:
        response += sock.recv(1)
    assert response.startswith(b"HTTP/1.1 101"), response
    return sock


def send_text_frame(sock: socket.socket, text: str) -> None:
    payload = text.encode()
    assert len(payload) < 126
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + masked)


def test_it_closes_a_client_that_stops_reading(django_db_setup, engine_url):
    from tests.support.chat_client import session_cookie

    user = get_user_model().objects.create_user("ivan", password="pw-ivan-1234")
    with running_daphne(engine_url, "--ping-interval", "1", "--ping-timeout", "2") as server:
        sock = raw_websocket(server.url, session_cookie(user))
        send_text_frame(sock, json.dumps({"type": "chat.send", "conversation": None, "content": "Hi!"}))
        # The client answers no ping, whatever it reads: the server must end the connection
        # (EOF, or a reset when it aborts) a ping interval and timeout later. A recv that
        # times out instead fails the test.
        sock.settimeout(30)
        try:
            while sock.recv(65536):
                pass
        except ConnectionResetError:
            pass
        sock.close()


def test_it_resumes_and_stops_an_answer_from_another_web_process(django_db_setup, engine_url):
    user = get_user_model().objects.create_user("judy", password="pw-judy-1234")
    with running_daphne(engine_url) as first, running_daphne(engine_url) as second:
        ws_first = first.url.replace("http://", "ws://") + "/ws/chat/"
        ws_second = second.url.replace("http://", "ws://") + "/ws/chat/"
        with open_chat(ws_first, first.url, user) as tab1, open_chat(ws_second, second.url, user) as tab2:
            send(
                tab1,
                {
                    "type": "chat.send",
                    "conversation": long_answer_conversation(user),
                    "content": "Write a long story about owls.",
                },
            )
            started = receive(tab1)
            seen = [receive(tab1), receive(tab1)]
            assert [f["seq"] for f in seen] == [0, 1]

            send(tab2, {"type": "chat.resume", "message": started["message"], "after": 0})
            resumed = receive(tab2)
            assert (resumed["type"], resumed["seq"]) == ("chat.token", 1)
            assert resumed["text"] == seen[1]["text"]

            send(tab2, {"type": "chat.stop", "message": started["message"]})
            while (frame := receive(tab1))["type"] == "chat.token":
                pass
            assert (frame["type"], frame["status"]) == ("chat.done", "stopped")
            while (other := receive(tab2))["type"] == "chat.token":
                pass
            assert other == frame
    stored = Message.objects.get(pk=started["message"])
    assert (stored.status, stored.content) == ("stopped", frame["content"])
