"""Prompt assembly for chat.

Every turn sends the whole conversation in one stable layout (system prompt, then
the turns in order, earlier turns never rewritten), so the engine's prefix cache
serves everything up to the newest user message. When the history no longer fits
the context window, whole old turns are dropped from the front, and the caller
is told how many so it can say so.
"""

import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

ChatMessage = dict[str, str]
CountTokens = Callable[[Sequence[ChatMessage]], Awaitable[int]]

# Template tokens the chat format adds around each message (role header, end marker).
_TEMPLATE_OVERHEAD_PER_MESSAGE = 8


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
    """
    counts = counts or PromptCounts()
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    turns = _turns(history)
    limit = context_window - answer_budget
    for dropped in range(len(turns)):
        messages = system + [m for turn in turns[dropped:] for m in turn]
        if counts.bound(messages) <= limit or await counts.count(messages, count_tokens) <= limit:
            return Prompt(messages=messages, dropped_turns=dropped)
    raise PromptTooLong(
        f"The message does not fit the context window of {context_window} tokens "
        f"with {answer_budget} tokens left for the answer."
    )
