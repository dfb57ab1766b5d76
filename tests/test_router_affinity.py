"""vLLM's router in front of several engines keeps each conversation on one of them: the
product's engine client sends the conversation as X-Session-ID, the key of the router's
consistent_hash policy. The engines here are stand-ins that say who they are (the real engines
behind the router are for the end-to-end tests); the router is the real vllm-router."""

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from harness.processes import free_port
from inference.client import ChatRequest, OpenAIEngineClient, TextDelta
from tests.conftest import LOGS

ROUTER = shutil.which("vllm-router", path=str(Path(sys.executable).parent))
CONVERSATIONS = 20
TURNS = 3


async def stand_in_engine(name: str) -> tuple[asyncio.Server, str]:
    """Answers /health, and every chat with one delta: its own name."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in head[1:] if ": " in line)}
        await reader.readexactly(int(headers.get("content-length", 0)))
        if head[0].startswith("POST"):
            chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
            delta = {**chunk, "choices": [{"index": 0, "delta": {"content": name}, "finish_reason": "stop"}]}
            body, kind = f"data: {json.dumps(delta)}\n\ndata: [DONE]\n\n", "text/event-stream"
        else:
            body, kind = "{}", "application/json"
        writer.write(
            f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n{body}".encode()
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def start_router(engine_urls: list[str]) -> tuple[subprocess.Popen, int]:
    """vllm-router with the consistent_hash policy over `engine_urls`: (process, its port)."""
    port = free_port()
    with open(LOGS / "test-router.log", "w") as log:
        router = subprocess.Popen(
            [
                *(ROUTER, "--host", "127.0.0.1", "--port", str(port), "--policy", "consistent_hash"),
                *("--prometheus-port", str(free_port()), "--worker-urls", *engine_urls),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return router, port


async def served_by(client: OpenAIEngineClient, affinity: str) -> str:
    messages = [{"role": "user", "content": "hi"}]
    request = ChatRequest(messages=messages, max_tokens=4, temperature=0, affinity=affinity)
    texts = [e.text async for e in client.stream_chat(request) if isinstance(e, TextDelta)]
    return "".join(texts)


async def test_the_router_keeps_each_conversation_on_one_engine():
    if ROUTER is None:
        pytest.skip("vllm-router is not installed (requirements.txt installs it)")
    engines = [await stand_in_engine(name) for name in ("engine-a", "engine-b")]
    router, port = start_router([url for _, url in engines])
    client = OpenAIEngineClient(f"http://127.0.0.1:{port}", "m", connect_timeout=2, token_timeout=10)
    try:
        async with httpx.AsyncClient() as probe:
            for _ in range(300):
                try:
                    if (await probe.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert router.poll() is None, "vllm-router exited; see test-router.log"
                await asyncio.sleep(0.1)
        placed = {
            conversation: {await served_by(client, f"conversation-{conversation}") for _ in range(TURNS)}
            for conversation in range(CONVERSATIONS)
        }
    finally:
        await client.aclose()
        router.terminate()
        router.wait(10)
        for server, _ in engines:
            server.close()
    # Every turn of a conversation went to the same engine...
    assert all(len(engines_used) == 1 for engines_used in placed.values()), placed
    # ...and the conversations were spread over both (all 20 on one: odds of 1 in 500,000).
    assert set().union(*placed.values()) == {"engine-a", "engine-b"}
