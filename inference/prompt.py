"""Prompt assembly for chat.

Every turn sends the whole conversation in one stable layout (system prompt, then
the turns in order, earlier turns never rewritten), so the engine's prefix cache
serves everything up to the newest user message. When the history no longer fits
the context window, whole old turns are dropped from the front, and the caller
is told how many so it can say so.
"""

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

ChatMessage = dict[str, str]

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


def _upper_bound(messages: Sequence[ChatMessage]) -> int:
    # The model's tokenizer is byte-level: a token covers at least one byte, so
    # bytes plus template overhead bound the token count from above.
    return sum(len(m["content"].encode()) + _TEMPLATE_OVERHEAD_PER_MESSAGE for m in messages)


async def assemble(
    system_prompt: str,
    history: Sequence[ChatMessage],
    *,
    context_window: int,
    answer_budget: int,
    count_tokens: Callable[[Sequence[ChatMessage]], Awaitable[int]],
) -> Prompt:
    """Build the message list for the engine from the history ending in the new user message.

    `count_tokens` is asked only when the cheap upper bound says the prompt might not fit.
    """
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    turns = _turns(history)
    limit = context_window - answer_budget
    for dropped in range(len(turns)):
        messages = system + [m for turn in turns[dropped:] for m in turn]
        if _upper_bound(messages) <= limit or await count_tokens(messages) <= limit:
            return Prompt(messages=messages, dropped_turns=dropped)
    raise PromptTooLong(
        f"The message does not fit the context window of {context_window} tokens "
        f"with {answer_budget} tokens left for the answer."
    )
