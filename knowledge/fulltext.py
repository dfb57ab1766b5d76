"""Passages by their words: SQLite's FTS5 (bm25) or PostgreSQL's text search (ts_rank).

A question is a few words, not a query language: its words are matched with OR, so a passage needs
only some of them, and the ranking prefers passages with more of them and rarer ones.
"""

import re
from collections.abc import Sequence

from django.conf import settings
from django.db import connection

_WORD = re.compile(r"\w+", re.UNICODE)
# Words too short to carry meaning on their own; the rest are left to the database's stemmer
# and stop words.
_MIN_WORD = 2
_MAX_WORDS = 32


def words(question: str) -> list[str]:
    found = []
    for word in _WORD.findall(question.lower()):
        if len(word) >= _MIN_WORD and word not in found:
            found.append(word)
    return found[:_MAX_WORDS]


def search(question: str, collection_ids: Sequence[int], limit: int) -> list[tuple[int, float]]:
    """(chunk id, rank score) of the best `limit` passages for the question's words, best first."""
    terms = words(question)
    if not terms or not collection_ids:
        return []
    placeholders = ",".join(["%s"] * len(collection_ids))
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            match = " OR ".join('"' + term.replace('"', "") + '"' for term in terms)
            cursor.execute(
                "SELECT c.id, -bm25(knowledge_chunk_fts) FROM knowledge_chunk_fts "
                "JOIN knowledge_chunk c ON c.id = knowledge_chunk_fts.rowid "
                f"WHERE knowledge_chunk_fts MATCH %s AND c.collection_id IN ({placeholders}) "
                "ORDER BY bm25(knowledge_chunk_fts) LIMIT %s",
                [match, *collection_ids, limit],
            )
        else:
            # Each word through the configuration's own parser and stemmer, joined with OR;
            # stop words drop out (an empty query matches nothing). `search` is the passage's stored
            # text search vector (knowledge.migrations).
            cursor.execute(
                "WITH q AS (SELECT to_tsquery(%s::regconfig, "
                "array_to_string(array(SELECT quote_literal(w) FROM unnest(%s::text[]) w), ' | ')) AS q) "
                "SELECT c.id, ts_rank(c.search, q.q) AS rank FROM knowledge_chunk c, q "
                f"WHERE c.search @@ q.q AND c.collection_id IN ({placeholders}) "
                "ORDER BY rank DESC, c.id LIMIT %s",
                [settings.KNOWLEDGE_FTS_CONFIG, terms, *collection_ids, limit],
            )
        return [(int(row[0]), float(row[1])) for row in cursor.fetchall()]
