"""Nearest passages by vector: pgvector's HNSW index where the database has it, else exact search.

A passage scores its best cosine similarity to the question: its own vector's or one of its windows'
(knowledge.chunking.windows), so a passage that one sentence answers ranks by that sentence.
Exact search reads the collections' vectors (float32 bytes on every database), each passage's followed by
its windows', into one matrix per collection, kept in this process and read again only when the
collection's chunks or windows change (their count or newest id), and ranks them with one matrix product.
pgvector's index is approximate; its search width is KNOWLEDGE_HNSW_EF_SEARCH (recall against time,
docs/benchmarks.md).
"""

import threading
from collections.abc import Sequence

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Max

from knowledge.models import Chunk, Window

DTYPE = np.dtype("<f4")


def to_bytes(vector: Sequence[float]) -> bytes:
    return np.asarray(vector, dtype=DTYPE).tobytes()


def from_bytes(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=DTYPE)


def to_sql(vector: Sequence[float]) -> str:
    """pgvector's text form of a vector."""
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


_has_index: dict[str, bool] = {}


def has_index() -> bool:
    """Whether this database has the `vector` column (PostgreSQL with pgvector)."""
    alias = connection.alias
    if alias not in _has_index:
        found = False
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT 1 FROM information_schema.columns "
                    "WHERE table_name = 'knowledge_chunk' AND column_name = 'vector'"
                )
                found = cursor.fetchone() is not None
        _has_index[alias] = found
    return _has_index[alias]


def index_vectors(rows: Sequence[tuple[int, int, Sequence[float]]], *, windows: bool = False) -> None:
    """Copy (document id, position, vector) of chunks, or (chunk id, position, vector) of `windows`, into
    the `vector` column, where there is one."""
    if not rows or not has_index():
        return
    table, owner = ("knowledge_window", "chunk_id") if windows else ("knowledge_chunk", "document_id")
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {table} SET vector = %s::vector WHERE {owner} = %s AND position = %s",
            [(to_sql(vector), key, position) for key, position, vector in rows],
        )


class _Matrix:
    def __init__(self, version: tuple, ids: np.ndarray, starts: np.ndarray, vectors: np.ndarray) -> None:
        self.version = version
        # Chunk ids, and where each chunk's rows (its own vector, then its windows') start in `vectors`.
        self.ids = ids
        self.starts = starts
        self.vectors = vectors


_matrices: dict[int, _Matrix] = {}
_lock = threading.Lock()


def _version(collection_id: int) -> tuple:
    chunks = Chunk.objects.filter(collection_id=collection_id).aggregate(n=Count("id"), last=Max("id"))
    windows = Window.objects.filter(collection_id=collection_id).aggregate(n=Count("id"), last=Max("id"))
    return (chunks["n"], chunks["last"] or 0, windows["n"], windows["last"] or 0)


def _matrix(collection_id: int) -> _Matrix:
    version = _version(collection_id)
    cached = _matrices.get(collection_id)
    if cached is not None and cached.version == version:
        return cached
    chunks = Chunk.objects.filter(collection_id=collection_id).order_by("id")
    windows = Window.objects.filter(collection_id=collection_id)
    ids = np.fromiter(chunks.values_list("id", flat=True), dtype=np.int64)
    counts = np.ones(len(ids), dtype=np.int64)
    index = {int(chunk_id): i for i, chunk_id in enumerate(ids)}
    for chunk_id, n in windows.values_list("chunk_id").annotate(n=Count("id")).order_by():
        if chunk_id in index:
            counts[index[chunk_id]] += n
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if len(ids) else counts
    # Filled row by row as the database streams them, so no second copy of the vectors is held. A row
    # that changed between the reads (a chunk indexed or deleted meanwhile) is left out or left zero
    # (no similarity); the version differs, so the next search reads the matrix again.
    vectors = np.zeros((int(counts.sum()), settings.EMBEDDING_DIMENSIONS), dtype=DTYPE)
    for chunk_id, data in chunks.values_list("id", "embedding").iterator(chunk_size=2000):
        if chunk_id in index:
            vectors[starts[index[chunk_id]]] = from_bytes(bytes(data))
    rows = windows.values_list("chunk_id", "position", "embedding")
    for chunk_id, position, data in rows.iterator(chunk_size=2000):
        i = index.get(chunk_id)
        if i is not None and position + 1 < counts[i]:
            vectors[starts[i] + 1 + position] = from_bytes(bytes(data))
    matrix = _Matrix(version, ids, starts, vectors)
    with _lock:
        _matrices[collection_id] = matrix
    return matrix


def exact(query: Sequence[float], collection_ids: Sequence[int], limit: int) -> list[tuple[int, float]]:
    """(chunk id, cosine similarity) of the `limit` nearest passages, best first, exactly."""
    q = np.asarray(query, dtype=DTYPE)
    ids, scores = [], []
    for collection_id in collection_ids:
        matrix = _matrix(collection_id)
        if len(matrix.ids):
            ids.append(matrix.ids)
            scores.append(np.maximum.reduceat(matrix.vectors @ q, matrix.starts))
    if not ids:
        return []
    all_ids, all_scores = np.concatenate(ids), np.concatenate(scores)
    limit = min(limit, len(all_ids))
    best = np.argpartition(-all_scores, limit - 1)[:limit]
    best = best[np.argsort(-all_scores[best], kind="stable")]
    return [(int(all_ids[i]), float(all_scores[i])) for i in best]


def approximate(query: Sequence[float], collection_ids: Sequence[int], limit: int) -> list[tuple[int, float]]:
    """The same through pgvector's HNSW indexes: the nearest passages and the nearest windows, each
    window standing for its passage."""
    vector, collections = to_sql(query), list(collection_ids)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL hnsw.ef_search = %s", [settings.KNOWLEDGE_HNSW_EF_SEARCH])
        # Filtered HNSW scans can stop short of `limit`; iterative scans keep going (pgvector 0.8).
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cursor.execute(
            "SELECT chunk, max(similarity) FROM ("
            "(SELECT id AS chunk, -(vector <#> %s::vector) AS similarity FROM knowledge_chunk "
            "WHERE collection_id = ANY(%s) ORDER BY vector <#> %s::vector LIMIT %s) UNION ALL "
            "(SELECT chunk_id, -(vector <#> %s::vector) FROM knowledge_window "
            "WHERE collection_id = ANY(%s) ORDER BY vector <#> %s::vector LIMIT %s)"
            ") nearest GROUP BY chunk ORDER BY max(similarity) DESC, chunk LIMIT %s",
            [vector, collections, vector, limit, vector, collections, vector, limit, limit],
        )
        return [(int(row[0]), float(row[1])) for row in cursor.fetchall()]


def nearest(query: Sequence[float], collection_ids: Sequence[int], limit: int) -> list[tuple[int, float]]:
    if not collection_ids:
        return []
    if has_index():
        return approximate(query, collection_ids, limit)
    return exact(query, collection_ids, limit)
