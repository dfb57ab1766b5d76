"""A collection's indexing run in one worker: claim its documents, KNOWLEDGE_INDEX_DOCUMENTS at a time
(their requests meet in the embedding engine's forward passes), read each in the bounded child process,
cut it into passages, embed them and their windows in batches and store them. A text the document repeats
(a sentence in the overlap of two passages, a line on every page) is embedded once.

It runs below chat: while chat answers stream (answers.admission's count, across web processes)
requests shrink to KNOWLEDGE_EMBED_BATCH_WHILE_CHAT texts, so the embedding engine never holds the
host's cores for long while a reader waits for tokens; at 0 (the default without a GPU) indexing waits
for chat to end, holding its document's lease, and past the run's deadline gives the document back. A run
stops claiming at its deadline and returns "continue" so the task queues the rest, as bulk jobs do.
"""

import asyncio
import logging
import time
import uuid

import numpy as np
from channels.db import database_sync_to_async
from django.conf import settings

import redisconn
from answers.admission import active_count
from documents.reader import document_text
from documents.text import DocumentError
from inference.client import EngineError
from inference.engine import embedding_client
from knowledge import chunking, claims
from knowledge.models import Document
from knowledge.vectors import DTYPE
from redisconn import keys

log = logging.getLogger(__name__)

# One run a collection: a duplicate task (a redelivery, the sweep) leaves while the holder lives;
# a dead holder's key expires after this long and the sweep queues the collection again.
LOCK_SECONDS = 30
# How often a run waiting for chat to end asks whether it has.
CHAT_POLL_SECONDS = 0.25


class IndexerLock:
    def __init__(self, r, collection_id: int) -> None:
        self._redis = r
        self._key = keys.knowledge_indexer(collection_id)
        self._token = uuid.uuid4().hex

    async def acquire(self) -> bool:
        return bool(await self._redis.set(self._key, self._token, nx=True, ex=LOCK_SECONDS))

    async def refresh(self) -> bool:
        if await self._redis.get(self._key) != self._token.encode():
            return False
        await self._redis.expire(self._key, LOCK_SECONDS)
        return True

    async def keep(self) -> None:
        """Refresh the lock every third of its life while the run goes on, so one slow step (a long
        read, an embedding batch on a loaded host) does not lose it; a paused process still does."""
        while True:
            await asyncio.sleep(LOCK_SECONDS / 3)
            try:
                if not await self.refresh():
                    return
            except Exception:  # noqa: BLE001 - Redis away: the run's own checks decide
                log.warning("the indexing lock could not be refreshed", exc_info=True)

    async def release(self) -> None:
        if await self._redis.get(self._key) == self._token.encode():
            await self._redis.delete(self._key)


async def _batch_size(r) -> int:
    try:
        busy = await active_count(r) > 0
    except Exception:  # Redis away: be gentle, not stuck
        return max(settings.KNOWLEDGE_EMBED_BATCH_WHILE_CHAT, 1)
    return settings.KNOWLEDGE_EMBED_BATCH_WHILE_CHAT if busy else settings.KNOWLEDGE_EMBED_BATCH


# What a request holds once indexing has waited KNOWLEDGE_CHAT_WAIT_SECONDS for chat to end: a site whose
# chat never rests still indexes, a few texts at a time.
STARVED_BATCH = 8


async def _request_size(r, document: Document, worker: str, deadline: float) -> int:
    """Texts the next request may hold; where that is 0 while chat streams, wait for chat to end, the
    document's lease renewed meanwhile, for KNOWLEDGE_CHAT_WAIT_SECONDS at most (then STARVED_BATCH).
    0: the run's deadline came first, or the lease was lost."""
    renewed = began = time.monotonic()
    while not (size := await _batch_size(r)):
        if time.monotonic() >= deadline:
            return 0
        if time.monotonic() - began >= settings.KNOWLEDGE_CHAT_WAIT_SECONDS:
            return STARVED_BATCH
        if time.monotonic() - renewed >= settings.KNOWLEDGE_LEASE_SECONDS / 3:
            if not await database_sync_to_async(claims.document_renew)(
                document_id=document.pk, worker=worker
            ):
                return 0
            renewed = time.monotonic()
        await asyncio.sleep(CHAT_POLL_SECONDS)
    return size


class Embedded:
    """A document's texts already embedded, by text, the most recent KEEP: a sentence in the overlap
    of two passages, or a line each page repeats, is embedded once."""

    KEEP = 4096

    def __init__(self) -> None:
        self._vectors: dict[str, np.ndarray] = {}

    def __contains__(self, text: str) -> bool:
        return text in self._vectors

    def __getitem__(self, text: str) -> np.ndarray:
        return self._vectors[text]

    def add(self, texts: list[str], vectors: list) -> None:
        for text, vector in zip(texts, vectors, strict=True):
            self._vectors[text] = np.asarray(vector, dtype=DTYPE)

    def rows(self, batch: list) -> list:
        """[(piece, its vector, its windows' vectors)] of a batch whose texts are all here; then the
        oldest texts past KEEP are forgotten."""
        rows = [(piece, self[piece.text], [self[text] for text in windows]) for piece, windows in batch]
        while len(self._vectors) > self.KEEP:
            del self._vectors[next(iter(self._vectors))]
        return rows


