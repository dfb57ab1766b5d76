"""A logout published while Redis restarts is lost with it, and still closes the login's sockets:
once the web process's notice subscription is up again, every socket checks its login (chat.sockets).
Real daphne and the bundled Redis, stopped and started again on its port by the test."""

from contextlib import ExitStack

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from harness.processes import free_port, redis_serving
from tests.chat.test_chat_end_to_end import close_code
from tests.support.chat_client import open_chat, receive, send
from tests.support.product import running_daphne

pytestmark = pytest.mark.django_db(transaction=True)


def logged_in(user) -> Client:
    browser = Client()
    browser.force_login(user)
    return browser


def test_a_logout_published_while_redis_restarts_still_closes_the_logins_sockets(settings):
    # No answer is asked for: an engine that does not answer is enough.
    dead_engine = f"http://127.0.0.1:{free_port()}"
    redis_url = f"redis://:restart-{free_port()}@127.0.0.1:{free_port()}/0"
    user = get_user_model().objects.create_user("rita", password="pw-rita-123")
    leaving, staying = logged_in(user), logged_in(user)
    with ExitStack() as site, ExitStack() as redis_up:
        redis_up.enter_context(redis_serving(redis_url, bundled=True))
        server = site.enter_context(running_daphne(dead_engine, REDIS_URL=redis_url))
        ws_url = server.url.replace("http://", "ws://") + "/ws/chat/"
        leaving_ws = open_chat(ws_url, server.url, user, cookie=leaving.cookies["sessionid"].value)
        staying_ws = open_chat(ws_url, server.url, user, cookie=staying.cookies["sessionid"].value)
        settings.REDIS_URL = redis_url  # the logout publishes where the web process listens

        redis_up.close()
        # Redis is down: the logout's notice is not published, and the session is gone.
        assert leaving.post("/accounts/logout/").status_code == 302
        redis_up.enter_context(redis_serving(redis_url, bundled=True))

        assert close_code(leaving_ws, within=60) == 4401
        # The other browser's login still holds: its socket is open and answers.
        send(staying_ws, {"type": "chat.stop", "message": 999999})
        assert receive(staying_ws, timeout=10)["type"] == "chat.error"
        staying_ws.close()
