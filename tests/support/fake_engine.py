"""The one fake engine: the engine client's interface, for unit tests that inject faults or count,
pause and hang requests above the client. The client itself, and the processes that reach an engine
over HTTP, meet the stand-in engine (harness.stand_in_engine) instead; end-to-end tests use vLLM.

Words are tokens. Each request plays `script`: a str is a delta, a number a pause in seconds, an Event
a wait for it. Without a script the answer is one delta naming how many words the last message had, as
a summary would. `delay` pauses before anything is sent. A request fails like a broken engine, after its
script, when `fail_with` is set or its last message contains `poison`; with `hang` it never ends.
A finished request ends with `finish_reason` (`length`: cut at its limit, as `max_tokens` cuts vLLM's).
"""

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

from inference.client import ChatRequest, Completion, EngineError, EngineLoad, TextDelta


class FakeEngine:
    PROMPT_TOKENS = 10

    def __init__(
        self,
        script: Sequence | None = None,
        *,
        delay: float = 0,
        fail_with: EngineError | None = None,
        poison: str = "POISON",
        hang: bool = False,
        finish_reason: str = "stop",
    ):
        self.script = script
        self.delay = delay
        self.fail_with = fail_with
        self.poison = poison
        self.hang = hang
        self.finish_reason = finish_reason
        self.requests: list[ChatRequest] = []
        self.active = 0  # requests streaming now
        self.peak = 0  # the most at once
        self.aborted = 0  # requests closed before they finished
        self.closed = asyncio.Event()  # set when any request's stream is closed
        self._vocab: list[str] = []
        self._ids: dict[str, int] = {}

    def _failure(self, request: ChatRequest) -> EngineError | None:
        if self.fail_with is not None:
            # A new error each time, as the real client raises.
            return replace(self.fail_with, extra=dict(self.fail_with.extra))
        if self.poison in request.messages[-1]["content"]:
            return EngineError("The engine failed (500): boom")
        return None

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[TextDelta | Completion]:
        self.requests.append(request)
        self.active += 1
        self.peak = max(self.peak, self.active)
        finished = False
        try:
            await asyncio.sleep(self.delay)
            failure = self._failure(request)
            script = self.script
            if script is None:
                words = len(request.messages[-1]["content"].split())
                script = [] if failure else [f"Summary of {words} words."]
            deltas = 0
            for step in script:
                if isinstance(step, str):
                    deltas += 1
                    # The prompt's count on the first delta, as the engine's usage on every chunk gives it.
                    yield TextDelta(step, prompt_tokens=self.PROMPT_TOKENS if deltas == 1 else None)
                elif isinstance(step, asyncio.Event):
                    await step.wait()
                else:
                    await asyncio.sleep(step)
            if failure is not None:
                raise failure
            if self.hang:
                await asyncio.Event().wait()
            finished = True
            yield Completion(
                self.finish_reason,
                prompt_tokens=self.PROMPT_TOKENS,
                cached_tokens=0,
                completion_tokens=deltas,
            )
        finally:
            self.active -= 1
            if not finished:
                self.aborted += 1
            self.closed.set()

    async def count_prompt_tokens(self, messages: Sequence[dict[str, str]]) -> int:
        return sum(len(m["content"].split()) for m in messages) + 10

    async def tokenize(self, text: str) -> list[int]:
        ids = []
        for word in text.split():
            if word not in self._ids:
                self._ids[word] = len(self._vocab)
                self._vocab.append(word)
            ids.append(self._ids[word])
        return ids

    async def detokenize(self, token_ids: Sequence[int]) -> str:
        return " ".join(self._vocab[i] for i in token_ids)

    async def load(self) -> EngineLoad:
        return EngineLoad(running=self.active, waiting=0)
