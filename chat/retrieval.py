"""A chat turn's prompt with the passages its conversation's collections give (docs/knowledge.md).

A question asked for the first time retrieves (knowledge.search) from the conversation's collections its
owner may read, and what it quoted is stored; a question asked again (a regeneration, a continuation,
another process taking the answer over) finds what it quoted. Every user message of the history is then
rendered with its quotes (knowledge.context), the same bytes on every turn.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

from conversations.turns import Turn
from inference.client import EngineError
from knowledge import context, quotes, search

log = logging.getLogger(__name__)

UNSEARCHED = "Your collections could not be searched just now (the embedding engine is unavailable)."


@dataclass
class Retrieved:
    history: list[dict[str, str]]
    # The passages the newest question's prompt holds, by number (knowledge.quotes.source_as_dict).
    sources: list[dict] = field(default_factory=list)
    note: str = ""


def _question(history: Sequence[dict[str, str]]) -> str:
    return next(m["content"] for m in reversed(history) if m["role"] == "user")


def _numbered(
    found: list[search.Passage], quoted: dict
) -> tuple[list[tuple[int, search.Passage]], list[tuple[int, int]]]:
    numbers = {p.chunk_id: n for rows in quoted.values() for n, new, p in rows if new}
    numbered = context.new_passages(found, numbers, budget=settings.KNOWLEDGE_PASSAGE_TOKENS)
    cited = sorted({(numbers[p.chunk_id], p.chunk_id) for p in found if p.chunk_id in numbers})
    return numbered, cited


async def with_passages(
    turn: Turn, *, user: AbstractBaseUser | None, user_id: int, history: list[dict[str, str]]
) -> Retrieved:
    """`history` with each user message's quoted passages; the newest question retrieves first if it
    never has, from what its asker (`user`, read by `user_id` where the caller has none: an answer
    taken over from another process) may read now."""
    ids = turn.user_message_ids
    if not ids or not turn.retrieves:
        return Retrieved(history)
    quoted, collection_ids = await database_sync_to_async(quotes.quotes_and_collections)(
        message_ids=ids,
        asked=turn.user_message_id,
        conversation_id=turn.conversation_id,
        user=user,
        user_id=user_id,
    )
    note = ""
    if collection_ids:
        try:
            found = await search.question_passages(_question(history), collection_ids)
        except EngineError:
            log.warning("message %s: no retrieval, the embedding engine is unavailable", turn.user_message_id)
            note = UNSEARCHED
        else:
            numbered, cited = _numbered(found, quoted)
            await database_sync_to_async(quotes.quotes_store)(
                message_id=turn.user_message_id, numbered=numbered, cited=cited
            )
            # What was stored, as quotes_of would read it back: by number.
            by_chunk = {p.chunk_id: p for p in found}
            stored = [(n, True, p) for n, p in numbered] + [(n, False, by_chunk[c]) for n, c in cited]
            if stored:
                quoted[turn.user_message_id] = sorted(stored, key=lambda row: row[0])
    if not quoted:
        return Retrieved(history, note=note)
    rendered, users = [], iter(ids)
    for message in history:
        if message["role"] == "user":
            rows = quoted.get(next(users, None), [])
            new = [(n, p) for n, is_new, p in rows if is_new]
            cited = [n for n, is_new, _ in rows if not is_new]
            message = {"role": "user", "content": context.user_content(message["content"], new, cited)}
        rendered.append(message)
    sources = [quotes.source_as_dict(n, p) for n, _, p in quoted.get(turn.user_message_id, [])]
    return Retrieved(rendered, sources, note)
