"""A storm of handshakes and page loads at a real web process (daphne, the test database, Redis)
bounded at one waiting at a time (WEB_MAX_PENDING=1): each is served or refused at once with `busy`,
its retry time and, for a socket, close code 4429; nothing fails otherwise, and every client that
waits as told gets through. The session's expiry comes from the handshake's own read of its row."""

import asyncio
import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from accounts.sessions import SessionStore
from harness.waiting import wait_for
from tests.support.chat_client import session_cookie
from tests.support.product import running_daphne

pytestmark = pytest.mark.django_db(transaction=True)

STORM = 24


@pytest.fixture(scope="module")
def bounded_server(django_db_setup, django_db_blocker, engine_url):
    # One user's STORM sockets at once: the per-user bound on sockets (20) is not what is tested.
    with running_daphne(engine_url, WEB_MAX_PENDING="1", CHAT_MAX_SOCKETS_PER_USER="100") as server:
        yield server


async def handshake(url: str, origin: str, cookie: str) -> dict | None:
    """Open a chat socket: None when accepted (it stays quiet), or the refusal frame with the close
    code it came with. The client runs on asyncio: the frame and the close arrive together, and
    a client late to answer the close (the server waits 1 s, then resets) still reads the frame,
    which websockets' threaded client drops when its reply to the close fails."""
    cookie_header = {"Cookie": f"sessionid={cookie}"}
    async with connect(url, origin=origin, additional_headers=cookie_header, open_timeout=30) as ws:
        try:
            frame = json.loads(await asyncio.wait_for(ws.recv(), timeout=1.0))
        except TimeoutError:
            return None
        try:
            await asyncio.wait_for(ws.recv(), timeout=5)
        except ConnectionClosed as closed:
            return {**frame, "close": closed.rcvd.code}
        raise AssertionError(f"a refused socket stayed open after {frame}")


async def handshakes(url: str, origin: str, cookies: list[str]) -> list[dict | None]:
    """Every cookie's handshake at once."""
    return await asyncio.gather(*(handshake(url, origin, cookie) for cookie in cookies))


def storm(attempt, clients: int) -> list:
    barrier = threading.Barrier(clients)
    with ThreadPoolExecutor(clients) as pool:
        return list(pool.map(lambda _: attempt(barrier), range(clients)))


def test_a_storm_of_handshakes_is_served_or_told_busy_and_every_retry_gets_through(bounded_server):
    user = get_user_model().objects.create_user("storm", password="pw-storm-123")
    cookies = [session_cookie(user) for _ in range(STORM)]
    url = bounded_server.url.replace("http://", "ws://") + "/ws/chat/"
    origin = bounded_server.url
    refusals = []
    # Every handshake reads the session and the user through the process's database thread, so
    # STORM of them released at once overlap; a round where the process kept up is tried again.
    for _ in range(5):
        outcomes = asyncio.run(handshakes(url, origin, cookies))
        refusals = [outcome for outcome in outcomes if outcome is not None]
        if refusals:
            break
    assert refusals, "no handshake of the storm was ever refused at a bound of one"
    for refusal in refusals:
        assert refusal["type"] == "chat.error" and refusal["code"] == "busy", refusal
        # Each refusal holds a slot of its own, the first free one 2 s away at the soonest; how far
        # apart they are follows the process's measured rate (tests/chat/test_retry_slots.py).
        assert refusal["reason"] == "web_pending" and refusal["retry_after"] >= 2.0
        assert refusal["close"] == 4429
    # Each refused client, trying again alone, is served.
    for cookie in cookies[: len(refusals)]:
        assert asyncio.run(handshake(url, origin, cookie)) is None
    metrics = httpx.get(bounded_server.url + "/metrics").text
    assert 'reason="web_pending"' in metrics


def test_a_storm_of_page_loads_gets_pages_or_busy_never_an_error(bounded_server):
    user = get_user_model().objects.create_user("pages", password="pw-pages-123")
    cookie = session_cookie(user)

    def load(barrier):
        barrier.wait()
        page = {"cookies": {"sessionid": cookie}, "headers": {"Accept": "text/html"}}
        return httpx.get(bounded_server.url + "/", timeout=30, **page)

    statuses = set()
    for _ in range(5):
        responses = storm(load, STORM)
        statuses = {r.status_code for r in responses}
        assert statuses <= {200, 429}, statuses
        if 429 in statuses:
            break
    assert statuses == {200, 429}
    busy = next(r for r in responses if r.status_code == 429)
    assert int(busy.headers["Retry-After"]) >= 2  # a slot of its own, 2 s away at the soonest
    assert f'content="{busy.headers["Retry-After"]}"' in busy.text  # the page reloads itself then
    # Health is never refused: a probe at a busy process must not read as a dead one.
    assert httpx.get(bounded_server.url + "/healthz/live").status_code == 200


def test_the_session_store_keeps_the_expiry_its_read_found():
    store = SessionStore()
    store["answer"] = 42
    store.set_expiry(timezone.now() + timedelta(minutes=5))
    store.save()
    loaded = SessionStore(session_key=store.session_key)
    assert loaded.expire_date is None
    assert loaded["answer"] == 42
    assert abs(loaded.expire_date - (timezone.now() + timedelta(minutes=5))) < timedelta(seconds=5)
    assert SessionStore(session_key="no-such-session-key").load() == {}


def test_a_non_streaming_api_answer_stops_counting_as_pending_once_admitted():
    """One place pending (WEB_MAX_PENDING=1) and an API answer that never finishes (the engine sends
    its text and stalls): its response cannot start, yet a page load is served meanwhile."""
    from apitokens.services import token_issue
    from harness.stand_in_engine import STALL, StandInEngine, serving

    user = get_user_model().objects.create_user("held", password="pw-held-12345")
    _, key = token_issue(user=user, scopes=["openai"])
    stand_in = StandInEngine(text="never ending", fault=STALL, record=True)
    with (
        serving(stand_in) as engine,
        running_daphne(engine, WEB_MAX_PENDING="1", WEB_DRAIN_SECONDS="1") as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        body = json.dumps(
            {"model": settings.INFERENCE_MODEL_NAME, "messages": [{"role": "user", "content": "hi"}]}
        )
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as held:
            held.sendall(
                (
                    f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}"
                ).encode()
            )
            wait_for(lambda: stand_in.requests, 30, "the API answer admitted and sent to the engine")
            held.settimeout(0.5)
            with pytest.raises(TimeoutError):
                held.recv(1)  # its response has not started
            page = http.get("/accounts/login/", headers={"Accept": "text/html"})
            assert page.status_code == 200, page.text[:200]
