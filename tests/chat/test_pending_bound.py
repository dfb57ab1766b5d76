"""The web process's bound on handshakes and requests waiting for their response (httpkit.pending):
past it, `busy` at once with a retry time, in the shape each client reads; below it, nothing changes.
A request that waited out the database pool is `busy` too, not a 500 (chatsite.errors)."""

import asyncio
import json

import pytest
from asgiref.testing import ApplicationCommunicator
from channels.testing import WebsocketCommunicator
from django.db import OperationalError
from django.test import RequestFactory
from psycopg_pool import PoolTimeout

import redisconn
from answers import admission
from chat.protocol import refused
from chatsite.errors import json_body, server_error
from httpkit import pending
from httpkit.pending import TICKET_CEILING, TRY_AGAIN_LATER, PendingBound
from httpkit.retryslots import RetrySlots
from httpkit.slottickets import SlotTickets


class HeldApp:
    """An inner application that answers nothing until the test lets it: a request or handshake
    held before its response starts, by construction."""

    def __init__(self):
        self.release = asyncio.Event()
        self.calls = 0

    async def __call__(self, scope, receive, send):
        self.calls += 1
        if scope["path"].startswith("/fail"):
            raise RuntimeError("the view failed")
        if scope["type"] == "websocket":
            await receive()
            await self.release.wait()
            await send({"type": "websocket.accept"})
            await receive()  # until the client closes
            return
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if scope["path"].startswith("/stream"):
            await self.release_stream.wait()
        await send({"type": "http.response.body", "body": b"ok"})


def bounded(app, limit=1, refusals=None, slots=None, tickets=None):
    return PendingBound(
        app,
        limit=limit,
        retry_slots=slots or RetrySlots(first=2.0, rate=10.0),
        socket_frame=refused,
        json_body=json_body,
        on_refused=(refusals.append if refusals is not None else lambda reason: None),
        exempt=("/healthz", "/metrics"),
        tickets=tickets,
    )


def request(app, path, method="GET", headers=()):
    scope = {"type": "http", "method": method, "path": path, "headers": list(headers), "query_string": b""}
    return ApplicationCommunicator(app, scope)


async def sent(app, path):
    """A request sent in, which the application holds while the test goes on."""
    communicator = request(app, path)
    await communicator.send_input({"type": "http.request", "body": b""})
    await asyncio.sleep(0.05)  # it is inside, waiting
    return communicator


async def response_of(communicator):
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(2)
    body = await communicator.receive_output(2)
    return start["status"], dict(start["headers"]), body["body"]


async def test_it_refuses_a_request_past_the_bound_with_busy_and_a_retry_time_of_its_own():
    inner, refusals = HeldApp(), []
    app = bounded(inner, refusals=refusals)
    held = await sent(app, "/c/1/")
    waits = set()
    for _ in range(12):
        status, headers, body = await response_of(request(app, "/api/conversations", "POST"))
        assert status == 429
        error = json.loads(body)["error"]
        assert error["code"] == "busy" and error["reason"] == "web_pending"
        assert error["retry_after"] >= 2.0
        assert headers[b"retry-after"] == str(max(1, round(error["retry_after"]))).encode()
        waits.add(error["retry_after"])
    assert len(waits) == 12, "refused clients were told to come back together"
    assert inner.calls == 1 and refusals == ["web_pending"] * 12
    inner.release.set()
    assert (await held.receive_output(2))["status"] == 200


async def test_a_refused_page_reloads_itself_and_the_openai_api_gets_its_own_shape():
    inner = HeldApp()
    app = bounded(inner)
    held = await sent(app, "/")
    status, headers, body = await response_of(request(app, "/", headers=[(b"accept", b"text/html,*/*")]))
    assert status == 429 and headers[b"content-type"].startswith(b"text/html")
    assert f'http-equiv="refresh" content="{headers[b"retry-after"].decode()}"'.encode() in body
    status, headers, body = await response_of(request(app, "/v1/models"))
    assert status == 429 and b"retry-after" in headers
    assert json.loads(body)["error"]["type"] == "rate_limit_error"
    assert json.loads(body)["error"]["code"] == "busy"
    inner.release.set()
    await held.receive_output(2)


