"""A worker's hold on a document while it is read, chunked and embedded.

Every change is conditional on the worker still holding the document (its name in `claimed_by`), so a
worker that lost its lease (killed, paused past it) cannot undo the one that took over; chunks are
written once under the unique (document, position) key, each with its windows in the same transaction, and
a run skips the positions already stored, so an interrupted document is finished, not embedded again.
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from knowledge.models import Chunk, Document, Window
from knowledge.vectors import index_vectors, to_bytes


def _lease() -> timedelta:
    return timedelta(seconds=settings.KNOWLEDGE_LEASE_SECONDS)


def _claimable(now) -> Q:
    return Q(status=Document.Status.PENDING) | Q(status=Document.Status.READING, lease_until__lt=now)


def document_claim(*, collection_id: int, worker: str) -> Document | None:
    """The next document of the collection no live worker holds, now held by `worker`."""
    now = timezone.now()
    for candidate in (
        Document.objects.filter(_claimable(now), collection_id=collection_id)
        .order_by("id")
        .values_list("pk", flat=True)[:8]
    ):
        taken = Document.objects.filter(_claimable(now), pk=candidate).update(
            status=Document.Status.READING,
            claimed_by=worker,
            lease_until=now + _lease(),
            attempts=F("attempts") + 1,
        )
        if taken:
            return Document.objects.get(pk=candidate)
    return None


def _held(document_id: int, worker: str):
    return Document.objects.filter(pk=document_id, claimed_by=worker, status=Document.Status.READING)


def document_renew(*, document_id: int, worker: str) -> bool:
    """Extend the lease; False when the worker no longer holds the document."""
    return bool(_held(document_id, worker).update(lease_until=timezone.now() + _lease()))


def document_text_store(*, document_id: int, worker: str, text: str) -> bool:
    """The document's text as read; its bytes are dropped (the text is what re-indexing reads)."""
    return bool(_held(document_id, worker).update(text=text, source=None))


def document_chunker_set(*, document_id: int, worker: str, chunker: str, total: int, tokens: int) -> set[int]:
    """Start (or go on with) the chunks made by `chunker`: those of another chunker are deleted.
    Returns the positions already stored."""
    with transaction.atomic():
        document = _held(document_id, worker).select_for_update().first()
        if document is None:
            return set()
        if document.chunker != chunker:
            Chunk.objects.filter(document_id=document_id).delete()
        stored = set(Chunk.objects.filter(document_id=document_id).values_list("position", flat=True))
        Document.objects.filter(pk=document_id).update(
            chunker=chunker, chunks_total=total, chunks_done=len(stored), tokens=tokens
        )
        return stored


def chunks_store(*, document_id: int, collection_id: int, worker: str, chunker: str, rows: list) -> bool:
    """Write embedded pieces [(piece, vector, its windows' vectors)] once each; False when the worker
    lost the document."""
    with transaction.atomic():
        if not _held(document_id, worker).select_for_update().exists():
            return False
        Chunk.objects.bulk_create(
            [
                Chunk(
                    document_id=document_id,
                    collection_id=collection_id,
                    position=piece.position,
                    text=piece.text,
                    page=piece.page,
                    start=piece.start,
                    tokens=piece.tokens,
                    chunker=chunker,
                    embedding=to_bytes(vector),
                )
                for piece, vector, _ in rows
            ],
            ignore_conflicts=True,
        )
        index_vectors([(document_id, piece.position, vector) for piece, vector, _ in rows])
        windows_store(document_id=document_id, collection_id=collection_id, rows=rows)
        done = Chunk.objects.filter(document_id=document_id).count()
        Document.objects.filter(pk=document_id).update(
            chunks_done=done, lease_until=timezone.now() + _lease()
        )
    return True


def windows_store(*, document_id: int, collection_id: int, rows: list) -> None:
    """Write the windows' vectors of stored pieces [(piece, vector, its windows' vectors)]."""
    chunk_ids = dict(
        Chunk.objects.filter(document_id=document_id, position__in=[piece.position for piece, _, _ in rows])
        .values_list("position", "id")
    )  # fmt: skip
    found = [
        (chunk_ids[piece.position], position, vector)
        for piece, _, windows in rows
        for position, vector in enumerate(windows)
    ]
    Window.objects.bulk_create(
        [
            Window(chunk_id=chunk, collection_id=collection_id, position=position, embedding=to_bytes(vector))
            for chunk, position, vector in found
        ],
        ignore_conflicts=True,
    )
    index_vectors(found, windows=True)


def document_finish(*, document_id: int, worker: str) -> bool:
    return bool(
        _held(document_id, worker).update(
            status=Document.Status.READY,
            claimed_by="",
            lease_until=None,
            error="",
            finished_at=timezone.now(),
        )
    )


def document_fail(*, document_id: int, worker: str, error: str, final: bool) -> bool:
    """A failed attempt: the document waits for another unless this was its last or the failure is
    its own (`final`: unreadable, empty, too large)."""
    held = _held(document_id, worker)
    document = held.first()
    if document is None:
        return False
    last = final or document.attempts >= settings.KNOWLEDGE_MAX_ATTEMPTS
    return bool(
        held.update(
            status=Document.Status.FAILED if last else Document.Status.PENDING,
            claimed_by="",
            lease_until=None,
            error=error[:2000],
            finished_at=timezone.now() if last else None,
        )
    )


def document_release(*, document_id: int, worker: str) -> bool:
    """Give the document back without spending an attempt (the embedding engine is away)."""
    return bool(
        _held(document_id, worker).update(
            status=Document.Status.PENDING, claimed_by="", lease_until=None, attempts=F("attempts") - 1
        )
    )


def documents_rechunk(chunker: str) -> int:
    """Ready documents chunked by another chunker (the chunk, window or embedding settings changed) wait to
    be indexed again; their passages stay searchable until the new chunker's replace them. How many."""
    ready = Document.objects.filter(status=Document.Status.READY).exclude(chunker=chunker)
    return ready.update(status=Document.Status.PENDING)


def collections_waiting() -> list[int]:
    """Collections with documents no live worker holds: what the sweep queues again."""
    now = timezone.now()
    return sorted(set(Document.objects.filter(_claimable(now)).values_list("collection_id", flat=True)))
