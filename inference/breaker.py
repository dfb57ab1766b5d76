"""A circuit breaker around the engine client.

After INFERENCE_BREAKER_FAILURES consecutive engine failures the circuit opens: calls
fail at once with `engine_unavailable` and a retry-after. After the cool-down
exactly one probe request goes through; its success closes the circuit, its
failure opens it again.

Why not a library: purgatory (the maintained asyncio breaker) lets every
concurrent request through in its half-open state, where a recovering engine
should see a single probe; pybreaker's async support targets Tornado. The state
machine below is the whole of it.
"""

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

from inference.client import ChatRequest, Completion, EngineClient, EngineError, TextDelta

T = TypeVar("T")

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

# Failures of the engine itself; a refused request (engine_rejected) says nothing about its health.
_FAILURE_CODES = {"engine_unavailable", "engine_error", "engine_timeout"}


class CircuitBreaker:
    def __init__(
        self,
        *,
        failure_threshold: int,
        cool_down: float,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[str], None] | None = None,
    ) -> None:
        self.failure_threshold = failure_threshold
        self.cool_down = cool_down
        self._clock = clock
        self._on_change = on_change
        self.state = CLOSED
        self.failures = 0
        self._opened_at = 0.0
        self._probing = False

    def _set(self, state: str) -> None:
        if state != self.state:
            self.state = state
            if self._on_change is not None:
                self._on_change(state)

    def retry_after(self) -> float:
        return max(0.0, self._opened_at + self.cool_down - self._clock())

    def before_call(self) -> None:
        """Raise engine_unavailable while open; let one probe through after the cool-down."""
        if self.state == CLOSED:
            return
        if self.state == OPEN and self.retry_after() <= 0:
            self._set(HALF_OPEN)
        if self.state == HALF_OPEN and not self._probing:
            self._probing = True
            return
        raise EngineError(
            "The engine is failing; requests are paused briefly.",
            code="engine_unavailable",
            extra={"retry_after": round(max(self.retry_after(), 1.0), 1)},
        )

    def record_success(self) -> None:
        self._probing = False
        self.failures = 0
        self._set(CLOSED)

    def record_failure(self) -> None:
        self._probing = False
        self.failures += 1
        if self.state == HALF_OPEN or self.failures >= self.failure_threshold:
            self._opened_at = self._clock()
            self._set(OPEN)

    def record_neutral(self) -> None:
        """The call ended without telling anything about the engine (stopped, refused)."""
        self._probing = False

    def record(self, exc: BaseException | None) -> None:
        """Record how a call ended: without an exception, with a failure of the engine (an
        unreachable one is told when to try again), or otherwise (neutral)."""
        if exc is None:
            self.record_success()
        elif isinstance(exc, EngineError) and exc.code in _FAILURE_CODES:
            self.record_failure()
            if exc.code == "engine_unavailable":
                # Unreachable (down, or restarting after a crash): say when to try again, as the
                # open circuit does; at least a second, the remaining cool-down once it opened.
                exc.extra.setdefault("retry_after", round(max(self.retry_after(), 1.0), 1))
        else:
            self.record_neutral()


class GuardedEngineClient:
    """An EngineClient that passes every call through a CircuitBreaker."""

    def __init__(self, inner: EngineClient, breaker: CircuitBreaker) -> None:
        self.inner = inner
        self.breaker = breaker

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[TextDelta | Completion]:
        self.breaker.before_call()
        outcome: BaseException | None = None
        try:
            async for event in self.inner.stream_chat(request):
                yield event
        except BaseException as exc:
            outcome = exc
            raise
        finally:
            self.breaker.record(outcome)

    async def _call(self, method: Callable[..., Awaitable[T]], *args) -> T:
        self.breaker.before_call()
        try:
            result = await method(*args)
        except BaseException as exc:
            self.breaker.record(exc)
            raise
        self.breaker.record(None)
        return result

    async def count_prompt_tokens(self, messages: Sequence[dict[str, str]]) -> int:
        return await self._call(self.inner.count_prompt_tokens, messages)

    async def tokenize(self, text: str) -> list[int]:
        return await self._call(self.inner.tokenize, text)

    async def detokenize(self, token_ids: Sequence[int]) -> str:
        return await self._call(self.inner.detokenize, token_ids)

    async def aclose(self) -> None:
        await self.inner.aclose()
