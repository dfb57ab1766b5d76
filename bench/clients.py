"""Two ways to stream the same chat: the product's WebSocket and the engine's HTTP API.

Both record what a client sees: time to first token, the gaps between tokens, and the
engine's usage figures, so the two paths are measured the same way.
"""

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import httpx
import websockets
from django.conf import settings


@dataclass
class Answer:
    """One streamed answer as its client saw it; times in seconds."""

    ttft: float | None = None
    gaps: list[float] = field(default_factory=list)
    completion_tokens: int = 0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    text: str = ""
    started: float = 0.0
    ended: float = 0.0


class Stream:
    """Arrival times of one answer's pieces."""

    def __init__(self) -> None:
        self.answer = Answer(started=time.perf_counter())
        self._previous: float | None = None
        self._parts: list[str] = []

    def piece(self, text: str) -> None:
        now = time.perf_counter()
        if self._previous is None:
            self.answer.ttft = now - self.answer.started
        else:
            self.answer.gaps.append(now - self._previous)
        self._previous = now
        self._parts.append(text)

    def end(self, usage: dict | None) -> Answer:
        self.answer.ended = time.perf_counter()
        self.answer.text = "".join(self._parts)
        usage = usage or {}
        details = usage.get("prompt_tokens_details") or {}
        self.answer.completion_tokens = usage.get("completion_tokens") or len(self._parts)
        self.answer.prompt_tokens = usage.get("prompt_tokens")
        self.answer.cached_tokens = usage.get("cached_tokens", details.get("cached_tokens"))
        return self.answer


class RawEngine:
    """Streams chat completions straight from vLLM's OpenAI-compatible HTTP API."""

    def __init__(self, url: str, *, max_tokens: int, temperature: float = 0.0) -> None:
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._http = httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600, connect=10))

    async def chat(
        self, messages: Sequence[dict], *, cache_salt: str | None = None, headers: dict | None = None
    ) -> Answer:
        body = {
            "model": settings.INFERENCE_MODEL_NAME,
            "messages": list(messages),
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if cache_salt:
            body["cache_salt"] = cache_salt
        stream = Stream()
        usage = None
        async with self._http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices", []):
                    if choice.get("delta", {}).get("content"):
                        stream.piece(choice["delta"]["content"])
        return stream.end(usage)

    async def close(self) -> None:
        await self._http.aclose()


class ProductChat:
    """One user's chat over the product's WebSocket; `ask` continues the same conversation."""

    def __init__(self, base_url: str, cookie: str) -> None:
        self._url = base_url.replace("http://", "ws://") + "/ws/chat/"
        self._origin = base_url
        self._cookie = cookie
        self._ws = None
        self.conversation: int | None = None

    async def __aenter__(self) -> "ProductChat":
        self._ws = await websockets.connect(
            self._url,
            origin=self._origin,
            additional_headers={"Cookie": f"sessionid={self._cookie}"},
            max_size=None,
            open_timeout=30,
        )
        return self

    async def __aexit__(self, *exc) -> None:
        await self._ws.close()

    async def ask(self, content: str, *, new_conversation: bool = False) -> Answer:
        conversation = None if new_conversation else self.conversation
        stream = Stream()
        await self._ws.send(
            json.dumps({"type": "chat.send", "conversation": conversation, "content": content})
        )
        while True:
            frame = json.loads(await asyncio.wait_for(self._ws.recv(), timeout=600))
            kind = frame["type"]
            if kind == "chat.started":
                self.conversation = frame["conversation"]
            elif kind == "chat.token":
                stream.piece(frame["text"])
            elif kind == "chat.done":
                return stream.end(frame.get("usage"))
            elif kind == "chat.error":
                raise RuntimeError(f"the product refused or failed an answer: {frame}")


async def run_concurrently(
    workers: int, jobs: Sequence, work: Callable[[int, object], Awaitable[Answer]]
) -> tuple[list[Answer], float]:
    """Run `jobs` on `workers` concurrent workers (worker index, job); answers and the wall time."""
    queue: asyncio.Queue = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    answers: list[Answer] = []

    async def worker(index: int) -> None:
        while not queue.empty():
            answers.append(await work(index, queue.get_nowait()))

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(workers)))
    return answers, time.perf_counter() - started
