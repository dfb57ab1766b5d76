"""An answer outlives the process that generates it, against the real engine, Redis, supervisord and
nginx: a web process killed (SIGKILL) or restarted (SIGTERM, as every deploy restarts it), both web
processes of a site restarted one after the other, Redis killed and started again from its
append-only file. Each reader is a client as the page is one: it shows every token it is sent,
reconnects every second when its socket goes, and resumes after the last token it has shown. What
it has shown must be the whole answer, in order, once, and what the store holds."""

import json
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis
from django.contrib.auth import get_user_model
from websockets.exceptions import ConnectionClosed, WebSocketException

from apitokens.services import token_issue
from chat.consumers import RESTARTING
from conversations.models import Message
from deploy.supervisor import Topology, write
from harness.processes import free_port, ports_in_a_row
from harness.supervision import BIN, Site, Supervisord, answers, supervisord_running
from harness.waiting import wait_for
from redisconn import keys
from tests.support.chat_client import long_answer_conversation, open_chat, receive, send, session_cookie
from tests.support.product import LOGS, product_env, redis_with_its_file, running_daphne

pytestmark = pytest.mark.django_db(transaction=True)

# A restarted process drains this long before it hands its answers over: shorter than an answer.
DRAIN_SECONDS = 3
# Sockets that follow no answer leave a draining process this many a second (WEB_DRAIN_SOCKETS_PER_SECOND).
DRAIN_SOCKETS_PER_SECOND = 4
IDLE_SOCKETS = 6
# Long enough by construction to be running through every fault below (min_tokens = max_tokens).
ANSWER_TOKENS = 1024


@dataclass
class Reader:
    """One reader of one answer, through faults: what it was shown, in order, and how it ended."""

    ws_url: str
    origin: str
    user: object
    message: int = 0
    shown: list[tuple[int, str]] = field(default_factory=list)
    end: dict | None = None
    reconnects: int = 0
    ws: object = None
    arrivals: list[float] = field(default_factory=list)
    cookie: str = ""
    notices: list[str] = field(default_factory=list)

    def ask(self, content: str, tokens: int = ANSWER_TOKENS) -> "Reader":
        """Send a message whose answer runs to `tokens`; read up to its first token."""
        # One session, made here: the reconnects may run in threads with no database connection.
        self.cookie = session_cookie(self.user)
        self.ws = open_chat(self.ws_url, self.origin, self.user, cookie=self.cookie)
        conversation = long_answer_conversation(self.user, max_tokens=tokens)
        send(self.ws, {"type": "chat.send", "conversation": conversation, "content": content})
        started = receive(self.ws)
        assert started["type"] == "chat.started", started
        self.message = started["message"]
        while not self.shown:
            self._take(receive(self.ws))
        return self

    def until_shown(self, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while len(self.shown) < count and self.end is None:
            self._read(deadline)

    def follow(self, timeout: float = 300) -> dict:
        """Read to the answer's end, reconnecting and resuming whenever the socket goes."""
        deadline = time.monotonic() + timeout
        while self.end is None:
            self._read(deadline)
        self.ws.close()
        return self.end

    def _read(self, deadline: float) -> None:
        assert time.monotonic() < deadline, f"answer {self.message}: no end after {len(self.shown)} tokens"
        try:
            if self.ws is None:
                self.ws = open_chat(self.ws_url, self.origin, self.user, cookie=self.cookie)
                after = self.shown[-1][0] if self.shown else -1
                send(self.ws, {"type": "chat.resume", "message": self.message, "after": after})
            self._take(receive(self.ws, timeout=10))
        except (OSError, TimeoutError, WebSocketException):
            # The process went (or is draining and refuses new sockets): as the page does.
            self.ws = None
            self.reconnects += 1
            time.sleep(1)

    def _take(self, frame: dict) -> None:
        if frame["type"] == "chat.token":
            self.shown.append((frame["seq"], frame["text"]))
            self.arrivals.append(time.monotonic())
        elif frame["type"] == "chat.error" and frame["code"] in {"stream_unavailable", "redis_unavailable"}:
            self.ws.close()  # the page resumes
        elif frame["type"] == "chat.notice":
            self.notices.append(frame["code"])
        elif frame["type"] in {"chat.done", "chat.error"}:
            self.end = frame

    def longest_wait(self) -> float:
        """The longest the reader waited for its next token: the fault, as a reader lived it."""
        return max(b - a for a, b in zip(self.arrivals, self.arrivals[1:], strict=False))

    def check(self) -> None:
        """One gapless answer, shown once, complete, stored as shown."""
        assert [seq for seq, _ in self.shown] == list(range(len(self.shown))), "a gap or a repeat"
        text = "".join(text for _, text in self.shown)
        assert (self.end["type"], self.end.get("status")) == ("chat.done", "complete"), self.end
        assert self.end["content"] == text
        stored = Message.objects.get(pk=self.message)
        assert (stored.status, stored.content) == ("complete", text)


def in_threads(readers: list[Reader]) -> None:
    """Follow every reader to its end at once."""
    errors = []

    def follow(reader: Reader) -> None:
        try:
            reader.follow()
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=follow, args=(reader,)) for reader in readers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def owner_pid(site: "OwnSite", message_id: int) -> int:
    process = redis.Redis.from_url(site.redis).hget(keys.chat_answer_owner(message_id), "process")
    return int(process.decode().rsplit(":", 1)[1])


