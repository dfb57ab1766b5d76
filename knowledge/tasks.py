"""Celery tasks on the bulk queue: index a collection, and the sweep that queues what a lost task left.

Delivery is at least once (acks_late): a task run twice is safe because documents are claimed under
leases and chunks are written once (knowledge.claims). A killed worker's documents wait out their
lease (KNOWLEDGE_LEASE_SECONDS); a task lost with Redis is queued again by the sweep, which beat runs
every KNOWLEDGE_SWEEP_SECONDS.
"""

import asyncio
import logging
import socket
import uuid

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError
from redis.exceptions import RedisError

from knowledge import claims, indexing

log = logging.getLogger(__name__)

# Indexing runs in slices like bulk jobs, so each task stays well inside its time limits.
SLICE_SECONDS = 120
# The embedding engine away: try again after this long.
ENGINE_RETRY_SECONDS = 15


@shared_task(
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(DatabaseError, RedisError),
    retry_backoff=True,
    max_retries=10,
    soft_time_limit=settings.BULK_TASK_SOFT_TIME_LIMIT,
    time_limit=settings.BULK_TASK_TIME_LIMIT,
)
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


@shared_task(acks_late=True, soft_time_limit=60, time_limit=90)
def knowledge_sweep() -> list[int]:
    """Queue every collection with documents no live worker holds."""
    waiting = claims.collections_waiting()
    for collection_id in waiting:
        collection_index.delay(collection_id)
    return waiting
