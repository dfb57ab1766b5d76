"""Celery tasks of the Batch API, on the bulk queue (CELERY_TASK_ROUTES): a batch's input file read,
its files written once its job's runner has stopped, and the periodic sweep. They take ids and
act once however often they are delivered (batches.services)."""

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError
from redis.exceptions import RedisError

from batches import services
from batches.models import Batch


@shared_task(
    acks_late=True,
    autoretry_for=(DatabaseError,),
    retry_backoff=True,
    max_retries=10,
    soft_time_limit=settings.BULK_TASK_SOFT_TIME_LIMIT,
    time_limit=settings.BULK_TASK_TIME_LIMIT,
)
def batch_validate(batch_pk: int) -> None:
    services.batch_validate(batch_pk=batch_pk)


@shared_task(
    bind=True,
    acks_late=True,
    autoretry_for=(DatabaseError, RedisError),
    retry_backoff=True,
    max_retries=10,
    soft_time_limit=settings.BULK_TASK_SOFT_TIME_LIMIT,
    time_limit=settings.BULK_TASK_TIME_LIMIT,
)
def batch_finalize_when_stopped(self, batch_pk: int) -> None:
    """Finalize a cancelled batch once no runner holds its job: a line answered meanwhile is kept."""
    job_id = Batch.objects.filter(pk=batch_pk).values_list("job_id", flat=True).first()
    if job_id is None:  # deleted meanwhile: nothing is left to write
        return
    if services.runner_holds(job_id):
        raise self.retry(countdown=1, max_retries=120)
    services.batch_finalize(job_id)


@shared_task(acks_late=True, soft_time_limit=240, time_limit=280)
def batches_sweep() -> None:
    services.batches_sweep()