def _new_texts(batch: list, known: Embedded) -> list[str]:
    """The texts of `batch` [(piece, windows)] not embedded yet, each once, in order."""
    texts = (text for piece, windows in batch for text in (piece.text, *windows))
    return [text for text in dict.fromkeys(texts) if text not in known]


def _batch(todo: list, size: int, known: Embedded) -> tuple[list, list]:
    """The first pieces of `todo` [(piece, windows)] whose texts not yet embedded, windows included,
    are at most `size` (at least one piece), and the rest."""
    texts: set[str] = set()
    taken = 0
    for piece, windows in todo:
        new = {text for text in (piece.text, *windows) if text not in known} - texts
        if taken and len(texts) + len(new) > size:
            break
        texts |= new
        taken += 1
    return todo[:taken], todo[taken:]


async def _text(document: Document) -> str:
    if document.text:
        return document.text
    return await document_text(bytes(document.source), document.format, page_breaks=True)


async def index_document(
    document: Document, *, worker: str, embedder, r, lock: IndexerLock, deadline: float = float("inf")
) -> bool:
    """Read, chunk, embed and store one held document; it ends ready, failed or given back. False: given
    back at `deadline` while chat streamed (KNOWLEDGE_EMBED_BATCH_WHILE_CHAT=0), for a later run."""
    try:
        text = await _text(document)
    except DocumentError as exc:
        await database_sync_to_async(claims.document_fail)(
            document_id=document.pk, worker=worker, error=str(exc), final=True
        )
        return True
    if not document.text and not await database_sync_to_async(claims.document_text_store)(
        document_id=document.pk, worker=worker, text=text
    ):
        return True
    pieces = await asyncio.to_thread(chunking.pieces, text)
    chunker = chunking.chunker_id()
    stored = await database_sync_to_async(claims.document_chunker_set)(
        document_id=document.pk,
        worker=worker,
        chunker=chunker,
        total=len(pieces),
        tokens=sum(p.tokens for p in pieces),
    )
    todo = await asyncio.to_thread(
        lambda: [(piece, chunking.windows(piece.text)) for piece in pieces if piece.position not in stored]
    )
    known = Embedded()
    while todo:
        if not await lock.refresh():
            # The run lost its lock (paused past it): another run goes on with this document.
            await database_sync_to_async(claims.document_release)(document_id=document.pk, worker=worker)
            return True
        batch, todo = _batch(todo, settings.KNOWLEDGE_EMBED_BATCH, known)
        # Longest first, so each request (and each forward pass) holds texts of about one length:
        # a passage's sentences are not padded to the length of the passage.
        texts = sorted(_new_texts(batch, known), key=len, reverse=True)
        try:
            while texts:
                if not (size := await _request_size(r, document, worker, deadline)):
                    await database_sync_to_async(claims.document_release)(
                        document_id=document.pk, worker=worker
                    )
                    return False
                known.add(texts[:size], await embedder.aembed(texts[:size], priority="bulk"))
                texts = texts[size:]
                # A batch in small requests on a loaded host can outlast the lease it was claimed with.
                if texts and not await database_sync_to_async(claims.document_renew)(
                    document_id=document.pk, worker=worker
                ):
                    return True  # another worker holds it now
        except EngineError as exc:
            log.warning("document %s: embedding engine unavailable (%s); given back", document.pk, exc)
            await database_sync_to_async(claims.document_release)(document_id=document.pk, worker=worker)
            raise
        if not await database_sync_to_async(claims.chunks_store)(
            document_id=document.pk,
            collection_id=document.collection_id,
            worker=worker,
            chunker=chunker,
            rows=known.rows(batch),
        ):
            return True  # another worker holds it now
    await database_sync_to_async(claims.document_finish)(document_id=document.pk, worker=worker)
    return True


async def index_collection(*, collection_id: int, worker: str, seconds: float) -> str:
    """Index the collection's waiting documents until none is left ("done") or `seconds` pass
    ("continue"); "engine_unavailable" when the embedding engine is away; "running" when another
    run holds the collection."""
    deadline = time.monotonic() + seconds
    embedder = embedding_client()
    r = redisconn.new_client()
    lock = IndexerLock(r, collection_id)
    keeping = None
    try:
        if not await lock.acquire():
            return "running"
        keeping = asyncio.create_task(lock.keep())

        async def lane() -> str:
            """Documents one after another, KNOWLEDGE_INDEX_DOCUMENTS lanes at once, each its own claim."""
            while time.monotonic() < deadline:
                if not await lock.refresh():
                    return "running"
                document = await database_sync_to_async(claims.document_claim)(
                    collection_id=collection_id, worker=worker
                )
                if document is None:
                    return "done"
                try:
                    if not await index_document(
                        document, worker=worker, embedder=embedder, r=r, lock=lock, deadline=deadline
                    ):
                        return "continue"
                except EngineError:
                    return "engine_unavailable"
            return "continue"

        # A lane that fails stops the others before the lock is let go.
        async with asyncio.TaskGroup() as lanes:
            running = [lanes.create_task(lane()) for _ in range(settings.KNOWLEDGE_INDEX_DOCUMENTS)]
        ended = [task.result() for task in running]
        # The run's outcome is its most pressing lane's.
        return next(o for o in ("engine_unavailable", "running", "continue", "done") if o in ended)
    finally:
        if keeping is not None:
            keeping.cancel()
        try:
            await lock.release()
        finally:
            await r.aclose()
