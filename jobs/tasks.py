"""Celery tasks. They take ids, run inside soft and hard time limits set below the
broker's visibility timeout, and call the runner and services only.

Delivery is at least once (acks_late, reject_on_worker_lost): a task may run again
after a crash. That is safe because documents are claimed under leases and each
result is written once. When a worker starts, what its previous life held is put
back and every active job resumes, so a killed worker does not wait out the
visibility timeout.
"""

import asyncio
import logging
import uuid

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_init, worker_ready
from django.conf import settings

import bulkqueue
from jobs import claims, runner

log = logging.getLogger(__name__)

BULK_QUEUE = bulkqueue.QUEUE

# Set in the worker's main process before the pool forks, so every child of one
# worker start shares it; a restarted worker gets a new one.
_boot = {"id": uuid.uuid4().hex[:12], "hostname": ""}


def worker_id(hostname: str) -> str:
    return f"{hostname}/{_boot['id']}"


@worker_init.connect
def _on_worker_init(sender=None, **kwargs) -> None:
    _boot["id"] = uuid.uuid4().hex[:12]
    _boot["hostname"] = getattr(sender, "hostname", "") or ""


@worker_ready.connect
def _on_worker_ready(sender=None, **kwargs) -> None:
    consumer = getattr(sender, "task_consumer", None)
    if consumer is not None and not consumer.consuming_from(BULK_QUEUE):
        return  # a worker for other queues never held a document
    hostname = getattr(sender, "hostname", None) or _boot["hostname"]
    jobs_recover.delay(hostname, _boot["id"])


# The database or Redis briefly away: the whole run is tried again later; nothing is lost meanwhile.
@shared_task(bind=True, **bulkqueue.LONG_TASK_OPTIONS)
def job_run(self, job_id: int) -> str:
    """Work on a job for up to BULK_TASK_SLICE_SECONDS, then queue the rest."""
    hostname = self.request.hostname or "local"
    try:
        outcome = asyncio.run(
            runner.run_job(
                job_id=job_id, worker=worker_id(hostname), seconds=settings.BULK_TASK_SLICE_SECONDS
            )
        )
    except SoftTimeLimitExceeded:
        # asyncio.run cancelled the runner's requests, which gave their documents back.
        log.warning("job %s: soft time limit reached; queueing the rest", job_id)
        outcome = "continue"
    if outcome == "continue":
        job_run.delay(job_id)
    return outcome


@shared_task(**bulkqueue.SHORT_TASK_OPTIONS)
def jobs_recover(hostname: str, boot: str) -> list[int]:
    """Release what a previous life of this worker held and resume every active job."""
    job_ids = claims.worker_recover(hostname=hostname, boot=boot)
    for job_id in job_ids:
        job_run.delay(job_id)
    if job_ids:
        log.info("worker %s started: resuming jobs %s", hostname, job_ids)
    return job_ids