def restart(supervisor: Supervisord, program: str) -> None:
    """`supervisorctl restart`: SIGTERM (the process drains), then started again."""
    command = [BIN / "supervisorctl", "-c", supervisor.conf, "restart", program]
    subprocess.run(command, check=True, capture_output=True, timeout=120)


@dataclass(frozen=True)
class OwnSite(Site):
    """A site on a Redis of its own (`redis`)."""

    redis: str


@contextmanager
def supervised_site(engine_url: str, run_dir: Path, topology: Topology):
    """The site under supervisord, on a Redis of its own: no other web process of the suite (the
    session's daphne) may take over its answers."""
    with redis_with_its_file(port := free_port(), run_dir):
        with supervised(engine_url, run_dir, topology, REDIS_URL=f"redis://127.0.0.1:{port}/0") as site:
            yield site


@contextmanager
def supervised(engine_url: str, run_dir: Path, topology: Topology, **env: str):
    write(run_dir, topology)
    metrics = run_dir / "metrics"
    metrics.mkdir()
    environment = product_env(
        engine_url,
        RUN_DIR=str(run_dir),
        WEB_PORT=str(topology.web_port),
        WEB_DRAIN_SECONDS=str(DRAIN_SECONDS),
        WEB_DRAIN_SOCKETS_PER_SECOND=str(DRAIN_SOCKETS_PER_SECOND),
        PROMETHEUS_MULTIPROC_DIR=str(metrics),
        **env,
    )
    log = LOGS / f"test-takeover-{run_dir.name}.log"
    with supervisord_running(run_dir / "supervisord.conf", environment, log) as supervisor:
        site = OwnSite(f"http://127.0.0.1:{topology.web_port}", supervisor, environment["REDIS_URL"])
        wait_for(lambda: answers(site.base + "/healthz/ready"), 90, "the site")
        yield site


@pytest.fixture(scope="module")
def single(django_db_setup, engine_url, tmp_path_factory):
    """`make run`'s web process, alone under supervisord."""
    port = free_port()
    with supervised_site(
        engine_url, tmp_path_factory.mktemp("single"), Topology(["web"], web_port=port)
    ) as site:
        yield site


@pytest.fixture(scope="module")
def cluster(django_db_setup, engine_url, tmp_path_factory):
    """`make run TOPOLOGY=cluster`: nginx in front of two web processes."""
    port = ports_in_a_row(3)
    topology = Topology(["web", "nginx"], web_port=port, web_processes=2)
    with supervised_site(engine_url, tmp_path_factory.mktemp("cluster"), topology) as site:
        for backend in range(2):
            wait_for(lambda b=backend: answers(f"http://127.0.0.1:{port + 1 + b}/healthz/live"), 90, "web")
        yield site


