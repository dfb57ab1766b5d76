"""An EngineClient that injects faults, for unit tests only; end-to-end tests use vLLM."""

import asyncio
from collections.abc import AsyncIterator, Sequence

from inference.client import ChatRequest, Completion, EngineError, TextDelta


class FakeEngine:
    """Plays a script: a str is a delta, a number a pause in seconds, an Event a wait for it."""

    def __init__(self, script: Sequence = (), *, fail_with: EngineError | None = None, hang: bool = False):
        self.script = list(script)
        self.fail_with = fail_with
        self.hang = hang
        self.requests: list[ChatRequest] = []
        self.closed = asyncio.Event()

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[TextDelta | Completion]:
        self.requests.append(request)
        deltas = 0
        try:
            for step in self.script:
                if isinstance(step, str):
                    deltas += 1
                    yield TextDelta(step)
                elif isinstance(step, asyncio.Event):
                    await step.wait()
                else:
                    await asyncio.sleep(step)
            if self.fail_with is not None:
                raise self.fail_with
            if self.hang:
                await asyncio.Event().wait()
            yield Completion("stop", prompt_tokens=10, cached_tokens=0, completion_tokens=deltas)
        finally:
            self.closed.set()

    async def count_prompt_tokens(self, messages) -> int:
        return sum(len(m["content"]) for m in messages)

    async def is_healthy(self) -> bool:
        return True
