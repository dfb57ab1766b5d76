"""One document to one summary through the engine, map-reduce when it is too long.

The instruction is the system message and the document comes after it, so every
request of a job starts with the same tokens and the engine's prefix cache serves
them. A document longer than a chunk is split by the model's own tokens (the
engine's /tokenize and /detokenize), each chunk is summarized, and the chunk
summaries are summarized in turn until one remains. Nothing is cut off.
"""

from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass

from inference.client import ChatRequest, Completion, EngineClient, EngineError
from inference.isolation import cache_salt

PRESETS = {
    "paragraph": (
        "You summarize documents. Read the document the user sends and write one short paragraph "
        "that states its main point, the most important facts, names and numbers, and any conclusion "
        "or decision it reaches. Write plain prose in the document's language. Do not add opinions, "
        "do not mention that you are summarizing, and do not invent anything that is not in the document."
    ),
    "bullets": (
        "You summarize documents. Read the document the user sends and write three to six short bullet "
        "points, each starting with '- ', covering its main point, the most important facts, names and "
        "numbers, and any conclusion or decision it reaches. Use the document's language. Do not add "
        "opinions, do not mention that you are summarizing, and do not invent anything."
    ),
}

REDUCE_HEADER = "Summaries of the consecutive parts of one long document, in order:\n\n"
# Room kept free beyond the counted prompt: the chat template's tokens around a chunk.
TEMPLATE_MARGIN = 16


@dataclass
class Summary:
    text: str = ""
    finish_reason: str = ""
    engine_calls: int = 0
    chunks: int = 1
    document_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    # A line of another kind (jobs.kinds): the response it answered with.
    body: dict | None = None

    def add(self, completion: Completion) -> None:
        self.engine_calls += 1
        self.prompt_tokens += completion.prompt_tokens or 0
        self.cached_tokens += completion.cached_tokens or 0
        self.completion_tokens += completion.completion_tokens or 0


def cache_salt_for_owner(owner_id: int) -> str:
    """One salt per job owner: their jobs share cached instructions, other users' never do."""
    return cache_salt("jobs-cache-salt", owner_id)


class Summarizer:
    def __init__(
        self,
        engine: EngineClient,
        *,
        instruction: str,
        max_tokens: int,
        priority: int,
        temperature: float,
        chunk_tokens: int,
        context_window: int,
        cache_salt: str | None = None,
    ) -> None:
        self._engine = engine
        self.instruction = instruction
        self.max_tokens = max_tokens
        self.priority = priority
        self.temperature = temperature
        self._chunk_tokens = chunk_tokens
        self._context_window = context_window
        self._cache_salt = cache_salt
        self._budget: int | None = None

    def _messages(self, content: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.instruction}, {"role": "user", "content": content}]

    async def chunk_budget(self) -> int:
        """Most document tokens one request can carry with room for the summary."""
        if self._budget is None:
            overhead = await self._engine.count_prompt_tokens(self._messages(REDUCE_HEADER))
            room = self._context_window - self.max_tokens - overhead - TEMPLATE_MARGIN
            if room < 64:
                raise EngineError(
                    f"The instruction and a {self.max_tokens}-token summary leave no room for text "
                    f"in the {self._context_window}-token context window.",
                    code="engine_rejected",
                )
            self._budget = min(self._chunk_tokens, room)
        return self._budget

    async def summarize(self, text: str, *, request_id: str) -> Summary:
        summary = Summary()
        tokens = await self._engine.tokenize(text)
        summary.document_tokens = len(tokens)
        budget = await self.chunk_budget()
        if len(tokens) <= budget:
            summary.text = await self._call(text, summary, f"{request_id}-0")
            return summary
        parts = await self._split(tokens, budget)
        summary.chunks = len(parts)
        level = 0
        while True:
            partials = []
            for index, part in enumerate(parts):
                partials.append(await self._call(part, summary, f"{request_id}-{level}-{index}"))
            level += 1
            combined = REDUCE_HEADER + "\n\n".join(partials)
            combined_tokens = await self._engine.tokenize(combined)
            if len(combined_tokens) <= budget:
                summary.text = await self._call(combined, summary, f"{request_id}-{level}-reduce")
                return summary
            parts = await self._split(await self._engine.tokenize("\n\n".join(partials)), budget)

    async def _split(self, tokens: Sequence[int], budget: int) -> list[str]:
        size = budget - 16  # the reduce header's tokens
        return [await self._engine.detokenize(tokens[i : i + size]) for i in range(0, len(tokens), size)]

    async def _call(self, content: str, summary: Summary, request_id: str) -> str:
        request = ChatRequest(
            messages=self._messages(content),
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            priority=self.priority,
            cache_salt=self._cache_salt,
            request_id=request_id,
        )
        parts: list[str] = []
        completion = Completion(finish_reason="")
        async with aclosing(self._engine.stream_chat(request)) as events:
            async for event in events:
                if isinstance(event, Completion):
                    completion = event
                else:
                    parts.append(event.text)
        summary.add(completion)
        summary.finish_reason = completion.finish_reason
        text = "".join(parts).strip()
        if not text:
            raise EngineError("The engine returned an empty summary.", code="empty_summary")
        return text