def active_answers(site: OwnSite) -> float:
    text = httpx.get(site.base + "/metrics", timeout=10).text
    line = next(line for line in text.splitlines() if line.startswith("chat_active_generations "))
    return float(line.split()[1])


def user(name: str):
    return get_user_model().objects.create_user(name, password=f"pw-{name}-123456")


def test_an_answer_whose_web_process_is_killed_is_continued_and_completes_as_shown(single):
    reader = Reader(single.ws_url, single.base, user("kim")).ask("Write a long story about harbours.")
    reader.until_shown(10)
    victim = single.supervisor.pid("web")
    assert owner_pid(single, reader.message) == victim
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    written = len(redis.Redis.from_url(single.redis).xrange(keys.chat_stream(reader.message))) - 1
    reader.until_shown(written + 1)  # the first token the dead process did not make
    continued_after = time.monotonic() - killed
    reader.follow()
    reader.check()
    assert owner_pid(single, reader.message) == single.supervisor.pid("web")  # the new process took it over
    assert reader.reconnects >= 1
    print(f"SIGKILL: the answer continued {continued_after:.1f} s after the kill, at token {written}")
    # Nothing runs now: the killed process's gauge is not in the sum.
    wait_for(lambda: active_answers(single) == 0, 30, "Active answers back to 0")
    # A resume of the ended answer gets its end at once.
    with open_chat(single.ws_url, single.base, reader.user) as ws:
        asked = time.monotonic()
        send(ws, {"type": "chat.resume", "message": reader.message, "after": reader.shown[-1][0]})
        end = receive(ws, timeout=5)
        assert end["type"] == "chat.done" and time.monotonic() - asked < 2


def closed_at(ws, into: list) -> None:
    """Wait for `ws` to be closed by the server; note when, and with which code."""
    try:
        ws.recv(timeout=60)
    except ConnectionClosed as closed:
        into.append((time.monotonic(), closed.rcvd.code if closed.rcvd else None))


def test_a_restart_drains_the_web_process_and_its_successor_continues_the_answer(single):
    reader = Reader(single.ws_url, single.base, user("lee")).ask("Write a long story about bridges.")
    reader.until_shown(5)
    idle_user, closes = user("ida"), []
    idle = [open_chat(single.ws_url, single.base, idle_user) for _ in range(IDLE_SOCKETS)]
    waiting = [threading.Thread(target=closed_at, args=(ws, closes)) for ws in idle]
    for thread in waiting:
        thread.start()
    before = single.supervisor.pid("web")
    restarting = threading.Thread(target=restart, args=(single.supervisor, "web"))
    restarting.start()
    # While it drains, the answer goes on streaming to the socket it serves.
    reader.until_shown(len(reader.shown) + 5)
    # The sockets that follow no answer are sent away meanwhile (4012), at the drain's rate:
    # the nth no sooner than n / rate after the first.
    for thread in waiting:
        thread.join(30)
    assert [code for _, code in closes] == [RESTARTING] * IDLE_SOCKETS, closes
    times = sorted(t for t, _ in closes)
    assert times[-1] - times[0] >= 0.5 * (IDLE_SOCKETS - 1) / DRAIN_SOCKETS_PER_SECOND, times
    restarting.join()
    assert single.supervisor.pid("web") not in {0, before}
    reader.follow()
    reader.check()
    assert owner_pid(single, reader.message) == single.supervisor.pid("web")
    print(f"SIGTERM: the reader waited at most {reader.longest_wait():.1f} s for a token")


