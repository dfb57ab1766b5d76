"""Nearest passages by vector: pgvector's HNSW index where the database has it, else exact search.

Exact search reads the collections' vectors (float32 bytes on every database) into one matrix per
collection, kept in this process and read again only when the collection's chunks change (their count
or newest id), and ranks them with one matrix product. pgvector's index is approximate; its search
width is KNOWLEDGE_HNSW_EF_SEARCH (recall against time, docs/benchmarks.md).
"""

import threading
from collections.abc import Sequence

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Max

from knowledge.models import Chunk

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


def index_vectors(rows: Sequence[tuple[int, int, Sequence[float]]]) -> None:
    """Copy (document id, position, vector) into the `vector` column, where there is one."""
    if not rows or not has_index():
        return
    with connection.cursor() as cursor:
        cursor.executemany(
            "UPDATE knowledge_chunk SET vector = %s::vector WHERE document_id = %s AND position = %s",
            [(to_sql(vector), document, position) for document, position, vector in rows],
        )


class _Matrix:
    def __init__(self, version: tuple[int, int], ids: np.ndarray, vectors: np.ndarray) -> None:
        self.version = version
        self.ids = ids
        self.vectors = vectors


_matrices: dict[int, _Matrix] = {}
_lock = threading.Lock()


def _matrix(collection_id: int) -> _Matrix:
    stats = Chunk.objects.filter(collection_id=collection_id).aggregate(n=Count("id"), last=Max("id"))
    version = (stats["n"], stats["last"] or 0)
    cached = _matrices.get(collection_id)
    if cached is not None and cached.version == version:
        return cached
    rows = list(Chunk.objects.filter(collection_id=collection_id).values_list("id", "embedding"))
    ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
    dimensions = settings.EMBEDDING_DIMENSIONS
    vectors = np.empty((len(rows), dimensions), dtype=DTYPE)
    for i, (_, data) in enumerate(rows):
        vectors[i] = from_bytes(bytes(data))
    matrix = _Matrix(version, ids, vectors)
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
            scores.append(matrix.vectors @ q)
    if not ids:
        return []
    all_ids, all_scores = np.concatenate(ids), np.concatenate(scores)
    limit = min(limit, len(all_ids))
    best = np.argpartition(-all_scores, limit - 1)[:limit]
    best = best[np.argsort(-all_scores[best], kind="stable")]
    return [(int(all_ids[i]), float(all_scores[i])) for i in best]


def approximate(query: Sequence[float], collection_ids: Sequence[int], limit: int) -> list[tuple[int, float]]:
    """The same through pgvector's HNSW index."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL hnsw.ef_search = %s", [settings.KNOWLEDGE_HNSW_EF_SEARCH])
        # Filtered HNSW scans can stop short of `limit`; iterative scans keep going (pgvector 0.8).
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cursor.execute(
            "SELECT id, -(vector <#> %s::vector) FROM knowledge_chunk "
            "WHERE collection_id = ANY(%s) ORDER BY vector <#> %s::vector LIMIT %s",
            [to_sql(query), list(collection_ids), to_sql(query), limit],
        )
        return [(int(row[0]), float(row[1])) for row in cursor.fetchall()]


def nearest(query: Sequence[float], collection_ids: Sequence[int], limit: int) -> list[tuple[int, float]]:
    if not collection_ids:
        return []
    if has_index():
        return approximate(query, collection_ids, limit)
    return exact(query, collection_ids, limit)
