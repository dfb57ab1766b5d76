"""`make run` serves the product as users get it: production mode with nothing set, on a fresh data
folder, as from a fresh clone. Its secret key is made once and kept there, readable by its owner only;
the accounts' random passwords are printed and kept there too, and log in over plain HTTP on this host,
where the chat answers over its WebSocket; static files come from collectstatic's folder; a revoked
share link and another user's conversation get the product's 404 page, styled in both themes, never
Django's debug page.

The web process alone (`PROCESSES=web`) on the suite's engine and Redis: the other processes are
test_supervised_processes.py's, and nothing here needs another engine's minute of start-up."""

import os
import re
import signal
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from harness.processes import ROOT, free_port, stop_group
from harness.supervision import answers
from harness.waiting import wait_for
from tests.support.chat_client import collect_answer, open_chat, send
from tests.support.product import LOGS

# What the suite's own environment sets and a person typing `make run` has not.
NOT_FROM_THE_SUITE = {
    "DEBUG",
    "SECRET_KEY",
    "SECRET_KEY_FILE",
    "ALLOWED_HOSTS",
    "SECURE_COOKIES",
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SECURE_PROXY_SSL_HEADER",
    "DATABASE_URL",
    "DEMO_PASSWORD",
    "STAFF_PASSWORD",
    "MONITORING_METRICS_TOKEN",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
    "PROMETHEUS_MULTIPROC_DIR",
    # From `make test` around the suite: a make of its own, not a sub-make of that one.
    "MAKEFLAGS",
    "MFLAGS",
    "MAKELEVEL",
}
# chat.css's dark background, as tests/browser/test_chat_extras_browser.py knows it.
DARK_BACKGROUND = "rgb(23, 24, 28)"


@dataclass(frozen=True)
class MadeRun:
    base: str
    data_dir: Path
    log: Path

    def output(self) -> str:
        return self.log.read_text()

    def password(self, username: str) -> str:
        """The password `make run` printed for an account it created."""
        found = re.search(rf"^ +(?:user|staff) +{username} / (\S+)  \(created", self.output(), re.MULTILINE)
        assert found, self.output()
        return found.group(1)


@pytest.fixture(scope="module")
def made_run(engine_url, redis_server, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("make-run") / "data"
    port = free_port()
    env = {name: value for name, value in os.environ.items() if name not in NOT_FROM_THE_SUITE}
    env.update(
        DATA_DIR=str(data_dir),
        WEB_PORT=str(port),
        REDIS_URL=settings.REDIS_URL,
        INFERENCE_URL=engine_url,
        # The model the suite's engine serves, prepared under the checkout's data folder.
        INFERENCE_MODEL=settings.INFERENCE_MODEL,
    )
    log = LOGS / "test-make-run.log"
    # -o: the virtual environment is there; never reinstall it in the middle of a test run.
    command = ["make", "--no-print-directory", "-o", ".venv/bin/.installed", "run", "PROCESSES=web"]
    with open(log, "w") as output:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"make run exited ({process.returncode}); see {log}")
        return answers(base + "/accounts/login/")

    try:
        wait_for(up, 180, "make run")
        yield MadeRun(base, data_dir, log)
    finally:
        # Ctrl-C: the terminal signals make's whole process group.
        stop_group(process, signal.SIGINT, 90)


def log_in(client: httpx.Client, site: MadeRun, username: str) -> httpx.Response:
    """Log in through the form, over plain HTTP, as a browser on this host does."""
    assert client.get("/accounts/login/").status_code == 200
    login = client.post(
        "/accounts/login/",
        data={
            "username": username,
            "password": site.password(username),
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
        },
        headers={"Origin": site.base},
    )
    assert login.status_code == 302 and login.headers["Location"] == "/", login.text[:300]
    return login


@contextmanager
def logged_in(site: MadeRun, username: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=site.base, timeout=30) as client:
        log_in(client, site, username)
        yield client


def post_json(client: httpx.Client, site: MadeRun, path: str, body: dict) -> httpx.Response:
    headers = {"X-CSRFToken": client.cookies["csrftoken"], "Origin": site.base}
    return client.post(path, json=body, headers=headers)


def answered_conversation(client: httpx.Client, site: MadeRun) -> int:
    """A conversation with one short finished answer from the engine, over the chat's WebSocket
    (its Origin checked against make run's ALLOWED_HOSTS)."""
    made = post_json(client, site, "/c/new", {"settings": {"max_tokens": 8}})
    assert made.status_code == 201, made.text
    conversation = made.json()["id"]
    ws_url = site.base.replace("http://", "ws://") + "/ws/chat/"
    with open_chat(ws_url, site.base, None, cookie=client.cookies["sessionid"]) as ws:
        send(ws, {"type": "chat.send", "conversation": conversation, "content": "Say hello."})
        _, _, done = collect_answer(ws)
    assert done["type"] == "chat.done" and done["status"] == "complete", done
    return conversation


def assert_the_products_404_page(response: httpx.Response) -> None:
    assert response.status_code == 404
    page = response.text
    assert '<p class="error-code">404</p>' in page and "Back to the chat" in page
    # Not Django's debug page, which lists every URL pattern of the site.
    assert "URLconf" not in page and "api/conversations/" not in page and "DEBUG" not in page


def test_it_makes_the_secret_key_once_and_keeps_it_readable_by_its_owner_only(made_run):
    key_file = made_run.data_dir / "secret-key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    assert len(key) >= 50
    assert "production mode" in made_run.output()
    # The next `make run` keeps it: sessions outlive a restart.
    again = subprocess.run(
        ["make", "--no-print-directory", "DATA_DIR=" + str(made_run.data_dir), str(key_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}},
    )
    assert "is up to date" in again.stdout, again.stdout + again.stderr
    assert key_file.read_text().strip() == key


