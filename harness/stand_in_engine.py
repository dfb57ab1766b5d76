"""The stand-in engine: the part of vLLM's OpenAI-compatible server the product uses, over real
HTTP, doing on demand what no real engine does.

It answers `/health`, `/tokenize`, `/metrics`, `/v1/models` and `/v1/chat/completions` (every other
path is not found, `/workers` included: an engine is no router). Every chat gets `text`, `chunk`
characters a delta, or else `max_tokens` one-word deltas, each its own SSE event in its own write
(or `stream_interval` deltas an event, as vLLM sends them when a request asks),
`interval` seconds apart (0: as fast as it can, yielding to the other answers between deltas), ended
with a finish reason and the usage; a chat that does not stream gets them in one reply once the
deltas' time has passed. `fault` makes every chat fail instead:

- `HANG`: it never answers, not even a status line;
- `STALL`: the text, then nothing, the connection held open;
- `CUT`: the text, then the connection dropped mid-answer, as when the engine dies;
- a `Refusal`: its status and JSON body instead of an answer;
- an `ErrorEvent`: the text, then that error event in the stream, as vLLM reports a failure mid-answer.

Two kinds of users. Tests that must see what the engine client puts on the wire, or make the engine
fail in one given way (the fake in tests/support/fake_engine.py replaces the client instead, for the faults
above it); and the benchmarks of the web tier, which need an engine far faster than this host's
(bench.fast_engine serves it as a process of its own). Plain asyncio streams rather than a web
framework: the less CPU this process spends per token, the less it takes from the web process it feeds.
"""

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

WORD = "tok "
PROMPT_TOKENS = 16
HANG: Literal["hang"] = "hang"
STALL: Literal["stall"] = "stall"
CUT: Literal["cut"] = "cut"


@dataclass(frozen=True)
class Refusal:
    status: int
    body: dict


@dataclass(frozen=True)
class ErrorEvent:
    body: dict


