"""The engine's key guard (enginehost.keyguard), as vLLM's server runs it: every route but /health
asks for the key; a wrong key, another scheme or none is refused before the server sees the request."""

import pytest
from asgiref.testing import ApplicationCommunicator

from enginehost.keyguard import KeyGuard

KEY = "engine-key-" + "y" * 30


class Server:
    def __init__(self):
        self.seen = []

    async def __call__(self, scope, receive, send):
        self.seen.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def status(app, path, authorization=None, method="POST"):
    headers = [(b"authorization", authorization.encode())] if authorization else []
    scope = {"type": "http", "method": method, "path": path, "headers": headers, "root_path": ""}
    communicator = ApplicationCommunicator(app, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(2)
    await communicator.receive_output(2)
    return start["status"]


@pytest.fixture
def guarded(monkeypatch):
    monkeypatch.setenv("INFERENCE_API_KEY", KEY)
    server = Server()
    return KeyGuard(server), server


@pytest.mark.parametrize(
    "path",
    ["/invocations", "/tokenize", "/detokenize", "/metrics", "/pooling", "/v1/chat/completions", "/load"],
)
async def test_every_route_but_health_needs_the_key(guarded, path):
    app, server = guarded
    assert await status(app, path) == 401
    assert await status(app, path, "Bearer wrong") == 401
    assert await status(app, path, f"Basic {KEY}") == 401
    assert await status(app, path, "OPTIONS", method="OPTIONS") == 401
    assert server.seen == []
    assert await status(app, path, f"Bearer {KEY}") == 200
    assert server.seen == [path]


async def test_health_is_open_for_the_probes_and_the_router(guarded):
    app, server = guarded
    assert await status(app, "/health", method="GET") == 200
    assert await status(app, "/health/", method="GET") == 401  # the path itself, not a prefix


async def test_a_socket_without_the_key_is_closed(guarded):
    app, server = guarded
    communicator = ApplicationCommunicator(app, {"type": "websocket", "path": "/v1/realtime", "headers": []})
    await communicator.send_input({"type": "websocket.connect"})
    assert (await communicator.receive_output(2)) == {"type": "websocket.close", "code": 1008}


def test_it_refuses_to_start_without_a_key(monkeypatch):
    monkeypatch.delenv("INFERENCE_API_KEY", raising=False)
    with pytest.raises(RuntimeError):
        KeyGuard(Server())