def test_it_prints_the_random_passwords_and_keeps_them_in_the_data_folder(made_run):
    kept = made_run.data_dir / "initial-passwords"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    for username in (settings.DEMO_USERNAME, settings.STAFF_USERNAME):
        password = made_run.password(username)
        assert password not in settings.DEFAULT_PASSWORDS and len(password) >= 16
        assert f"\n{username} {password}\n" in kept.read_text()
        assert f"{username} / {password}  (created; kept in {kept})" in made_run.output()


def test_it_logs_in_over_plain_http_on_this_host(made_run):
    with httpx.Client(base_url=made_run.base, timeout=30) as client:
        login = log_in(client, made_run, settings.DEMO_USERNAME)
        cookies = SimpleCookie()
        for header in login.headers.get_list("Set-Cookie"):
            cookies.load(header)
        # Not HTTPS-only: there is no HTTPS on this host, and a browser would never send it back.
        assert not cookies["sessionid"]["secure"] and cookies["sessionid"]["httponly"]
        chat = client.get("/")
        assert chat.status_code == 200 and 'id="composer"' in chat.text
        assert "Strict-Transport-Security" not in chat.headers
        assert chat.headers["X-Frame-Options"] == "DENY"


def test_it_serves_the_collected_static_files(made_run):
    # frontend: the chat page's static folder kept its name when the chat's package became chat/.
    collected = made_run.data_dir / "static" / "frontend" / "chat.css"
    assert collected.exists()
    for path in ("/static/frontend/chat.css", "/static/errors/errors.css", "/static/frontend/chat.js"):
        response = httpx.get(made_run.base + path)
        assert response.status_code == 200, path
    assert httpx.get(made_run.base + "/static/frontend/chat.css").text == collected.read_text()


def test_a_revoked_share_link_and_another_users_conversation_get_the_products_404_page(made_run):
    with logged_in(made_run, settings.DEMO_USERNAME) as demo:
        conversation = answered_conversation(demo, made_run)
        shared = post_json(demo, made_run, f"/c/{conversation}/share", {})
        assert shared.status_code == 201, shared.text
        link = shared.json()["url"]
        assert httpx.get(link).status_code == 200
        assert post_json(demo, made_run, f"/c/{conversation}/unshare", {}).json() == {"revoked": 1}
    assert_the_products_404_page(httpx.get(link))

    with logged_in(made_run, settings.STAFF_USERNAME) as admin:
        theirs = admin.get(f"/c/{conversation}/")
        assert_the_products_404_page(theirs)
        assert admin.get(f"/c/{conversation + 1000}/").text == theirs.text
    assert_the_products_404_page(httpx.get(made_run.base + "/no/such/page/"))


STYLE = "(e) => { const s = getComputedStyle(e); return [s.backgroundColor, s.color]; }"
# chat.css's colour variables, as the page's theme resolves them.
PALETTE = """() => {
    const probe = document.createElement('div');
    document.body.append(probe);
    const colour = (name) => { probe.style.color = `var(${name})`; return getComputedStyle(probe).color; };
    const palette = {bg: colour('--bg'), panel: colour('--panel'), text: colour('--text')};
    probe.remove();
    return palette;
}"""


def look_of_the_404_page(browser, site: MadeRun, system: str, chosen: str | None) -> dict:
    """The 404 page's colours in Chromium with the system's `system` colour scheme and the user's
    `chosen` theme (theme.js's localStorage), and what failed to load or logged an error."""
    context = browser.new_context(color_scheme=system)
    try:
        page = context.new_page()
        problems = []
        page.on("console", lambda message: message.type == "error" and problems.append(message.text))
        # A request the browser itself gave up (a favicon fetch cut by the next navigation) is no fault.
        page.on(
            "requestfailed",
            lambda request: request.failure != "net::ERR_ABORTED" and problems.append(request.url),
        )
        page.goto(site.base + "/no/such/page/")
        if chosen:
            page.evaluate(f"() => localStorage.setItem('theme', '{chosen}')")
            page.reload()
        page.screenshot(path=LOGS / f"error-404-{system}-{chosen or 'auto'}.png")
        return {
            "body": page.eval_on_selector("body", STYLE),
            "card": page.eval_on_selector(".error-page", STYLE)[0],
            "link": page.eval_on_selector("a.error-home", STYLE),
            "palette": page.evaluate(PALETTE),
            "heading": page.inner_text("h1"),
            "href": page.get_attribute("a.error-home", "href"),
            # The 404 of the page itself is logged as an error; anything else is a problem.
            "problems": [problem for problem in problems if "404" not in problem],
        }
    finally:
        context.close()


def test_the_404_page_is_styled_in_both_themes(browser, made_run):
    # The system's choice ("auto"), and the user's own over the opposite system choice.
    looks = {
        (system, chosen): look_of_the_404_page(browser, made_run, system, chosen)
        for system, chosen in (("light", None), ("dark", None), ("dark", "light"), ("light", "dark"))
    }
    for look in looks.values():
        # Painted in the chat's colours (chat.css's variables), with a way back to the chat.
        palette = look["palette"]
        assert look["body"] == [palette["bg"], palette["text"]] and look["card"] == palette["panel"]
        assert look["link"][1] == "rgb(255, 255, 255)" and look["href"] == "/"
        assert look["heading"] == "Not found" and look["problems"] == []
    light, dark = looks["light", None], looks["dark", None]
    assert dark["body"][0] == DARK_BACKGROUND and light["body"][0] != DARK_BACKGROUND
    assert looks["dark", "light"] == light and looks["light", "dark"] == dark