def test_the_product_never_refuses_its_probes_nor_its_static_files():
    from chatsite.asgi import application

    assert application.exempt == ("/healthz", "/metrics", "/static/")
    assert application.limit == 64


async def test_health_and_metrics_are_never_refused():
    inner = HeldApp()
    app = bounded(inner)
    held = await sent(app, "/")
    probe = await sent(app, "/healthz/live")
    assert inner.calls == 2  # the probe reached the application
    inner.release.set()
    assert (await probe.receive_output(2))["status"] == 200
    await held.receive_output(2)


async def test_a_request_counts_until_its_response_starts_and_a_failure_gives_its_place_back():
    inner = HeldApp()
    inner.release_stream = asyncio.Event()
    app = bounded(inner)
    inner.release.set()
    streaming = request(app, "/stream")
    await streaming.send_input({"type": "http.request", "body": b""})
    assert (await streaming.receive_output(2))["status"] == 200
    # The stream still runs: it no longer counts, so the next request is served.
    status, _, _ = await response_of(request(app, "/c/1/"))
    assert status == 200
    with pytest.raises(RuntimeError):
        failing = request(app, "/fail")
        await failing.send_input({"type": "http.request", "body": b""})
        await failing.receive_output(2)
    status, _, _ = await response_of(request(app, "/c/2/"))
    assert status == 200
    inner.release_stream.set()
    assert app.pending == 0


class AdmittedApp(HeldApp):
    """An inner application that admits an answer (as the OpenAI API's non-streaming view does) and
    then holds its response until the test lets it: the answer runs, nothing is sent yet."""

    async def __call__(self, scope, receive, send):
        if scope["path"].startswith("/v1/"):
            self.calls += 1
            self.lease = await admission.admit_answer(redisconn.client(), user_id=987654)
            await self.release.wait()
            await admission.release_slot(redisconn.client(), self.lease)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"answer"})
            return
        await super().__call__(scope, receive, send)


async def test_a_request_whose_answer_admission_took_stops_counting_before_its_response_starts():
    inner = AdmittedApp()
    app = bounded(inner, limit=1)
    answer = await sent(app, "/v1/chat/completions")
    assert inner.calls == 1 and inner.lease
    assert app.pending == 0, "an admitted answer still holds the web process's pending bound"
    # The bound's one place is free: a page load is served meanwhile, not refused.
    other = request(app, "/c/1/")
    await other.send_input({"type": "http.request", "body": b""})
    await asyncio.sleep(0.05)
    assert inner.calls == 2
    inner.release.set()
    assert (await other.receive_output(2))["status"] == 200
    assert (await answer.receive_output(2))["status"] == 200
    assert app.pending == 0


def test_taken_outside_a_counted_request_does_nothing():
    pending.taken()


async def test_a_handshake_past_the_bound_is_told_busy_and_closed_with_4429():
    inner = HeldApp()
    app = bounded(inner)
    waiting = WebsocketCommunicator(app, "/ws/chat/")
    waiting_task = asyncio.ensure_future(waiting.connect(timeout=3))
    await asyncio.sleep(0.05)
    refused_socket = WebsocketCommunicator(app, "/ws/chat/")
    connected, _ = await refused_socket.connect(timeout=2)
    assert connected  # accepted only to say why it closes: a close before accept reads as HTTP 403
    frame = await refused_socket.receive_json_from(timeout=2)
    assert frame["type"] == "chat.error" and frame["code"] == "busy" and frame["reason"] == "web_pending"
    assert frame["retry_after"] >= 2.0
    assert (await refused_socket.receive_output(2)) == {"type": "websocket.close", "code": TRY_AGAIN_LATER}
    inner.release.set()
    connected, _ = await waiting_task
    assert connected
    # Accepted: its place is given back, and the next handshake goes through.
    another = WebsocketCommunicator(app, "/ws/chat/")
    connected, _ = await another.connect(timeout=2)
    assert connected and await another.receive_nothing(0.2)
    assert inner.calls == 2
    await waiting.disconnect()
    await another.disconnect()