def test_through_nginx_a_killed_process_s_answer_reaches_websocket_and_sse_readers_whole(cluster):
    asker = user("max")
    reader = Reader(cluster.ws_url, cluster.base, asker).ask("Write a long story about lanterns.")
    reader.until_shown(10)
    os.kill(owner_pid(cluster, reader.message), signal.SIGKILL)
    # An SSE client resumes through nginx with Last-Event-ID, from its token 4.
    _, token = token_issue(user=asker, scopes=("chat",))
    sse: list[dict] = []
    with httpx.stream(
        "GET",
        cluster.base + f"/chat/stream?message={reader.message}",
        headers={"Authorization": f"Bearer {token}", "Last-Event-ID": "4"},
        timeout=300,
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                sse.append(json.loads(line.removeprefix("data: ")))
    reader.follow()
    reader.check()
    assert "".join(event.get("token", "") for event in sse) == "".join(text for _, text in reader.shown[5:])
    assert sse[-1]["done"] and sse[-1]["status"] == "complete"


def test_a_rolling_restart_of_both_web_processes_interrupts_none_of_eight_answers(cluster):
    readers = [
        Reader(cluster.ws_url, cluster.base, user(f"roll{i}")).ask(f"Write a long story about ship {i}.")
        for i in range(8)
    ]
    for program in ("web-0", "web-1"):
        assert all(Message.objects.get(pk=r.message).status == "generating" for r in readers), "ended early"
        restart(cluster.supervisor, program)
    in_threads(readers)
    for reader in readers:
        reader.check()
    print(
        f"rolling restart: readers waited at most {max(r.longest_wait() for r in readers):.1f} s for a token"
    )


def test_answers_streaming_while_redis_is_killed_and_started_again_all_complete(engine_url, tmp_path):
    port = free_port()
    with redis_with_its_file(port, tmp_path) as first:
        with running_daphne(engine_url, REDIS_URL=f"redis://127.0.0.1:{port}/0") as server:
            ws_url = server.url.replace("http://", "ws://") + "/ws/chat/"
            readers = [
                Reader(ws_url, server.url, user(f"red{i}")).ask(f"Write a long poem about river {i}.")
                for i in range(4)
            ]
            for reader in readers:
                reader.until_shown(5)
            first.kill()
            first.wait()
            time.sleep(2)
            with redis_with_its_file(port, tmp_path):
                in_threads(readers)
                for reader in readers:
                    reader.check()
                waited = max(r.longest_wait() for r in readers)
                print(f"Redis killed for 2 s: readers waited at most {waited:.1f} s for a token")
                # And the next answer is admitted and streams as any other.
                Reader(ws_url, server.url, user("red-after")).ask("Say hello.", tokens=8).follow()


def test_a_follower_of_an_answer_no_process_can_continue_ends_with_its_partial_text_within_seconds(
    engine_url, tmp_path
):
    from django.conf import settings

    dead_engine = f"http://127.0.0.1:{free_port()}"
    # A Redis of its own: no other web process of the suite, with a live engine, may take it over.
    own = {"REDIS_URL": f"redis://127.0.0.1:{(port := free_port())}/0"}
    # How long the taking-over process waits for its engine to come back: over two of the reader's
    # quiet checks (CHAT_STREAM_BLOCK_SECONDS), each of which reads why no token comes.
    resume = 2 * settings.CHAT_STREAM_BLOCK_SECONDS + 2
    with (
        redis_with_its_file(port, tmp_path),
        running_daphne(engine_url, **own) as generating,
        running_daphne(dead_engine, CHAT_ENGINE_RESUME_SECONDS=str(resume), **own) as other,
    ):
        asker = user("ned")
        reader = Reader(generating.url.replace("http://", "ws://") + "/ws/chat/", generating.url, asker)
        reader.ask("Write a long story about wells.").until_shown(5)
        # The reader moves to the other process, whose engine is down, and the first one dies.
        reader.ws.close()
        reader.ws_url, reader.origin, reader.ws = (
            other.url.replace("http://", "ws://") + "/ws/chat/",
            other.url,
            None,
        )
        generating.process.kill()
        killed = time.monotonic()
        end = reader.follow()
    assert (end["type"], end.get("code"), end["status"]) == (
        "chat.error",
        "engine_unavailable",
        "interrupted",
    ), end
    # The taking-over process found no engine, said so, waited for one as long as it may, then ended.
    assert "engine_waiting" in reader.notices
    assert time.monotonic() - killed < settings.CHAT_TAKEOVER_AFTER_SECONDS + resume + 10
    stored = Message.objects.get(pk=reader.message)
    assert stored.status == "interrupted" and stored.content == end["content"]
    assert [seq for seq, _ in reader.shown] == list(range(len(reader.shown)))
    assert end["content"] == "".join(text for _, text in reader.shown)
