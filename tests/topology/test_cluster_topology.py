"""`make run TOPOLOGY=cluster`: nginx (Debian's) in front of two web processes, as deploy/
renders it for supervisord, on the session's engine and the suite's database and Redis."""

import json
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import override_settings
from playwright.sync_api import expect

from apitokens.services import token_issue
from conversations.models import Conversation, Message
from deploy.supervisor import Topology, write
from harness.processes import ports_in_a_row
from harness.supervision import Site, answers, supervisord_running
from harness.waiting import wait_for
from tests.support.browser import log_in
from tests.support.chat_client import collect_answer, open_chat, receive, send, start_long_answer
from tests.support.polling import HealthPoller
from tests.support.product import LOGS, product_env

pytestmark = pytest.mark.django_db(transaction=True)

UPLOAD_LIMIT = 1024 * 1024


@dataclass(frozen=True)
class Cluster(Site):
    log: Path

    def pid(self, program: str) -> int:
        return self.supervisor.pid(program)


@pytest.fixture(scope="module")
def cluster(django_db_setup, engine_url, tmp_path_factory):
    if shutil.which("nginx") is None:
        # Never skipped: `make test` installs it where it may (as root).
        pytest.fail("nginx is not installed: apt-get install nginx (make test does, as root)")
    run_dir = tmp_path_factory.mktemp("cluster")
    port = ports_in_a_row(3)
    with override_settings(BULK_MAX_UPLOAD_BYTES=UPLOAD_LIMIT):
        write(run_dir, Topology(["web", "nginx"], web_port=port, web_processes=2))
    env = product_env(engine_url, RUN_DIR=str(run_dir), BULK_MAX_UPLOAD_BYTES=str(UPLOAD_LIMIT))
    log = LOGS / "test-cluster.log"
    with supervisord_running(run_dir / "supervisord.conf", env, log) as supervisor:
        cluster = Cluster(f"http://127.0.0.1:{port}", supervisor, log)
        backends = [f"http://127.0.0.1:{port + 1 + i}/healthz/live" for i in range(2)]
        wait_for(
            lambda: answers(cluster.base + "/healthz/ready") and all(answers(url) for url in backends),
            90,
            "nginx and both web processes",
        )
        yield cluster


def test_nginx_serves_the_static_files_itself(cluster):
    response = httpx.get(cluster.base + "/static/frontend/chat.js")
    assert response.status_code == 200
    assert response.headers["server"].startswith("nginx")
    # frontend: the chat page's static folder kept its name when the chat's package became chat/.
    assert response.content == (Path(settings.STATIC_ROOT) / "frontend" / "chat.js").read_bytes()
    assert response.headers["cache-control"] == "max-age=60"


def test_it_refuses_an_upload_over_the_limit_at_nginx_with_a_clear_message(cluster):
    response = httpx.post(cluster.base + "/api/jobs/", content=b"x" * (UPLOAD_LIMIT + 1))
    assert response.status_code == 413
    assert response.json() == {
        "error": {"code": "too_large", "detail": "The request is larger than the 1 MiB this site accepts."}
    }


def test_a_chat_streams_over_a_websocket_through_nginx_and_another_socket_resumes_and_stops_it(cluster):
    user = get_user_model().objects.create_user("nina", password="pw-nina-1234")
    with open_chat(cluster.ws_url, cluster.base, user) as tab1:
        started = start_long_answer(tab1, user, "Write a long story about lighthouses.")
        # nginx's least_conn sends the second socket to the other web process: the first holds one.
        with open_chat(cluster.ws_url, cluster.base, user) as tab2:
            send(tab2, {"type": "chat.resume", "message": started["message"], "after": -1})
            resumed = receive(tab2)
            assert (resumed["type"], resumed["seq"]) == ("chat.token", 0)
            send(tab2, {"type": "chat.stop", "message": started["message"]})
            while (frame := receive(tab1))["type"] == "chat.token":
                pass
            assert (frame["type"], frame["status"]) == ("chat.done", "stopped")
    assert Message.objects.get(pk=started["message"]).content == frame["content"]


def test_server_sent_events_pass_nginx_one_by_one(cluster):
    user = get_user_model().objects.create_user("omar", password="pw-omar-1234")
    conversation = Conversation.objects.create(owner=user, max_tokens=512, min_tokens=512, temperature=0)
    _, token = token_issue(user=user, scopes=("chat",))
    with httpx.stream(
        "POST",
        cluster.base + "/chat/stream",
        json={"prompt": "Write a long story about bridges.", "conversation": conversation.pk},
        headers={"Authorization": f"Bearer {token}"},
        timeout=120,
    ) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        started = json.loads(next(line for line in lines if line.startswith("data: ")).removeprefix("data: "))
        assert started["started"] is True
        first = next(line for line in lines if line.startswith("data: "))
        assert "token" in json.loads(first.removeprefix("data: "))
        # The first token is here while the answer (512 tokens by construction) still runs:
        # nothing between the engine and this client held the stream back.
        answer = Message.objects.get(conversation=conversation, role="assistant")
        assert answer.status == "generating"
    # Leaving does not stop an answer: stop it, so it holds no slot and no engine time after this test.
    stopped = httpx.post(
        cluster.base + "/chat/stop", json={"message": answer.pk}, headers={"Authorization": f"Bearer {token}"}
    )
    assert stopped.status_code == 202
    # A stop is asynchronous: the answer is stored as stopped a moment later. Waiting for it here
    # checks the stop, and keeps that last write from racing the database flush after this test.
    wait_for(lambda: Message.objects.get(pk=answer.pk).status == "stopped", 30, "the stopped answer stored")


def test_the_site_keeps_answering_while_one_web_process_is_killed(cluster):
    user = get_user_model().objects.create_user("pia", password="pw-pia-12345")
    victim = cluster.pid("web-0")
    with HealthPoller(cluster.base) as health:
        wait_for(lambda: len(health.statuses) >= 3, 30, "health answers")
        os.kill(victim, signal.SIGKILL)
        # A new chat through nginx at once: the dead process is passed over.
        with open_chat(cluster.ws_url, cluster.base, user) as ws:
            send(ws, {"type": "chat.send", "conversation": None, "content": "Say hello."})
            _, tokens, done = collect_answer(ws)
            assert done["type"] == "chat.done" and tokens
        wait_for(lambda: cluster.pid("web-0") not in {0, victim}, 60, "web-0 restarted")
        count = len(health.statuses)
        wait_for(lambda: len(health.statuses) >= count + 3, 30, "health answers after the restart")
    assert health.failures == []
    assert all(status["database"] == "ok" for status in health.statuses)
    assert "exited: web-0 (terminated by SIGKILL; not expected)" in cluster.log.read_text()


def test_the_chat_page_works_in_a_browser_through_nginx(cluster, page):
    get_user_model().objects.create_user("quinn", password="pw-quinn-1234")
    log_in(page, cluster.base, "quinn", "pw-quinn-1234")
    page.goto(cluster.base + "/")
    page.fill("#prompt", "Say hello in three words.")
    page.keyboard.press("Enter")
    # Not "wait for .generating to show": a three-word answer may be done before the first look.
    expect(page.locator(".message.assistant .body").last).not_to_be_empty(timeout=90_000)
    page.wait_for_selector(".message.assistant.generating", state="detached", timeout=90_000)
    answer = Message.objects.filter(conversation__owner__username="quinn", role="assistant").get()
    assert answer.status == "complete" and answer.content
    assert page.locator(".message.assistant .body").last.inner_text().strip()
