"""Passages by their words: SQLite's FTS5 (bm25) or PostgreSQL's text search (ts_rank).

A question is a few words, not a query language: its words are matched with OR, so a passage needs
only some of them, and the ranking prefers passages with more of them and rarer ones.

Ranking reads every passage it scores, and a question's common words are in a large share of a big
collection's passages, so the passages ranked are bounded (`KNOWLEDGE_FTS_RANKED`): those holding the
question's rarest words, as many words, rarest first, as keep the passages expected within the bound (where
even the rarest word is commoner, those holding the rarest words together). The passages each word is in
come from FTS5's vocabulary on SQLite and from the statistics ANALYZE keeps on PostgreSQL; every word of
the question still counts in the ranking.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class Statistics:
    """How many passages there are, the share of them holding each term, and the share of a term not listed
    (on PostgreSQL the least listed: ANALYZE lists the commonest lexemes). No statistics (a table never
    analyzed): every term counts as rare."""

    rows: float = 0.0
    shares: dict[str, float] = field(default_factory=dict)
    least: float = 0.0

    def passages(self, term: str) -> float:
        """The passages expected to hold the term."""
        return self.rows * self.shares.get(term, self.least)


def candidates(terms: Sequence[str], statistics: Statistics, bound: int) -> tuple[list[str], bool]:
    """The terms whose passages are ranked, and whether a passage must hold them all: the rarest ORed while
    the passages expected stay within `bound` (at least the rarest one), or, where the rarest alone is
    expected in more, the rarest ANDed until the passages expected to hold them together are within it."""
    ordered = sorted(terms, key=lambda term: (statistics.passages(term), term))
    expected = [statistics.passages(term) for term in ordered]
    count = 1
    if expected[0] <= bound:
        while count < len(ordered) and sum(expected[: count + 1]) <= bound:
            count += 1
        return ordered[:count], False
    together = expected[0]
    while count < len(ordered) and together > bound:
        # Words taken as independent: the share holding both is the product of their shares.
        together *= expected[count] / statistics.rows
        count += 1
    return ordered[:count], True


def _quoted(lexeme: str) -> str:
    """A lexeme as a text search query's literal (taken as it is, not stemmed again)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


_statistics: dict[str, tuple[tuple, Statistics]] = {}


def _postgres_statistics(analyzed: tuple) -> Statistics:
    """The passages' text search statistics on this PostgreSQL (pg_stats), read again only when the table
    was analyzed since (`analyzed`: its last ANALYZE and autovacuum's): reading them costs milliseconds."""
    cached = _statistics.get(connection.alias)
    if cached is not None and cached[0] == analyzed and any(analyzed):
        return cached[1]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.reltuples, s.most_common_elems::text::text[], s.most_common_elem_freqs FROM pg_class c "
            "LEFT JOIN pg_stats s ON s.schemaname = current_schema() AND s.tablename = c.relname "
            "AND s.attname = 'search' WHERE c.oid = 'knowledge_chunk'::regclass"
        )
        rows, lexemes, shares = cursor.fetchone()
    # The shares list ends with their least and their greatest; reltuples is -1 before any ANALYZE.
    found = Statistics(
        rows=max(float(rows), 0.0),
        shares=dict(zip(lexemes or [], shares or [], strict=False)),
        least=shares[-2] if shares else 0.0,
    )
    _statistics[connection.alias] = (analyzed, found)
    return found


def search(question: str, collection_ids: Sequence[int], limit: int) -> list[tuple[int, float]]:
    """(chunk id, rank score) of the best `limit` passages for the question's words, best first."""
    terms = words(question)
    if not terms or not collection_ids:
        return []
    bound = max(settings.KNOWLEDGE_FTS_RANKED, limit)
    if connection.vendor == "sqlite":
        return _sqlite(terms, list(collection_ids), bound, limit)
    return _postgres(terms, list(collection_ids), bound, limit)


