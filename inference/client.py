"""The one way the web tier and the workers reach the engine.

`EngineClient` is the interface: a streaming chat call that yields text deltas and
ends with a `Completion`, plus prompt token counting and a health probe. Stopping
a generation is closing its iterator (or cancelling the task that drives it):
that closes the HTTP stream, and vLLM aborts the request when its client goes away.

`OpenAIEngineClient` talks to vLLM's OpenAI-compatible server through the openai
SDK. Unit tests may substitute another implementation to inject faults.
"""

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families


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


@dataclass(frozen=True)
class TextDelta:
    text: str


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


@dataclass
class EngineError(Exception):
    """Any failure reaching or using the engine; `code` is stable and client-facing."""

    detail: str
    code: str = "engine_error"
    extra: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


class EngineClient(Protocol):
    def stream_chat(self, request: ChatRequest) -> AsyncIterator[TextDelta | Completion]:
        """Yield text deltas as the engine makes them, then exactly one Completion."""
        ...

    async def count_prompt_tokens(self, messages: Sequence[dict[str, str]]) -> int:
        """Tokens the chat template makes of `messages`, generation prompt included."""
        ...

    async def is_healthy(self) -> bool:
        """True when the engine answers its health probe."""
        ...

    async def tokenize(self, text: str) -> list[int]:
        """The model's token ids for plain `text` (no chat template, no special tokens)."""
        ...

    async def detokenize(self, token_ids: Sequence[int]) -> str:
        """The text of `token_ids`."""
        ...

    async def load(self) -> EngineLoad:
        """What the engine is doing now, from its metrics."""
        ...

    async def aclose(self) -> None:
        """Close the connection pools; a client lives on one event loop."""
        ...


def metric_sums(text: str, names: Sequence[str]) -> dict[str, float]:
    """Each named sample of an engine's /metrics text, summed over its labels."""
    sums = dict.fromkeys(names, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in sums:
                sums[sample.name] += sample.value
    return sums


def _engine_error(exc: Exception) -> EngineError:
    if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException):
        return EngineError("The engine did not answer in time.", code="engine_timeout")
    if isinstance(exc, openai.APIConnectionError | httpx.TransportError):
        return EngineError("The engine is not reachable.", code="engine_unavailable")
    if isinstance(exc, openai.BadRequestError):
        return EngineError(f"The engine refused the request: {exc.message}", code="engine_rejected")
    if isinstance(exc, openai.APIStatusError):
        return EngineError(f"The engine failed ({exc.status_code}): {exc.message}")
    return EngineError(f"The engine failed: {exc}")


class OpenAIEngineClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        connect_timeout: float,
        token_timeout: float,
    ) -> None:
        self.model = model
        self._base_url = base_url.rstrip("/")
        # The read timeout bounds the wait for each streamed chunk. No retries: a
        # retried stream would generate the answer a second time.
        timeout = httpx.Timeout(token_timeout, connect=connect_timeout)
        self._openai = openai.AsyncOpenAI(
            base_url=self._base_url + "/v1", api_key="unused", timeout=timeout, max_retries=0
        )
        self._http = httpx.AsyncClient(base_url=self._base_url, timeout=timeout)

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[TextDelta | Completion]:
        extra_body: dict = {**request.sampling, "priority": request.priority}
        if request.cache_salt:
            extra_body["cache_salt"] = request.cache_salt
        if request.min_tokens:
            # vLLM refuses a floor above the ceiling.
            extra_body["min_tokens"] = min(request.min_tokens, request.max_tokens)
        extra_headers = {}
        if request.request_id:
            extra_headers["X-Request-Id"] = request.request_id
        if request.affinity:
            extra_headers["X-Session-ID"] = request.affinity
        finish_reason = "stop"
        usage = None
        try:
            stream = await self._openai.chat.completions.create(
                model=request.model or self.model,
                messages=list(request.messages),
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=extra_body,
                extra_headers=extra_headers or None,
            )
            async with stream:
                async for chunk in stream:
                    if chunk.usage is not None:
                        usage = chunk.usage
                    for choice in chunk.choices:
                        if choice.delta.content:
                            yield TextDelta(choice.delta.content)
                        if choice.finish_reason:
                            finish_reason = choice.finish_reason
        except openai.OpenAIError as exc:
            raise _engine_error(exc) from exc
        except httpx.HTTPError as exc:
            raise _engine_error(exc) from exc
        details = getattr(usage, "prompt_tokens_details", None)
        yield Completion(
            finish_reason=finish_reason,
            prompt_tokens=usage.prompt_tokens if usage else None,
            cached_tokens=(details.cached_tokens or 0) if details else None,
            completion_tokens=usage.completion_tokens if usage else None,
        )

    async def count_prompt_tokens(self, messages: Sequence[dict[str, str]]) -> int:
        try:
            response = await self._http.post(
                "/tokenize",
                json={"model": self.model, "messages": list(messages), "add_generation_prompt": True},
            )
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise _engine_error(exc) from exc
        return int(response.json()["count"])

    async def is_healthy(self) -> bool:
        try:
            response = await self._http.get("/health")
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def tokenize(self, text: str) -> list[int]:
        body = await self._post(
            "/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False}
        )
        return list(body["tokens"])

    async def detokenize(self, token_ids: Sequence[int]) -> str:
        body = await self._post("/detokenize", {"model": self.model, "tokens": list(token_ids)})
        return body["prompt"]

    async def load(self) -> EngineLoad:
        try:
            response = await self._http.get("/metrics")
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise _engine_error(exc) from exc
        gauges = metric_sums(response.text, ["vllm:num_requests_running", "vllm:num_requests_waiting"])
        return EngineLoad(
            running=int(gauges["vllm:num_requests_running"]), waiting=int(gauges["vllm:num_requests_waiting"])
        )

    async def aclose(self) -> None:
        """Close the connection pools; a client lives on one event loop."""
        await self._openai.close()
        await self._http.aclose()

    async def _post(self, path: str, payload: dict) -> dict:
        try:
            response = await self._http.post(path, json=payload)
            response.raise_for_status()
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code == 400:
                raise EngineError(
                    f"The engine refused the request: {exc.response.text}", code="engine_rejected"
                ) from exc
            raise _engine_error(exc) from exc
        except httpx.HTTPError as exc:
            raise _engine_error(exc) from exc
        return response.json()
