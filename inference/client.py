"""The one way the web tier and the workers reach the engine.

`EngineClient` is the interface of everything that answers: a streaming chat call that
yields text deltas and ends with a `Completion`, and the model's token counts. Stopping
a generation is closing its iterator (or cancelling the task that drives it):
that closes the HTTP stream, and vLLM aborts the request when its client goes away.
`EngineProbe` is the interface of those that watch the engine instead (its health, its
replicas, their metrics and load): inference.topology reads them.

`OpenAIEngineClient` talks to vLLM's OpenAI-compatible server: the chat stream over aiohttp,
whose HTTP parser is compiled, read by `ChunkReader`, which parses each server-sent event with
orjson and makes the deltas of everything aiohttp has buffered one `TextDelta` (an engine ahead of
its reader costs one frame downstream per read, not per token), each stream within its read limit
(`QuietLimit`); the short calls (token counts, tokenize, detokenize) over httpx. The openai SDK is
not used: it builds a pydantic model for every chunk (its cost per relayed token is in
docs/benchmarks.md). Unit tests may substitute another implementation to inject faults."""

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp
import httpx
import orjson

from eventloops import PerLoop
from inference.errors import EngineError, engine_error, error_message, status_error


@dataclass(frozen=True)
class ChatRequest:
    messages: Sequence[dict[str, str]]
    max_tokens: int
    temperature: float
    priority: int = 0
    # The engine ignores end-of-text until this many tokens (vLLM's min_tokens); 0: no floor.
    min_tokens: int = 0
    # Isolates the engine's prefix cache; requests with different salts share nothing.
    cache_salt: str | None = None
    request_id: str | None = None
    # Requests with the same affinity belong together (one conversation's turns): sent as
    # X-Session-ID, the key vllm-router's consistent_hash policy routes on, so a conversation
    # stays on the replica whose prefix cache holds it. A single engine ignores it.
    affinity: str | None = None
    # The model to answer with, one of inference.engine.served_models(); None: the default.
    model: str | None = None
    # More sampling parameters of vLLM's OpenAI API (top_p, penalties, seed, stop), checked by the caller.
    sampling: Mapping[str, object] = field(default_factory=dict)
    # The last message is a partial assistant answer to carry on, not a turn to answer (vLLM's
    # continue_final_message): an answer continued after its process died, or past its limit.
    continue_final_message: bool = False
    # The answer in one reply, not streamed (a batch line: nobody reads it as it is made), which
    # spares the engine an event per token: one TextDelta, then the Completion. No read timeout
    # bounds the wait; the bulk task's time limit does.
    whole: bool = False
    # Tokens an event of the streamed answer (vLLM's stream_interval; first and last at once); 1: each.
    stream_interval: int = 1


@dataclass(frozen=True)
class TextDelta:
    text: str
    # The prompt's tokens as the engine counted them, on the first delta: what a request that is
    # stopped before its end (and so never gets its Completion) cost.
    prompt_tokens: int | None = None


@dataclass(frozen=True)
class Completion:
    finish_reason: str
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class EngineLoad:
    """Requests the engine is running and holding in its queue, whoever sent them."""

    running: int
    waiting: int


@dataclass(frozen=True)
class ReplicaMetrics:
    url: str
    # As the router last saw it; None without a router.
    healthy: bool | None
    # The engine's Prometheus text, or None and the reason it could not be read.
    text: str | None
    error: str | None


class EngineClient(Protocol):
    """What answering needs of the engine: the chat stream, and the model's tokens to count."""

    def stream_chat(self, request: ChatRequest) -> AsyncIterator[TextDelta | Completion]:
        """Yield text deltas as the engine makes them, then exactly one Completion."""
        ...

    async def count_prompt_tokens(self, messages: Sequence[dict[str, str]]) -> int:
        """Tokens the chat template makes of `messages`, generation prompt included."""
        ...

    async def tokenize(self, text: str) -> list[int]:
        """The model's token ids for plain `text` (no chat template, no special tokens)."""
        ...

    async def detokenize(self, token_ids: Sequence[int]) -> str:
        """The text of `token_ids`."""
        ...


class EngineProbe(Protocol):
    """The engines behind one address, for /healthz, the dashboard and the bulk shaper. Nothing
    here goes through a circuit breaker: a probe reports on the engine, it does not use it."""

    def health(self) -> str:
        """ "ok", or "error: ..." saying why the engine does not answer its health probe (blocks)."""
        ...

    def replicas(self) -> list[tuple[str, bool | None]]:
        """Each engine with the router's view of its health: the router's workers, or the address
        itself (None: no router to ask) where it is one engine or nothing answers (blocks)."""
        ...

    def metrics(self) -> list[ReplicaMetrics]:
        """Each engine's metrics, read from the engine itself (blocks)."""
        ...

    async def load(self) -> EngineLoad:
        """What every serving engine runs and holds now, summed; engine_unavailable when none serves."""
        ...


