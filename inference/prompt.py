"""Prompt assembly for chat.

Every turn sends the whole conversation in one stable layout (system prompt, then
the turns in order, earlier turns never rewritten), so the engine's prefix cache
serves everything up to the newest user message. When the history no longer fits
the context window, whole old turns are dropped from the front, and the caller
is told how many so it can say so.
"""

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

ChatMessage = dict[str, str]
CountTokens = Callable[[Sequence[ChatMessage]], Awaitable[int]]

# Template tokens the chat format adds around each message (role header, end marker).
_TEMPLATE_OVERHEAD_PER_MESSAGE = 8
# At least the most bytes one token covers in the tokenizers the product runs (SmolLM2's longest
# token is 81 bytes, a run of spaces): a history longer than this many bytes a token of room cannot
# fit, whatever it says.
MAX_BYTES_PER_TOKEN = 128


class PromptTooLong(Exception):
    pass


@dataclass(frozen=True)
class Prompt:
    messages: list[ChatMessage]
    dropped_turns: int


def _turns(history: Sequence[ChatMessage]) -> list[list[ChatMessage]]:
    """Group history into turns, each starting at a user message."""
    turns: list[list[ChatMessage]] = []
    for message in history:
        if message["role"] == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


def _byte_bound(messages: Sequence[ChatMessage]) -> int:
    # The model's tokenizer is byte-level: a token covers at least one byte, so
    # bytes plus template overhead bound the token count from above.
    return sum(len(m["content"].encode()) + _TEMPLATE_OVERHEAD_PER_MESSAGE for m in messages)


class PromptCounts:
    """The engine's exact prompt token counts, remembered by prompt prefix.

    A conversation's prompt grows by two messages a turn. Once the engine has counted a
    prompt, the next one is bounded by that count plus the bytes of what was added, so
    the engine is asked again (a round trip on the path of the first token) only when
    that bound no longer fits, not on every turn of a long conversation.
    """

    def __init__(self, size: int = 4096):
        self._size = size
        self._known: OrderedDict[bytes, int] = OrderedDict()

    @staticmethod
    def _digests(messages: Sequence[ChatMessage]) -> list[bytes]:
        """Digest of each prefix of `messages` (one hash chained over the messages)."""
        digests, running = [], b""
        for m in messages:
            running = hashlib.blake2b(running + json.dumps([m["role"], m["content"]]).encode()).digest()
            digests.append(running)
        return digests

    def bound(self, messages: Sequence[ChatMessage]) -> int:
        """An upper bound of the prompt's tokens, from the longest counted prefix."""
        digests = self._digests(messages)
        for length in range(len(messages), 0, -1):
            known = self._known.get(digests[length - 1])
            if known is not None:
                self._known.move_to_end(digests[length - 1])
                return known + _byte_bound(messages[length:])
        return _byte_bound(messages)

    async def count(self, messages: Sequence[ChatMessage], count_tokens: CountTokens) -> int:
        """The exact count, from `count_tokens` (the engine); remembered for the prompts that extend it."""
        tokens = await count_tokens(messages)
        if messages:
            self._known[self._digests(messages)[-1]] = tokens
            while len(self._known) > self._size:
                self._known.popitem(last=False)
        return tokens


async def assemble(
    system_prompt: str,
    history: Sequence[ChatMessage],
    *,
    context_window: int,
    answer_budget: int,
    count_tokens: CountTokens,
    counts: PromptCounts | None = None,
) -> Prompt:
    """Build the message list for the engine from the history ending in the new user message.

    `count_tokens` is asked only when the cheap upper bound says the prompt might not fit;
    `counts`, kept from one call to the next, makes that bound tight for long conversations.
    When turns must go, the engine counts the whole prompt once and each turn once, never the
    remaining prompt again for each dropped turn: what a turn adds is its own count less what
    every count carries (the template's opening and the generation prompt), found by comparing
    the whole prompt's count with the sum of its parts. Turns that could not fit even at
    `MAX_BYTES_PER_TOKEN` bytes a token go first, uncounted.
    """
    counts = counts or PromptCounts()
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    turns = _turns(history)
    limit = context_window - answer_budget
    dropped = _beyond_any_count(system, turns, limit)

    def kept(first: int) -> list[ChatMessage]:
        return system + [m for turn in turns[first:] for m in turn]

    messages = kept(dropped)
    if counts.bound(messages) <= limit:
        return Prompt(messages=messages, dropped_turns=dropped)
    whole = await counts.count(messages, count_tokens)
    if whole <= limit:
        return Prompt(messages=messages, dropped_turns=dropped)
    # Only turns before the newest (the question itself) may go.
    droppable = turns[dropped:-1]
    parts = await asyncio.gather(*(count_tokens(part) for part in [system, *droppable, turns[-1]] if part))
    # Each separate count carries the same overhead at least once more than the whole does.
    overhead = max(0, (sum(parts) - whole) // max(1, len(parts) - 1))
    turn_tokens = parts[1:-1] if system else parts[:-1]
    estimate = whole
    for share in turn_tokens:
        if estimate <= limit:
            break
        estimate -= max(0, share - overhead)
        dropped += 1
    # The estimate is checked exactly; a prompt still too long loses one more turn a count.
    while dropped < len(turns):
        messages = kept(dropped)
        if counts.bound(messages) <= limit or await counts.count(messages, count_tokens) <= limit:
            return Prompt(messages=messages, dropped_turns=dropped)
        dropped += 1
    raise PromptTooLong(
        f"The message does not fit the context window of {context_window} tokens "
        f"with {answer_budget} tokens left for the answer."
    )


def _beyond_any_count(system: list[ChatMessage], turns: list[list[ChatMessage]], limit: int) -> int:
    """How many leading turns cannot fit whatever the engine counts: those that leave more than
    `limit` tokens at MAX_BYTES_PER_TOKEN bytes a token. The newest turn always stays."""
    room = limit * MAX_BYTES_PER_TOKEN - _byte_bound(system)
    total = sum(_byte_bound(turn) for turn in turns)
    dropped = 0
    while dropped < len(turns) - 1 and total > room:
        total -= _byte_bound(turns[dropped])
        dropped += 1
    return dropped
