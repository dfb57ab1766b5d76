"""Two engine replicas behind vLLM's router, as `make run INFERENCE_REPLICAS=2` runs them: the
session's engine and a `runinference` of its own, with `runrouter` in front and daphne reaching
them through it. A replica killed as an out-of-memory kill ends it does not lose its answer in
flight: the surviving replica carries the partial text on (answers.run), one gapless answer stored as
shown; and the killed one, restarted by its runinference, takes the conversation back."""

import signal
import time

import httpx
import psutil
import pytest
from django.contrib.auth import get_user_model

from conversations import services
from conversations.models import Message
from harness.processes import free_port
from harness.waiting import wait_for
from inference.topology import metric_sums
from tests.chat.test_chat_faults_end_to_end import engine_up, running_inference
from tests.support.chat_client import (
    collect_answer,
    ends_as_shown,
    long_answer_conversation,
    open_chat,
    receive,
    send,
)
from tests.support.product import LOGS, running_daphne
from tests.topology.test_router_affinity import ROUTER, start_router

pytestmark = pytest.mark.django_db(transaction=True)

FINISHED = "vllm:request_success_total"
# The killed answer's length: it cannot end before it (its floor), so the kill after its first token
# lands mid-answer; short enough for the rest to be made on a loaded 2-core host within the test.
LONG = 256


def finished(url: str) -> float:
    """Requests the engine at `url` has finished (0 while it is down: it has started again since)."""
    try:
        text = httpx.get(url + "/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0
    return metric_sums(text, [FINISHED])[FINISHED]


def served_one_more(url: str, before: float) -> bool:
    """Whether the engine at `url` finished exactly one request more than `before`. Its counter
    moves just after the answer's last chunk has left it, so it is read until it moves (or 10 s)."""
    deadline = time.monotonic() + 10
    while (now := finished(url)) == before and time.monotonic() < deadline:
        time.sleep(0.2)
    return now == before + 1


def healthy_behind(router_url: str) -> dict[str, bool]:
    workers = httpx.get(router_url + "/workers", timeout=5).json()["workers"]
    return {worker["url"]: worker["is_healthy"] for worker in workers}


def answer(ws, conversation: int, content: str) -> tuple[dict, dict]:
    send(ws, {"type": "chat.send", "conversation": conversation, "content": content})
    started, _, end = collect_answer(ws, timeout=180)
    return started, end


def test_a_dead_replica_s_answer_and_conversation_move_to_another_and_come_back(django_db_setup, engine_url):
    if ROUTER is None:
        pytest.skip("vllm-router is not installed (requirements.txt installs it)")
    user = get_user_model().objects.create_user("rhea", password="pw-rhea-1234")
    a_url, b_url = engine_url, f"http://127.0.0.1:{free_port()}"
    log = LOGS / "test-replica-b.log"
    with running_inference(b_url, log) as replica_b:
        router, port = start_router([a_url, b_url], "test-router-replicas.log")
        router_url = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: engine_up(router_url), 60, "the router")
            with running_daphne(router_url) as server:
                ws_url = server.url.replace("http://", "ws://") + "/ws/chat/"
                with open_chat(ws_url, server.url, user) as ws:
                    # Conversations of 8-token answers, until the router places one on replica B.
                    on_b = None
                    for _ in range(20):
                        conversation = long_answer_conversation(user, max_tokens=8)
                        before = finished(b_url)
                        _, end = answer(ws, conversation, "Hi")
                        assert end["type"] == "chat.done", end
                        if finished(b_url) > before:
                            on_b = conversation
                            break
                    assert on_b is not None, "the router put 20 conversations on one replica"

                    # A long answer on B, and B's server killed in the middle of it.
                    services.conversation_update_settings(
                        user=user, conversation_id=on_b, data={"max_tokens": LONG, "min_tokens": LONG}
                    )
                    send(ws, {"type": "chat.send", "conversation": on_b, "content": "Tell me a long story."})
                    started = receive(ws)
                    assert started["type"] == "chat.started", started
                    tokens = [receive(ws)]
                    assert tokens[0]["type"] == "chat.token", tokens[0]
                    a_before = finished(a_url)
                    [b_server] = psutil.Process(replica_b.pid).children()
                    b_server.send_signal(signal.SIGKILL)
                    # The answer goes on on replica A, from where B left it.
                    stored = ends_as_shown(ws, started["message"], tokens)
                    # Its whole budget, made across both replicas.
                    assert stored.completion_tokens == LONG and stored.finish_reason == "length"
                    assert served_one_more(a_url, a_before)

                    # B comes back (its runinference starts a new server; the long answer may still
                    # have been running on A meanwhile), the router takes it back, and the
                    # conversation's turns reach B again.
                    wait_for(
                        lambda: engine_up(b_url) and healthy_behind(router_url).get(b_url) is True,
                        600,
                        "replica B back",
                    )
                    b_before = finished(b_url)
                    _, end = answer(ws, on_b, "And now?")
                    assert (end["type"], end.get("status")) == ("chat.done", "complete"), end
                    assert served_one_more(b_url, b_before)
        finally:
            router.terminate()
            router.wait(10)
    # Nothing lost or doubled: each question has exactly one answer, every one complete.
    answers = Message.objects.filter(conversation_id=on_b, role="assistant").order_by("pk")
    assert [m.status for m in answers] == ["complete"] * 3
    assert Message.objects.filter(conversation_id=on_b, role="user").count() == 3
    assert "The engine stopped: killed by SIGKILL" in log.read_text()