def _sqlite(terms: list[str], collection_ids: list[int], bound: int, limit: int) -> list[tuple[int, float]]:
    placeholders = ",".join(["%s"] * len(collection_ids))
    with connection.cursor() as cursor:
        # Each word through FTS5's own tokenizer (the passages' table's: knowledge.migrations), one row a
        # word in a table of this connection's own, and the passages holding its terms from the index's
        # vocabulary (a word cut into several terms, a phrase, is in at most the fewest of them).
        cursor.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.knowledge_question "
            "USING fts5(text, tokenize='porter unicode61')"
        )
        cursor.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.knowledge_question_terms "
            "USING fts5vocab(temp, knowledge_question, instance)"
        )
        cursor.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.knowledge_chunk_terms "
            "USING fts5vocab(main, knowledge_chunk_fts, row)"
        )
        cursor.execute("DELETE FROM temp.knowledge_question")
        cursor.executemany(
            "INSERT INTO temp.knowledge_question(rowid, text) VALUES (%s, %s)", list(enumerate(terms))
        )
        cursor.execute(
            "SELECT q.doc, min(coalesce(v.doc, 0)) FROM temp.knowledge_question_terms q "
            "LEFT JOIN temp.knowledge_chunk_terms v ON v.term = q.term GROUP BY q.doc"
        )
        held = {terms[index]: count for index, count in cursor.fetchall()}
        cursor.execute("SELECT coalesce(max(id), 0) FROM knowledge_chunk")
        rows = float(cursor.fetchone()[0])
        if not held:
            return []
        shares = {word: count / max(rows, 1.0) for word, count in held.items()}
        chosen, together = candidates(list(held), Statistics(rows=rows, shares=shares), bound)
        match = (" AND " if together else " OR ").join(_phrase(word) for word in chosen)
        if len(chosen) < len(held):
            # bm25 scores only the words of the match, so all of them are ANDed in: the passages are
            # those of the chosen words, and every word counts in their ranking (the chosen ones twice).
            match = f"({match}) AND ({' OR '.join(map(_phrase, held))})"
        # CROSS JOIN keeps the index's matches the outer loop: SQLite without statistics may otherwise
        # run the match once for each of the collection's passages, bm25 reading each word's passages anew.
        cursor.execute(
            "SELECT id, score FROM (SELECT c.id, -bm25(knowledge_chunk_fts) AS score "
            "FROM knowledge_chunk_fts CROSS JOIN knowledge_chunk c ON c.id = knowledge_chunk_fts.rowid "
            f"WHERE knowledge_chunk_fts MATCH %s AND c.collection_id IN ({placeholders}) LIMIT %s"
            ") found ORDER BY score DESC, id LIMIT %s",
            [match, *collection_ids, bound, limit],
        )
        return [(int(row[0]), float(row[1])) for row in cursor.fetchall()]


def _phrase(word: str) -> str:
    return '"' + word.replace('"', "") + '"'


def _postgres(terms: list[str], collection_ids: list[int], bound: int, limit: int) -> list[tuple[int, float]]:
    placeholders = ",".join(["%s"] * len(collection_ids))
    with connection.cursor() as cursor:
        # The question's words through the configuration's parser and stemmer (stop words drop out), and
        # when the passages' table was last analyzed.
        cursor.execute(
            "SELECT tsvector_to_array(to_tsvector(%s::regconfig, %s)), "
            "pg_stat_get_last_analyze_time(%s::regclass), pg_stat_get_last_autoanalyze_time(%s::regclass)",
            [settings.KNOWLEDGE_FTS_CONFIG, " ".join(terms), "knowledge_chunk", "knowledge_chunk"],
        )
        lexemes, *analyzed = cursor.fetchone()
    if not lexemes:
        return []
    chosen, together = candidates(lexemes, _postgres_statistics(tuple(analyzed)), bound)
    with connection.cursor() as cursor:
        # `search` is the passage's stored text search vector (knowledge.migrations). The LIMIT holds the
        # bound where the statistics are off (a collection grown since ANALYZE).
        cursor.execute(
            "SELECT id, ts_rank(search, %s::tsquery) AS rank FROM ("
            "SELECT id, search FROM knowledge_chunk "
            f"WHERE search @@ %s::tsquery AND collection_id IN ({placeholders}) LIMIT %s"
            ") found ORDER BY rank DESC, id LIMIT %s",
            [
                " | ".join(map(_quoted, lexemes)),
                (" & " if together else " | ").join(map(_quoted, chosen)),
                *collection_ids,
                bound,
                limit,
            ],
        )
        return [(int(row[0]), float(row[1])) for row in cursor.fetchall()]
