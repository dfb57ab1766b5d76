"""Celery tasks on the bulk queue: index a collection, and the sweep that queues what a lost task left.

Their Celery options are every bulk task's (bulkqueue). Delivery is at least once (acks_late): a task run
twice is safe because documents are claimed under leases and chunks are written once (knowledge.claims). A
killed worker's documents wait out their lease (KNOWLEDGE_LEASE_SECONDS); a task lost with Redis is queued
again by the sweep, which beat runs every KNOWLEDGE_SWEEP_SECONDS. The sweep also sends back to indexing the
documents a changed chunker would cut otherwise (knowledge.chunking.chunker_id).
"""

import asyncio
import logging
import socket
import uuid

from celery import shared_task

import bulkqueue
from knowledge import chunking, claims, indexing

log = logging.getLogger(__name__)

# Indexing runs in slices like bulk jobs, so each task stays well inside its time limits.
SLICE_SECONDS = 120
# The embedding engine away: try again after this long.
ENGINE_RETRY_SECONDS = 15


@shared_task(bind=True, **bulkqueue.LONG_TASK_OPTIONS)
def collection_index(self, collection_id: int) -> str:
    """Index the collection's waiting documents for up to SLICE_SECONDS, then queue the rest."""
    worker = f"{self.request.hostname or socket.gethostname()}/{uuid.uuid4().hex[:8]}"
    outcome = asyncio.run(
        indexing.index_collection(collection_id=collection_id, worker=worker, seconds=SLICE_SECONDS)
    )
    if outcome == "continue":
        collection_index.delay(collection_id)
    elif outcome == "engine_unavailable":
        collection_index.apply_async((collection_id,), countdown=ENGINE_RETRY_SECONDS)
    return outcome


@shared_task(**bulkqueue.SHORT_TASK_OPTIONS)
def knowledge_sweep() -> list[int]:
    """Queue every collection with documents no live worker holds, a new chunker's re-indexing included."""
    if again := claims.documents_rechunk(chunking.chunker_id()):
        log.info("%d documents to index again with chunker %s", again, chunking.chunker_id())
    waiting = claims.collections_waiting()
    for collection_id in waiting:
        collection_index.delay(collection_id)
    return waiting