@dataclass(frozen=True)
class Gauges:
    """What /metrics reports, in place of what the stand-in is doing."""

    running: int
    waiting: int
    kv_cache_usage: float = 0.0


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(body: dict) -> bytes:
    return _chunk(b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n")


class StandInEngine:
    """`max_batch` (0: no limit): at most that many answers stream at once, as in a real engine's
    batch; the rest wait their turn (their first token with them), reported as waiting. With
    `step_growth` (and a `max_batch`), each stream's pace slows as the batch fills, as a real
    engine's decode step lengthens with the sequences it carries: `interval` apart with one answer
    running, `interval × (1 + step_growth)` with a full batch, in proportion between.
    `close_idle_after`: a connection that a request reaches after more than that many idle seconds
    is closed instead of answered, as an engine closes one idle past its keep-alive just as the
    request arrives. With `record`, `requests` keeps each request's (headers, JSON body)."""

    def __init__(
        self,
        *,
        text: str | None = None,
        chunk: int = 0,
        interval: float = 0.0,
        model: str = "stand-in",
        max_batch: int = 0,
        step_growth: float = 0.0,
        fault: Literal["hang", "stall", "cut"] | Refusal | ErrorEvent | None = None,
        gauges: Gauges | None = None,
        close_idle_after: float | None = None,
        record: bool = False,
    ) -> None:
        self.text = text
        self.chunk = chunk
        self.interval = interval
        self.model = model
        self.fault = fault
        self.gauges = gauges
        self.close_idle_after = close_idle_after
        self.requests: list[tuple[dict[str, str], dict]] | None = [] if record else None
        self.connections = 0
        self.running = 0
        self.waiting = 0
        self.tokens = 0
        self.slots = asyncio.Semaphore(max_batch) if max_batch else None
        self.max_batch = max_batch
        self.step_growth = step_growth if max_batch else 0.0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection's requests, one after another (HTTP/1.1 keep-alive)."""
        self.connections += 1
        loop = asyncio.get_running_loop()
        idle_since = None
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if idle_since is not None and self.close_idle_after is not None:
                    if loop.time() - idle_since > self.close_idle_after:
                        return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:] if ": " in line)
                }
                length = int(headers.get("content-length") or 0)
                body = json.loads(await reader.readexactly(length)) if length else {}
                if self.requests is not None:
                    self.requests.append((headers, body))
                if not await self.route(method, path.split("?", 1)[0], body, writer):
                    return
                idle_since = loop.time()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def route(self, method: str, path: str, body: dict, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is to end with it."""
        if path == "/v1/chat/completions":
            return await self.chat(body, writer)
        if path == "/tokenize":
            words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
            words += len(str(body.get("prompt", "")).split())
            self.reply(writer, 200, {"count": words + 8, "tokens": list(range(words))})
        elif path == "/health":
            self.reply(writer, 200, "", "text/plain")
        elif path == "/metrics":
            self.reply(writer, 200, self.metrics(), "text/plain")
        elif path == "/v1/models":
            self.reply(writer, 200, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
        else:
            self.reply(writer, 404, {"error": {"message": f"no {method} {path} here"}})
        await writer.drain()
        return True

    def metrics(self) -> str:
        gauges = self.gauges or Gauges(self.running, self.waiting)
        label = f'{{model_name="{self.model}"}}'
        return (
            f"vllm:num_requests_running{label} {gauges.running}\n"
            f"vllm:num_requests_waiting{label} {gauges.waiting}\n"
            f"vllm:kv_cache_usage_perc{label} {gauges.kv_cache_usage}\n"
        )

    @staticmethod
    def reply(
        writer: asyncio.StreamWriter, status: int, body: dict | str, kind: str = "application/json"
    ) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        head = f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nContent-Length: {len(data)}\r\n\r\n"
        writer.write(head.encode() + data)

    async def chat(self, body: dict, writer: asyncio.StreamWriter) -> bool:
        if self.fault == HANG:
            await asyncio.Event().wait()
        if isinstance(self.fault, Refusal):
            self.reply(writer, self.fault.status, self.fault.body)
            await writer.drain()
            return True
        answer = self.stream if body.get("stream") else self.whole
        if self.slots is None:
            return await answer(body, writer)
        self.waiting += 1
        try:
            await self.slots.acquire()
        finally:
            self.waiting -= 1
        try:
            return await answer(body, writer)
        finally:
            self.slots.release()

    def pace(self) -> float:
        """Seconds to the next delta of each running answer, for the batch running now."""
        if not self.step_growth:
            return self.interval
        return self.interval * (1 + self.step_growth * (self.running - 1) / max(self.max_batch - 1, 1))

    def deltas(self, body: dict) -> tuple[list[str], str]:
        """The texts of a chat's deltas, and its finish reason."""
        if self.text is None:
            return [WORD] * int(body.get("max_tokens") or 16), "length"
        size = self.chunk or max(len(self.text), 1)
        return [self.text[i : i + size] for i in range(0, len(self.text), size)], "stop"

    @staticmethod
    def usage(deltas: list) -> dict:
        return {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": len(deltas),
            "total_tokens": PROMPT_TOKENS + len(deltas),
        }

    async def stream(self, body: dict, writer: asyncio.StreamWriter) -> bool:
        base = {"id": "chatcmpl-stand-in", "object": "chat.completion.chunk", "created": int(time.time())}
        base["model"] = body.get("model", self.model)

        def delta(text: str) -> bytes:
            return _event(
                {**base, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
            )

        texts, finish_reason = self.deltas(body)
        # vLLM's stream_interval: the first delta at once, then one event every that many, the last at once.
        every = max(int(body.get("stream_interval") or 1), 1)
        # Each event encoded once and sent as often as it comes: the benchmarks' CPU is the web tier's.
        encoded: dict[str, bytes] = {}
        held: list[str] = []
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        self.running += 1
        try:
            for made, text in enumerate(texts, 1):
                held.append(text)
                self.tokens += 1
                if made == 1 or len(held) >= every or made == len(texts):
                    joined = "".join(held)
                    writer.write(encoded.get(joined) or encoded.setdefault(joined, delta(joined)))
                    held.clear()
                # Each delta its own write, other answers' writes between: a reader that keeps up
                # gets one event a read; only one that falls behind finds several waiting.
                await asyncio.sleep(self.pace())
                await writer.drain()
            if self.fault == STALL:
                await asyncio.Event().wait()
            if self.fault == CUT:
                return False
            if isinstance(self.fault, ErrorEvent):
                writer.write(_event(self.fault.body))
            else:
                finish = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]}
                writer.write(_event(finish) + _event({**base, "choices": [], "usage": self.usage(texts)}))
        finally:
            self.running -= 1
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        return True

    async def whole(self, body: dict, writer: asyncio.StreamWriter) -> bool:
        """A chat that does not stream: its answer in one reply, once its deltas' time has passed."""
        texts, finish_reason = self.deltas(body)
        self.running += 1
        try:
            for _ in texts:
                self.tokens += 1
                await asyncio.sleep(self.pace())
        finally:
            self.running -= 1
        if self.fault == STALL:
            await asyncio.Event().wait()
        if self.fault == CUT:
            return False
        if isinstance(self.fault, ErrorEvent):
            self.reply(writer, 500, self.fault.body)
        else:
            message = {"role": "assistant", "content": "".join(texts)}
            choice = {"index": 0, "message": message, "finish_reason": finish_reason}
            reply = {"id": "chatcmpl-stand-in", "object": "chat.completion", "created": int(time.time())}
            reply |= {"model": body.get("model", self.model), "choices": [choice], "usage": self.usage(texts)}
            self.reply(writer, 200, reply)
        await writer.drain()
        return True


async def serve_forever(engine: StandInEngine, port: int) -> None:
    """Serve `engine` on the loopback's `port` until cancelled."""
    server = await asyncio.start_server(engine.serve, "127.0.0.1", port, limit=1 << 20)
    async with server:
        await server.serve_forever()


@contextmanager
def serving(engine: StandInEngine) -> Iterator[str]:
    """`engine` on a free port of the loopback, served from a thread of its own (so that a test's
    synchronous code, its event loop and other processes alike can reach it): its URL. On the way
    out it stops listening and drops every connection, as a stopped engine does."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="stand-in-engine", daemon=True)
    thread.start()
    listening = asyncio.start_server(engine.serve, "127.0.0.1", 0, limit=1 << 20)
    server = asyncio.run_coroutine_threadsafe(listening, loop).result(10)

    async def stop() -> None:
        server.close()
        connections = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)

    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
