"""Changes to jobs: check, create, start, cancel, retry. The admin, the API and the command
call these; what a runner does to a job's documents is in jobs.claims.

Tasks are enqueued on commit, never before, so a worker never looks for a row that
is not there yet.
"""

from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from documents.uploads import DocumentInput
from jobs.claims import job_finish
from jobs.models import Document, Job
from jobs.summarize import PRESETS

# Documents are written in batches of about this much text (or this many documents).
STORE_BATCH_BYTES = 2 * 1024 * 1024
STORE_BATCH_DOCUMENTS = 200


class InvalidJob(Exception):
    """The job's parameters are refused; the message says why."""


def _enqueue(job_id: int) -> None:
    from jobs.tasks import job_run

    transaction.on_commit(lambda: job_run.delay(job_id))


def job_check(
    *, owner: AbstractBaseUser, preset: str, instruction: str, max_summary_tokens: int | None
) -> tuple[str, int]:
    """Authorize and validate; return the instruction to send and the summary length."""
    if not (owner.is_active and owner.is_staff):
        raise PermissionDenied("Only staff can submit jobs.")
    if preset not in Job.Preset.values:
        raise InvalidJob(f"preset must be one of {Job.Preset.values}.")
    instruction = instruction.strip()
    if preset == Job.Preset.CUSTOM:
        if not instruction:
            raise InvalidJob("A custom preset needs an instruction.")
        if len(instruction) > 4000:
            raise InvalidJob("The instruction is longer than 4000 characters.")
    else:
        instruction = PRESETS[preset]
    tokens = settings.BULK_SUMMARY_TOKENS if max_summary_tokens is None else max_summary_tokens
    if not 16 <= tokens <= settings.BULK_MAX_SUMMARY_TOKENS:
        raise InvalidJob(f"max_summary_tokens must be between 16 and {settings.BULK_MAX_SUMMARY_TOKENS}.")
    return instruction, tokens


@transaction.atomic
def job_create(
    *,
    owner: AbstractBaseUser,
    documents: Iterable[DocumentInput],
    name: str = "",
    preset: str = Job.Preset.PARAGRAPH,
    instruction: str = "",
    max_summary_tokens: int | None = None,
    start: bool = True,
) -> Job:
    """Store a job and its documents; documents refused at upload are stored failed with their error.

    `documents` are stored as they come, a batch of at most STORE_BATCH_BYTES at a time, so an
    upload read lazily (ingest.documents_from_files) is never in memory whole; whatever it raises
    midway (UploadRejected) rolls the whole job back."""
    instruction, tokens = job_check(
        owner=owner, preset=preset, instruction=instruction, max_summary_tokens=max_summary_tokens
    )
    now = timezone.now()
    job = Job.objects.create(
        owner=owner, name=name[:200], preset=preset, instruction=instruction, max_summary_tokens=tokens
    )
    batch: list[Document] = []
    size = stored = 0
    for d in documents:
        batch.append(
            Document(
                job=job,
                external_id=d.external_id[:500],
                format=d.format,
                text=d.text,
                source=d.source,
                status=Document.Status.FAILED if d.error else Document.Status.PENDING,
                error=d.error,
                finished_at=now if d.error else None,
            )
        )
        size += len(d.text) + len(d.source or b"")
        if size >= STORE_BATCH_BYTES or len(batch) >= STORE_BATCH_DOCUMENTS:
            stored += len(Document.objects.bulk_create(batch))
            batch, size = [], 0
    stored += len(Document.objects.bulk_create(batch))
    if not stored:
        raise InvalidJob("The job has no documents.")
    if start:
        job = job_start(job=job)
    return job


@transaction.atomic
def job_start(*, job: Job) -> Job:
    """Queue a draft or cancelled job; its cancelled documents run again, finished ones are kept."""
    job = Job.objects.select_for_update().get(pk=job.pk)
    # Another kind's job starts once, from its draft: its kind's code reports how it ended (jobs.kinds).
    if job.status in Job.ACTIVE or (job.kind != Job.SUMMARY and job.status != Job.Status.DRAFT):
        return job
    job.documents.filter(status=Document.Status.CANCELLED).update(status=Document.Status.PENDING)
    job.status = Job.Status.QUEUED
    job.finished_at = None
    job.save(update_fields=["status", "finished_at"])
    if job_finish(job_id=job.pk) is None:
        _enqueue(job.pk)
    job.refresh_from_db()
    return job


@transaction.atomic
def job_cancel(*, job: Job) -> Job:
    """Stop a job: documents not finished are cancelled, runners abort their engine requests."""
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.status not in (*Job.ACTIVE, Job.Status.DRAFT):
        return job
    unfinished = job.documents.filter(status__in=[Document.Status.PENDING, Document.Status.RUNNING])
    # Locked in id order, as a runner recording its documents locks them (jobs.claims): two
    # transactions that take the same rows in different orders deadlock.
    ids = list(unfinished.select_for_update().order_by("pk").values_list("pk", flat=True))
    unfinished.filter(pk__in=ids).update(status=Document.Status.CANCELLED, claimed_by="", lease_until=None)
    job.status = Job.Status.CANCELLED
    job.finished_at = timezone.now()
    job.save(update_fields=["status", "finished_at"])
    return job


@transaction.atomic
def job_retry_failed(*, job: Job) -> int:
    """Run the failed documents again with fresh attempts; those refused at upload stay failed."""
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.kind != Job.SUMMARY:
        return 0
    retried = (
        job.documents.filter(status=Document.Status.FAILED)
        .filter(~Q(text="") | Q(source__isnull=False))
        .update(status=Document.Status.PENDING, attempts=0, error="", available_at=None, finished_at=None)
    )
    if retried and job.status not in Job.ACTIVE:
        job.status = Job.Status.QUEUED
        job.finished_at = None
        job.save(update_fields=["status", "finished_at"])
        _enqueue(job.pk)
    return retried
