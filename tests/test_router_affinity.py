"""vLLM's router in front of several engines, started as `make run` starts it (`runrouter`): it
keeps each conversation on one engine (the product's engine client sends the conversation as
X-Session-ID, the key of the consistent_hash policy), and the product reads each engine's load
and metrics behind it. The engines here are stand-ins that say who they are (the real engines
behind the router are in test_engine_replicas_end_to_end.py); the router is the real vllm-router."""

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from harness.processes import ROOT, free_port
from inference.client import ChatRequest, EngineError, OpenAIEngineClient, TextDelta
from inference.engine import engine_metrics, engine_replicas
from monitoring.figures import dashboard_figures
from tests.conftest import LOGS

ROUTER = shutil.which("vllm-router", path=str(Path(sys.executable).parent))
CONVERSATIONS = 20
TURNS = 3


def engine_metrics_text(running: int, waiting: int) -> str:
    return (
        f'vllm:num_requests_running{{model_name="m"}} {running}\n'
        f'vllm:num_requests_waiting{{model_name="m"}} {waiting}\n'
        'vllm:kv_cache_usage_perc{model_name="m"} 0.5\n'
    )


async def stand_in_engine(name: str, running: int = 0, waiting: int = 0) -> tuple[asyncio.Server, str]:
    """Answers /health, /metrics (`running` and `waiting` requests), and every chat with one
    delta: its own name. Like vLLM, it has no /workers."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in head[1:] if ": " in line)}
        await reader.readexactly(int(headers.get("content-length", 0)))
        if head[0].startswith("POST"):
            chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
            delta = {**chunk, "choices": [{"index": 0, "delta": {"content": name}, "finish_reason": "stop"}]}
            body, kind = f"data: {json.dumps(delta)}\n\ndata: [DONE]\n\n", "text/event-stream"
        elif head[0].startswith("GET /metrics"):
            body, kind = engine_metrics_text(running, waiting), "text/plain"
        else:
            body, kind = "{}", "application/json"
        status = "404 Not Found" if head[0].startswith("GET /workers") else "200 OK"
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n{body}".encode()
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


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


async def wait_router(router: subprocess.Popen, port: int) -> None:
    async with httpx.AsyncClient() as probe:
        for _ in range(300):
            try:
                if (await probe.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert router.poll() is None, "the router exited; see test-router.log"
            await asyncio.sleep(0.1)
    raise AssertionError("the router did not answer within 30 s; see test-router.log")


@contextlib.asynccontextmanager
async def routed(engines: list[tuple[asyncio.Server, str]]):
    """The router in front of stand-in `engines`: the product's engine client of it, and its
    address. The engines are closed on the way out."""
    router, port = start_router([url for _, url in engines])
    url = f"http://127.0.0.1:{port}"
    client = OpenAIEngineClient(url, "m", connect_timeout=2, token_timeout=10)
    try:
        await wait_router(router, port)
        yield client, url
    finally:
        await client.aclose()
        router.terminate()
        router.wait(10)
        for server, _ in engines:
            server.close()


async def served_by(client: OpenAIEngineClient, affinity: str) -> str:
    messages = [{"role": "user", "content": "hi"}]
    request = ChatRequest(messages=messages, max_tokens=4, temperature=0, affinity=affinity)
    texts = [e.text async for e in client.stream_chat(request) if isinstance(e, TextDelta)]
    return "".join(texts)


async def test_the_router_keeps_each_conversation_on_one_engine():
    if ROUTER is None:
        pytest.skip("vllm-router is not installed (requirements.txt installs it)")
    engines = [await stand_in_engine(name) for name in ("engine-a", "engine-b")]
    async with routed(engines) as (client, _):
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
    engines = [await stand_in_engine("engine-a", 3, 1), await stand_in_engine("engine-b", 2, 4)]
    counts = {engines[0][1]: (3, 1, True), engines[1][1]: (2, 4, True)}
    urls = sorted(counts)
    async with routed(engines) as (client, url):
        settings.INFERENCE_URL = url
        # The bulk shaper's view: every replica's requests (the router's own /metrics is one engine's).
        load = await client.load()
        assert (load.running, load.waiting) == (5, 5)
        replicas = await asyncio.to_thread(engine_metrics)
        assert [(r.url, r.healthy, r.error) for r in replicas] == [(url, True, None) for url in urls]
        figures = await asyncio.to_thread(dashboard_figures)
        assert (figures["engine"]["running"], figures["engine"]["waiting"]) == (5, 5)
        assert figures["engine"]["kv_cache_usage"] == 0.5
        assert {r["url"]: (r["running"], r["waiting"], r["healthy"]) for r in figures["replicas"]} == counts
        # Every engine gone: not an idle engine (bulk work would go at full rate) but none at all.
        for server, _ in engines:
            server.close()
        deadline = asyncio.get_running_loop().time() + 30
        while any(healthy for _, healthy in await asyncio.to_thread(engine_replicas)):
            assert asyncio.get_running_loop().time() < deadline, "the router still lists a healthy engine"
            await asyncio.sleep(0.5)
        with pytest.raises(EngineError) as refused:
            await client.load()
        assert refused.value.code == "engine_unavailable"