class ChunkReader:
    """The events of an OpenAI chat stream, read as bytes arrive.

    `feed` takes what one network read brought and returns the text of all the deltas
    that completed in it; the finish reason and usage are kept as they pass. An event
    may span reads; `data:` lines of one event are joined as the SSE format says."""

    def __init__(self) -> None:
        self.finish_reason = "stop"
        self.usage: dict | None = None
        self.done = False
        self._pending = b""
        self._data: list[bytes] = []

    def feed(self, received: bytes) -> str:
        lines = (self._pending + received).split(b"\n")
        self._pending = lines.pop()
        parts: list[str] = []
        for raw in lines:
            line = raw.rstrip(b"\r")
            if line.startswith(b"data:"):
                self._data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif not line and self._data:
                self._event(b"\n".join(self._data), parts)
                self._data = []
        return "".join(parts)

    def _event(self, data: bytes, parts: list[str]) -> None:
        if data == b"[DONE]":
            self.done = True
            return
        chunk = orjson.loads(data)
        if chunk.get("error") or chunk.get("object") == "error":
            raise EngineError(f"The engine failed mid-answer: {error_message(data)}")
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            content = (choice.get("delta") or {}).get("content")
            if content:
                parts.append(content)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def completion(self) -> Completion:
        return _completion(self.finish_reason, self.usage or {})


class QuietLimit:
    """A streamed response's body fails with aiohttp's SocketTimeoutError once nothing has come for
    `seconds`: aiohttp's sock_read, which moves its timer at every chunk received (one cancelled and
    one new a token), as one timer that looks every eighth of the limit at the bytes the body has
    received: it fails the body between `seconds` and 9/8 of it after its last byte. The response's
    own timer (which waited for its headers) stops at the next chunk."""

    CHECKS = 8

    def __init__(self, response: aiohttp.ClientResponse, seconds: float) -> None:
        if response.connection is not None and response.connection.protocol is not None:
            response.connection.protocol.read_timeout = None
        self._body = response.content
        self._seconds = seconds
        self._loop = asyncio.get_running_loop()
        self._seen, self._since = self._body.total_bytes, self._loop.time()
        self._handle = self._loop.call_at(self._since + seconds / self.CHECKS, self._check)

    def _check(self) -> None:
        now = self._loop.time()
        if self._body.total_bytes != self._seen:
            self._seen, self._since = self._body.total_bytes, now
        elif now - self._since >= self._seconds:
            self._body.set_exception(aiohttp.SocketTimeoutError("Timeout on reading data from socket"))
            return
        self._handle = self._loop.call_at(now + self._seconds / self.CHECKS, self._check)

    def cancel(self) -> None:
        self._handle.cancel()


def _completion(finish_reason: str, usage: dict) -> Completion:
    """The end of an answer from its finish reason and the engine's usage object."""
    details = usage.get("prompt_tokens_details")
    return Completion(
        finish_reason=finish_reason,
        prompt_tokens=usage.get("prompt_tokens"),
        cached_tokens=(details.get("cached_tokens") or 0) if details else None,
        completion_tokens=usage.get("completion_tokens"),
    )


# vLLM's API server closes a connection left idle for 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE), and a
# request sent on one just as the server closes it fails ("not reachable"), with no retry (a
# retried stream would generate its answer twice). The clients drop idle connections well before.
KEEPALIVE_SECONDS = 2.0


class OpenAIEngineClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        connect_timeout: float,
        token_timeout: float,
        api_key: str = "",
    ) -> None:
        self.model = model
        self._base_url = base_url.rstrip("/")
        # The engine's (and its router's) key, on every request: the engine is reachable only
        # by the product's processes (docs/deploy.md), and answers nobody without it.
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # The read timeout bounds the wait for each streamed chunk (a stream's body: QuietLimit). No
        # retries: a retried stream would generate the answer a second time.
        self._token_timeout = token_timeout
        timeout = httpx.Timeout(token_timeout, connect=connect_timeout)
        self._http = httpx.AsyncClient(
            base_url=self._base_url,
            timeout=timeout,
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_SECONDS),
            headers=self._headers,
        )
        self._stream_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout, sock_read=token_timeout
        )
        self._whole_timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=None)
        # One session per event loop (its connections belong to that loop).
        self._sessions = PerLoop(self._new_session)

    def _new_session(self) -> aiohttp.ClientSession:
        # As many streams as admission lets through: it, not the pool, bounds them.
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=KEEPALIVE_SECONDS)
        return aiohttp.ClientSession(
            connector=connector, timeout=self._stream_timeout, auto_decompress=False, headers=self._headers
        )

    def _session(self) -> aiohttp.ClientSession:
        session = self._sessions()
        if session.closed:
            self._sessions.pop()
            session = self._sessions()
        return session

    def stream_chat(self, request: ChatRequest) -> AsyncIterator[TextDelta | Completion]:
        return self._whole_chat(request) if request.whole else self._streamed_chat(request)

    def _chat_body(self, request: ChatRequest) -> dict:
        body: dict = {
            **request.sampling,
            "model": request.model or self.model,
            "messages": list(request.messages),
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "stream": not request.whole,
            "priority": request.priority,
        }
        if not request.whole:
            # Usage on every chunk: the first tells the prompt's size, whenever the answer ends.
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
            if request.stream_interval > 1:
                body["stream_interval"] = request.stream_interval
        if request.cache_salt:
            body["cache_salt"] = request.cache_salt
        if request.min_tokens:
            # vLLM refuses a floor above the ceiling.
            body["min_tokens"] = min(request.min_tokens, request.max_tokens)
        if request.continue_final_message:
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        return body

    def _chat_headers(self, request: ChatRequest) -> dict[str, str]:
        accept = "application/json" if request.whole else "text/event-stream"
        headers = {"Content-Type": "application/json", "Accept": accept}
        if request.request_id:
            headers["X-Request-Id"] = request.request_id
        if request.affinity:
            headers["X-Session-ID"] = request.affinity
        return headers

    async def _whole_chat(self, request: ChatRequest) -> AsyncIterator[TextDelta | Completion]:
        url = self._base_url + "/v1/chat/completions"
        body, headers = orjson.dumps(self._chat_body(request)), self._chat_headers(request)
        try:
            async with self._session().post(
                url, data=body, headers=headers, timeout=self._whole_timeout
            ) as response:
                try:
                    received = await response.read()
                finally:
                    if not response.content.at_eof():
                        # Cancelled while reading: dropped, so vLLM aborts the request.
                        response.close()
                if response.status >= 400:
                    raise status_error(response.status, received)
                reply = orjson.loads(received)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise engine_error(exc) from exc
        except orjson.JSONDecodeError as exc:
            raise EngineError(f"The engine sent a malformed reply: {exc}") from exc
        try:
            choice = reply["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise EngineError(f"The engine sent a malformed reply: {exc!r}") from exc
        usage = reply.get("usage") or {}
        yield TextDelta(text, prompt_tokens=usage.get("prompt_tokens"))
        yield _completion(choice.get("finish_reason") or "stop", usage)

    async def _streamed_chat(self, request: ChatRequest) -> AsyncIterator[TextDelta | Completion]:
        body, headers = self._chat_body(request), self._chat_headers(request)
        reader = ChunkReader()
        url = self._base_url + "/v1/chat/completions"
        try:
            async with self._session().post(url, data=orjson.dumps(body), headers=headers) as response:
                quiet = None
                try:
                    if response.status >= 400:
                        raise status_error(response.status, await response.read())
                    prompt_told = False
                    quiet = QuietLimit(response, self._token_timeout)
                    async for received in response.content.iter_any():
                        text = reader.feed(received)
                        if text:
                            if prompt_told or reader.usage is None:
                                yield TextDelta(text)
                            else:
                                prompt_told = True
                                yield TextDelta(text, prompt_tokens=reader.usage.get("prompt_tokens"))
                finally:
                    if quiet is not None:
                        quiet.cancel()
                    if not response.content.at_eof():
                        # Left early (a stop, a deadline): drop the connection, and vLLM aborts
                        # the request when its client goes away.
                        response.close()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise engine_error(exc) from exc
        except orjson.JSONDecodeError as exc:
            raise EngineError(f"The engine sent a malformed event: {exc}") from exc
        if not reader.done:
            # vLLM ends every stream with [DONE]: one closed without it lost its engine (a router
            # may close the stream cleanly when the engine behind it dies).
            raise EngineError("The engine's stream ended before the answer did.", code="engine_unavailable")
        yield reader.completion()

    async def count_prompt_tokens(self, messages: Sequence[dict[str, str]]) -> int:
        try:
            response = await self._http.post(
                "/tokenize",
                json={"model": self.model, "messages": list(messages), "add_generation_prompt": True},
            )
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise engine_error(exc) from exc
        return int(response.json()["count"])

    async def tokenize(self, text: str) -> list[int]:
        body = await self._post(
            "/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False}
        )
        return list(body["tokens"])

    async def detokenize(self, token_ids: Sequence[int]) -> str:
        body = await self._post("/detokenize", {"model": self.model, "tokens": list(token_ids)})
        return body["prompt"]

    async def aclose(self) -> None:
        """Close the connection pools of the running event loop."""
        session = self._sessions.pop()
        if session is not None:
            await session.close()
        await self._http.aclose()

    async def _post(self, path: str, payload: dict) -> dict:
        try:
            response = await self._http.post(path, json=payload)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise engine_error(exc) from exc
        return response.json()
