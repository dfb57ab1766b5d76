"""A document's text cut into passages of at most KNOWLEDGE_CHUNK_TOKENS tokens of the embedding model's
own tokenizer, each overlapping the one before by KNOWLEDGE_CHUNK_OVERLAP tokens, so a sentence cut at one
edge is whole in the neighbour. The cut is deterministic: the same text and settings give the same chunks,
which is what lets an interrupted indexing run skip the chunks it already stored.
"""

import bisect
import functools
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from tokenizers import Tokenizer

PAGE_BREAK = "\f"


@dataclass(frozen=True)
class Piece:
    position: int
    text: str
    start: int
    tokens: int
    # The 1-based page the piece starts on, where the text has page breaks.
    page: int | None


def chunker_id() -> str:
    """What the chunks are made with: a document indexed with another is indexed again."""
    return (
        f"tokens-{settings.KNOWLEDGE_CHUNK_TOKENS}-{settings.KNOWLEDGE_CHUNK_OVERLAP}"
        f"-{settings.EMBEDDING_MODEL_NAME}"
    )


@functools.cache
def _tokenizer(path: str) -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(Path(path) / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def tokenizer() -> Tokenizer:
    return _tokenizer(settings.EMBEDDING_MODEL)


def pieces(text: str, *, size: int | None = None, overlap: int | None = None) -> list[Piece]:
    """The passages of `text`, in order."""
    size = size or settings.KNOWLEDGE_CHUNK_TOKENS
    overlap = settings.KNOWLEDGE_CHUNK_OVERLAP if overlap is None else overlap
    step = max(1, size - overlap)
    page_starts = [0] + [i + 1 for i, c in enumerate(text) if c == PAGE_BREAK]
    paged = len(page_starts) > 1
    offsets = tokenizer().encode(text, add_special_tokens=False).offsets
    result: list[Piece] = []
    first = 0
    while first < len(offsets):
        last = min(first + size, len(offsets))
        start, end = offsets[first][0], offsets[last - 1][1]
        passage = text[start:end].replace(PAGE_BREAK, "\n").strip()
        if passage:
            page = bisect.bisect_right(page_starts, start) if paged else None
            result.append(Piece(len(result), passage, start, last - first, page))
        if last == len(offsets):
            break
        first += step
    return result
