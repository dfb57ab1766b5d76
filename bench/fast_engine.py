"""A stand-in for an engine far faster than this host's: the web tier's ceiling, measured alone.

It speaks the part of vLLM's OpenAI-compatible API the product uses (`/health`, `/tokenize`,
`/metrics`, streaming `/v1/chat/completions` with usage), and answers every chat with
`max_tokens` one-word chunks, each its own SSE event in its own write, `--interval` seconds
apart (0: as fast as it can, yielding to the other answers between tokens). It exists for
the figures of `bench.bench_relay`: the web tier's CPU per token, and how many tokens per
second one web process can relay, which no engine on a 2-core host can feed.
Every other benchmark, and every end-to-end test, runs vLLM.

Plain asyncio streams rather than a web framework: the less CPU this process spends per
token, the less it takes from the web process it feeds on a small host.

    python -m bench.fast_engine --port 8123 [--interval 0.005]
"""

import argparse
import asyncio
import json
import time

WORD = "tok "


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(body: dict) -> bytes:
    return _chunk(b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n")


class FastEngine:
    """`max_batch` (0: no limit): at most that many answers stream at once, as in a real engine's
    batch; the rest wait their turn (their first token with them), reported as waiting."""

    def __init__(self, interval: float, model: str, max_batch: int = 0) -> None:
        self.interval = interval
        self.model = model
        self.running = 0
        self.waiting = 0
        self.tokens = 0
        self.slots = asyncio.Semaphore(max_batch) if max_batch else None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
                length = int(headers.get("Content-Length") or headers.get("content-length") or 0)
                body = json.loads(await reader.readexactly(length)) if length else {}
                await self.route(method, path.split("?", 1)[0], body, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def route(self, method: str, path: str, body: dict, writer: asyncio.StreamWriter) -> None:
        if path == "/v1/chat/completions" and body.get("stream"):
            await self.stream(body, writer)
        elif path == "/tokenize":
            words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
            words += len(str(body.get("prompt", "")).split())
            self.reply(writer, 200, {"count": words + 8, "tokens": list(range(words))}, "application/json")
        elif path == "/health":
            self.reply(writer, 200, "", "text/plain")
        elif path == "/metrics":
            gauges = f"vllm:num_requests_running {self.running}\nvllm:num_requests_waiting {self.waiting}\n"
            self.reply(writer, 200, gauges, "text/plain")
        elif path == "/v1/models":
            self.reply(writer, 200, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
        else:
            self.reply(writer, 404, {"error": {"message": f"no {method} {path} here"}})

    @staticmethod
    def reply(writer: asyncio.StreamWriter, status: int, body, kind: str = "application/json") -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        head = f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nContent-Length: {len(data)}\r\n\r\n"
        writer.write(head.encode() + data)

    async def stream(self, body: dict, writer: asyncio.StreamWriter) -> None:
        if self.slots is None:
            await self._stream(body, writer)
            return
        self.waiting += 1
        try:
            await self.slots.acquire()
        finally:
            self.waiting -= 1
        try:
            await self._stream(body, writer)
        finally:
            self.slots.release()

    async def _stream(self, body: dict, writer: asyncio.StreamWriter) -> None:
        count = int(body.get("max_tokens") or 16)
        base = {"id": "chatcmpl-fast", "object": "chat.completion.chunk", "created": int(time.time())}
        base["model"] = body.get("model", self.model)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        token = _event({**base, "choices": [{"index": 0, "delta": {"content": WORD}, "finish_reason": None}]})
        self.running += 1
        try:
            for _ in range(count):
                writer.write(token)
                self.tokens += 1
                # Each token its own write, other answers' writes between: a reader that keeps up
                # gets one event a read; only one that falls behind finds several waiting.
                await asyncio.sleep(self.interval)
                await writer.drain()
        finally:
            self.running -= 1
        usage = {"prompt_tokens": 16, "completion_tokens": count, "total_tokens": 16 + count}
        finish = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
        writer.write(_event(finish) + _event({**base, "choices": [], "usage": usage}))
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()


async def main(port: int, interval: float, model: str, max_batch: int) -> None:
    engine = FastEngine(interval, model, max_batch)
    server = await asyncio.start_server(engine.serve, "127.0.0.1", port, limit=1 << 20)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--port", type=int, required=True)
    cli.add_argument("--interval", type=float, default=0.0)
    cli.add_argument("--model", default="fast")
    cli.add_argument("--max-batch", type=int, default=0, help="answers streaming at once (0: no limit)")
    options = cli.parse_args()
    asyncio.run(main(options.port, options.interval, options.model, options.max_batch))
