"""A document's text cut into passages of at most KNOWLEDGE_CHUNK_TOKENS tokens of the embedding model's
own tokenizer, each overlapping the one before by KNOWLEDGE_CHUNK_OVERLAP tokens, so a sentence cut at one
edge is whole in the neighbour. The cut is deterministic: the same text and settings give the same chunks,
which is what lets an interrupted indexing run skip the chunks it already stored.

Each passage also has windows: its sentences, each cut at KNOWLEDGE_WINDOW_TOKENS tokens, embedded beside
it, so a question that one sentence answers finds the passage by that sentence (knowledge.vectors). A
passage of one window has none: its own vector is that window's.
"""

import bisect
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from tokenizers import Tokenizer

PAGE_BREAK = "\f"
# A sentence ends at . ! or ? before white space, or at a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n\s*")


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
        f"-w{settings.KNOWLEDGE_WINDOW_TOKENS}-{settings.EMBEDDING_MODEL_NAME}"
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


def windows(passage: str, *, size: int | None = None) -> list[str]:
    """The passage's sentences, each cut at `size` tokens (KNOWLEDGE_WINDOW_TOKENS); none when that
    leaves one window, or when `size` is 0."""
    size = settings.KNOWLEDGE_WINDOW_TOKENS if size is None else size
    if not size:
        return []
    found: list[str] = []
    for sentence in _SENTENCE_END.split(passage):
        offsets = tokenizer().encode(sentence, add_special_tokens=False).offsets
        for first in range(0, len(offsets), size):
            last = min(first + size, len(offsets))
            window = sentence[offsets[first][0] : offsets[last - 1][1]].strip()
            if window:
                found.append(window)
    return found if len(found) > 1 else []
