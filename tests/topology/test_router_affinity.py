"""vLLM's router in front of several engines, started as `make run` starts it (`runrouter`): it
keeps each conversation on one engine (the product's engine client sends the conversation as
X-Session-ID, the key of the consistent_hash policy), and the product reads each engine's load
and metrics behind it. The engines here are stand-ins that say who they are (the real engines
behind the router are in test_engine_replicas_end_to_end.py); the router is the real vllm-router."""

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from harness.processes import ROOT, free_port
from harness.stand_in_engine import Gauges, StandInEngine, serving
from harness.supervision import answers
from harness.waiting import wait_for
from inference.client import ChatRequest, EngineError, OpenAIEngineClient, TextDelta
from inference.engine import engine_metrics, engine_probe, engine_replicas
from monitoring.figures import dashboard_figures
from tests.support.product import LOGS

ROUTER = shutil.which("vllm-router", path=str(Path(sys.executable).parent))
CONVERSATIONS = 20
TURNS = 3


def stand_in_engine(name: str, gauges: Gauges | None = None) -> StandInEngine:
    """Answers every chat with one delta, its own name; its /metrics report `gauges`. Like vLLM, it
    has no /workers."""
    return StandInEngine(text=name, model="m", gauges=gauges)


def start_router(engine_urls: list[str], log_name: str = "test-router.log") -> tuple[subprocess.Popen, int]:
    """`manage.py runrouter` over `engine_urls`, as `make run` starts it: (process, its port)."""
    port = free_port()
    env = {
        **os.environ,
        "INFERENCE_URL": f"http://127.0.0.1:{port}",
        "INFERENCE_ROUTER_METRICS_PORT": str(free_port()),
    }
    with open(LOGS / log_name, "w") as log:
        router = subprocess.Popen(
            [sys.executable, "manage.py", "runrouter", "--worker-urls", *engine_urls],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return router, port


@contextlib.asynccontextmanager
async def routed(engine_urls: list[str]):
    """The router in front of the engines at `engine_urls`: the product's engine client of it, and
    its address."""
    router, port = start_router(engine_urls)
    url = f"http://127.0.0.1:{port}"
    client = OpenAIEngineClient(url, "m", connect_timeout=2, token_timeout=10)
    try:
        wait_for(
            lambda: router.poll() is not None or answers(url + "/health"), 30, "the router (test-router.log)"
        )
        assert router.poll() is None, "the router exited; see test-router.log"
        yield client, url
    finally:
        await client.aclose()
        router.terminate()
        router.wait(10)


async def served_by(client: OpenAIEngineClient, affinity: str) -> str:
    messages = [{"role": "user", "content": "hi"}]
    request = ChatRequest(messages=messages, max_tokens=4, temperature=0, affinity=affinity)
    texts = [e.text async for e in client.stream_chat(request) if isinstance(e, TextDelta)]
    return "".join(texts)


async def test_the_router_keeps_each_conversation_on_one_engine():
    if ROUTER is None:
        pytest.skip("vllm-router is not installed (requirements.txt installs it)")
    with serving(stand_in_engine("engine-a")) as a, serving(stand_in_engine("engine-b")) as b:
        async with routed([a, b]) as (client, _):
            placed = {
                conversation: {await served_by(client, f"conversation-{conversation}") for _ in range(TURNS)}
                for conversation in range(CONVERSATIONS)
            }
    # Every turn of a conversation went to the same engine...
    assert all(len(engines_used) == 1 for engines_used in placed.values()), placed
    # ...and the conversations were spread over both (all 20 on one: odds of 1 in 500,000).
    assert set().union(*placed.values()) == {"engine-a", "engine-b"}


@pytest.mark.django_db(transaction=True)
async def test_the_product_reads_the_load_and_metrics_of_every_engine_behind_the_router(settings):
    if ROUTER is None:
        pytest.skip("vllm-router is not installed (requirements.txt installs it)")
    engines = contextlib.ExitStack()
    a = engines.enter_context(serving(stand_in_engine("engine-a", Gauges(3, 1, kv_cache_usage=0.5))))
    b = engines.enter_context(serving(stand_in_engine("engine-b", Gauges(2, 4, kv_cache_usage=0.5))))
    counts = {a: (3, 1, True), b: (2, 4, True)}
    urls = sorted(counts)
    with engines:
        async with routed([a, b]) as (_, url):
            settings.INFERENCE_URL = url
            # The bulk shaper's view: every replica's requests (the router's own /metrics is one engine's).
            load = await engine_probe().load()
            assert (load.running, load.waiting) == (5, 5)
            replicas = await asyncio.to_thread(engine_metrics)
            assert [(r.url, r.healthy, r.error) for r in replicas] == [(url, True, None) for url in urls]
            figures = await asyncio.to_thread(dashboard_figures)
            assert (figures["engine"]["running"], figures["engine"]["waiting"]) == (5, 5)
            assert figures["engine"]["kv_cache_usage"] == 0.5
            assert {
                r["url"]: (r["running"], r["waiting"], r["healthy"]) for r in figures["replicas"]
            } == counts
            # Every engine gone: not an idle engine (bulk work would go at full rate) but none at all.
            engines.close()
            wait_for(
                lambda: not any(healthy for _, healthy in engine_replicas()),
                30,
                "no healthy engine listed",
                every=0.5,
            )
            with pytest.raises(EngineError) as refused:
                await engine_probe().load()
            assert refused.value.code == "engine_unavailable"


async def test_the_router_sends_the_engines_key_it_was_given_by_environment_never_by_command_line(
    monkeypatch,
):
    key = "router-key-" + "z" * 30
    monkeypatch.setenv("INFERENCE_API_KEY", key)
    engine = StandInEngine(text="keyed", model="m", record=True)
    with serving(engine) as engine_url:
        router, port = start_router([engine_url], "test-router-key.log")
        url = f"http://127.0.0.1:{port}"
        client = OpenAIEngineClient(url, "m", connect_timeout=2, token_timeout=10, api_key=key)
        try:
            wait_for(lambda: router.poll() is not None or answers(url + "/health"), 30, "the router")
            assert router.poll() is None, "the router exited; see test-router-key.log"
            # The router's own process (runrouter replaced itself with it) shows no key to `ps`.
            assert key not in " ".join(psutil.Process(router.pid).cmdline())
            assert await served_by(client, "conversation-1") == "keyed"
        finally:
            await client.aclose()
            router.terminate()
            router.wait(10)
    # Its requests for the answer, that is; its health checks go to /health, which needs no key.
    chats = [headers for headers, body in engine.requests if body.get("messages")]
    assert chats, "the router sent the engine no answer"
    assert {headers.get("authorization") for headers in chats} == {f"Bearer {key}"}