async def test_a_socket_back_at_its_slot_is_taken_past_the_bound_up_to_its_ceiling():
    """The refusal's frame carries its slot as a ticket; a socket that brings it back when it is due
    is taken though the bound is full (any process of the fleet would), up to TICKET_CEILING times
    the bound."""
    now = [1000.0]
    tickets = SlotTickets(b"fleet key", clock=lambda: now[0])
    inner = HeldApp()
    app = bounded(inner, limit=1, tickets=tickets)
    held = [WebsocketCommunicator(app, "/ws/chat/")]
    opening = [asyncio.ensure_future(held[0].connect(timeout=3))]
    await asyncio.sleep(0.05)

    refusal = WebsocketCommunicator(app, "/ws/chat/")
    assert (await refusal.connect(timeout=2))[0]
    frame = await refusal.receive_json_from(timeout=2)
    slot = frame["slot"]
    assert frame["reason"] == "web_pending" and not tickets.due(slot), "due before its slot"
    now[0] += frame["retry_after"]
    assert tickets.due(slot)

    async def tried(path: str) -> str:
        socket = WebsocketCommunicator(app, path)
        task = asyncio.ensure_future(socket.connect(timeout=3))
        await asyncio.sleep(0.05)
        if task.done():  # refused: accepted only to say so
            await socket.receive_json_from(timeout=2)
            return "refused"
        held.append(socket)
        opening.append(task)
        return "taken"

    forged = slot.rsplit(".", 1)[0] + ".0" + slot.rsplit(".", 1)[1][1:]
    assert await tried(f"/ws/chat/?slot={forged}") == "refused"
    for _ in range(TICKET_CEILING - 1):
        assert await tried(f"/ws/chat/?slot={slot}") == "taken"
    assert await tried(f"/ws/chat/?slot={slot}") == "refused", "past the ceiling"
    inner.release.set()
    for task in opening:
        assert (await task)[0]
    now[0] += 60  # long past its slot: the ticket has lapsed
    inner.release.clear()
    held.append(WebsocketCommunicator(app, "/ws/chat/"))
    opening = [asyncio.ensure_future(held[-1].connect(timeout=3))]
    await asyncio.sleep(0.05)
    assert await tried(f"/ws/chat/?slot={slot}") == "refused"
    inner.release.set()
    await opening[0]
    for socket in held:
        await socket.disconnect()


async def test_no_bound_when_the_limit_is_zero():
    inner = HeldApp()
    app = bounded(inner, limit=0)
    held = [request(app, f"/c/{n}/") for n in range(5)]
    for communicator in held:
        await communicator.send_input({"type": "http.request", "body": b""})
    await asyncio.sleep(0.05)
    assert inner.calls == 5
    inner.release.set()
    for communicator in held:
        assert (await communicator.receive_output(2))["status"] == 200


def failed(path: str, error: Exception, **headers):
    """What the 500 handler answers for a request to `path` that failed with `error`."""
    try:
        raise error
    except Exception:
        return server_error(RequestFactory().get(path, **headers))


def pool_timeout() -> Exception:
    """A database error as Django raises it when the pool lent no connection in time."""
    try:
        raise PoolTimeout("couldn't get a connection after 10.00 sec")
    except PoolTimeout as timeout:
        try:
            raise OperationalError(str(timeout)) from timeout
        except OperationalError as error:
            return error


def test_a_request_that_waited_out_the_database_pool_is_busy_not_an_error():
    response = failed("/api/conversations", pool_timeout())
    assert response.status_code == 429 and response["Retry-After"] == "2"
    error = json.loads(response.content)["error"]
    assert error["code"] == "busy" and error["reason"] == "database_pool" and error["retry_after"] == 2.0
    openai = json.loads(failed("/v1/chat/completions", pool_timeout()).content)["error"]
    assert openai["type"] == "rate_limit_error" and openai["code"] == "busy"


def test_a_page_that_waited_out_the_pool_reloads_itself():
    response = failed("/", pool_timeout(), HTTP_ACCEPT="text/html")
    assert response.status_code == 429 and response["Retry-After"] == "2"
    assert b'http-equiv="refresh" content="2"' in response.content


def test_any_other_failure_is_still_a_server_error():
    assert failed("/api/conversations", OperationalError("server closed the connection")).status_code == 500
    assert failed("/", RuntimeError("a bug")).status_code == 500
