"""An EngineClient that injects faults, for unit tests only; end-to-end tests use vLLM."""

import asyncio
from collections.abc import AsyncIterator, Sequence

from inference.client import ChatRequest, Completion, EngineError, TextDelta


class FakeEngine:
    def __init__(
        self, deltas: Sequence[str] = (), *, fail_with: EngineError | None = None, hang: bool = False
    ):
        self.deltas = list(deltas)
        self.fail_with = fail_with
        self.hang = hang
        self.requests: list[ChatRequest] = []
        self.closed = asyncio.Event()

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[TextDelta | Completion]:
        self.requests.append(request)
        try:
            for text in self.deltas:
                yield TextDelta(text)
            if self.fail_with is not None:
                raise self.fail_with
            if self.hang:
                await asyncio.Event().wait()
            yield Completion("stop", prompt_tokens=10, cached_tokens=0, completion_tokens=len(self.deltas))
        finally:
            self.closed.set()

    async def count_prompt_tokens(self, messages) -> int:
        return sum(len(m["content"]) for m in messages)

    async def is_healthy(self) -> bool:
        return True
