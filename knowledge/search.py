"""Hybrid retrieval: the passages that answer a question, from the collections a user may read.

The question is embedded (at query priority, ahead of any indexing batch) and searched by vector
(knowledge.vectors) and by its words (knowledge.fulltext); the two rankings are fused by reciprocal
rank fusion (each passage scores the sum of 1 / (KNOWLEDGE_RRF_K + rank) over the rankings it is in).
A passage found only by vector below KNOWLEDGE_MIN_SCORE is no match.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.conf import settings

from inference.engine import embedding_client
from knowledge import fulltext, vectors
from knowledge.models import Chunk


@dataclass(frozen=True)
class Passage:
    chunk_id: int
    document_id: int
    document: str
    collection_id: int
    position: int
    page: int | None
    text: str
    tokens: int
    score: float
    # Cosine similarity to the question, where the vector search found it.
    similarity: float | None

    def as_dict(self) -> dict:
        return {
            "chunk": self.chunk_id,
            "document": self.document_id,
            "document_name": self.document,
            "collection": self.collection_id,
            "position": self.position,
            "page": self.page,
            "text": self.text,
            "score": round(self.score, 6),
            "similarity": None if self.similarity is None else round(self.similarity, 6),
        }


def fuse(rankings: Sequence[Sequence[int]], k: int) -> dict[int, float]:
    """Reciprocal rank fusion of several rankings of ids, best first."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return scores


def passages(
    *, question: str, query_vector: Sequence[float], collection_ids: Sequence[int], top_k: int | None = None,
    mode: str = "hybrid",
) -> list[Passage]:  # fmt: skip
    """The best passages for the question (`mode`: hybrid, vector or text), best first. The caller has
    checked that the user may read every collection in `collection_ids`."""
    top_k = top_k or settings.KNOWLEDGE_TOP_K
    n = max(settings.KNOWLEDGE_CANDIDATES, top_k)
    by_vector = vectors.nearest(query_vector, collection_ids, n) if mode in ("hybrid", "vector") else []
    by_text = fulltext.search(question, collection_ids, n) if mode in ("hybrid", "text") else []
    similarity = dict(by_vector)
    floor = settings.KNOWLEDGE_MIN_SCORE
    vector_ranking = [chunk for chunk, score in by_vector if score >= floor]
    text_ranking = [chunk for chunk, _ in by_text]
    fused = fuse([vector_ranking, text_ranking], settings.KNOWLEDGE_RRF_K)
    best = sorted(fused, key=lambda chunk: (-fused[chunk], chunk))[:top_k]
    rows = {
        chunk.pk: chunk
        for chunk in Chunk.objects.filter(pk__in=best)
        .select_related("document")
        .only("id", "document_id", "collection_id", "position", "page", "text", "tokens", "document__name")
    }
    return [
        Passage(
            chunk_id=pk,
            document_id=rows[pk].document_id,
            document=rows[pk].document.name,
            collection_id=rows[pk].collection_id,
            position=rows[pk].position,
            page=rows[pk].page,
            text=rows[pk].text,
            tokens=rows[pk].tokens,
            score=fused[pk],
            similarity=similarity.get(pk),
        )
        for pk in best
        if pk in rows
    ]


async def question_passages(question: str, collection_ids: Sequence[int]) -> list[Passage]:
    """The best passages for a question asked in a chat or through the API: embedded at query priority,
    then searched (hybrid). EngineError while the embedding engine does not answer."""
    vector = (await embedding_client().aembed([question], priority="query"))[0]
    return await database_sync_to_async(passages)(
        question=question, query_vector=vector, collection_ids=collection_ids
    )
