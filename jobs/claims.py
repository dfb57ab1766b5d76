"""A runner's hold on the documents of a job: claim one, store its text and summary, fail or
release it; a job's start and end as its runner sees them; a restarted worker's recovery.

Every state change of a document is conditional on the state it expects, so a stale
worker (a redelivered task, a preempted request) cannot undo another's work; results are
written once under the unique (job, document) key. The job runner and the tasks call these.
"""

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from jobs.models import Document, Job, Result
from jobs.summarize import Summary
from usage.models import UsageDay
from usage.services import usage_record


@dataclass(frozen=True)
class Claim:
    """A document a runner holds: what it needs to summarize it, nothing ORM-bound."""

    document_id: int
    external_id: str
    text: str
    # An HTML or PDF file's bytes until its text is read (documents.reader), and their format.
    source: bytes | None
    format: str
    attempt: int


@transaction.atomic
def job_mark_running(*, job_id: int) -> None:
    now = timezone.now()
    Job.objects.filter(pk=job_id, status=Job.Status.QUEUED, started_at=None).update(started_at=now)
    Job.objects.filter(pk=job_id, status=Job.Status.QUEUED).update(status=Job.Status.RUNNING)


@transaction.atomic
def job_finish(*, job_id: int) -> str | None:
    """End a job whose documents have all finished: completed, partial or failed. None if not yet."""
    job = Job.objects.select_for_update().filter(pk=job_id).first()
    if job is None or job.status not in Job.ACTIVE:
        return None
    documents = job.documents
    if documents.filter(status__in=[Document.Status.PENDING, Document.Status.RUNNING]).exists():
        return None
    done = documents.filter(status=Document.Status.DONE).count()
    failed = documents.exclude(status=Document.Status.DONE).count()
    if not failed:
        job.status = Job.Status.COMPLETED
    elif done:
        job.status = Job.Status.PARTIAL
    else:
        job.status = Job.Status.FAILED
    job.finished_at = timezone.now()
    job.save(update_fields=["status", "finished_at"])
    return job.status


@transaction.atomic
def document_claim(*, job_id: int, worker: str) -> Claim | None:
    """Take the next runnable document of an active job under a lease, counting an attempt.

    A document whose attempts are used up is marked failed with its last error instead."""
    now = timezone.now()
    while True:
        document = (
            Document.objects.select_for_update(skip_locked=True)
            .filter(job_id=job_id, job__status__in=Job.ACTIVE)
            .filter(
                Q(status=Document.Status.PENDING, available_at__isnull=True)
                | Q(status=Document.Status.PENDING, available_at__lte=now)
                | Q(status=Document.Status.RUNNING, lease_until__lt=now)
            )
            .order_by("id")
            .first()
        )
        if document is None:
            return None
        if document.attempts >= settings.BULK_MAX_ATTEMPTS:
            document.status = Document.Status.FAILED
            document.error = document.error or "The worker stopped while summarizing it, too many times."
            document.error = f"Failed after {document.attempts} attempts. {document.error}"
            document.finished_at = now
            document.claimed_by = ""
            document.lease_until = None
            document.save(update_fields=["status", "error", "finished_at", "claimed_by", "lease_until"])
            continue
        document.status = Document.Status.RUNNING
        document.attempts += 1
        document.claimed_by = worker
        document.lease_until = now + timedelta(seconds=settings.BULK_TASK_TIME_LIMIT)
        document.save(update_fields=["status", "attempts", "claimed_by", "lease_until"])
        source = bytes(document.source) if document.source is not None else None
        return Claim(
            document.pk, document.external_id, document.text, source, document.format, document.attempts
        )


def document_set_text(*, document_id: int, text: str) -> None:
    """Keep a PDF's extracted text, so a retry does not parse it again."""
    Document.objects.filter(pk=document_id).update(text=text, source=None)


@transaction.atomic
def document_complete(*, document_id: int, summary: Summary, duration_ms: float) -> bool:
    """Store the document's one result; False when it already had one (a duplicate delivery)."""
    document = Document.objects.select_for_update().get(pk=document_id)
    try:
        with transaction.atomic():
            Result.objects.create(
                job_id=document.job_id,
                document=document,
                summary=summary.text,
                finish_reason=summary.finish_reason,
                engine_calls=summary.engine_calls,
                chunks=summary.chunks,
                document_tokens=summary.document_tokens,
                prompt_tokens=summary.prompt_tokens,
                cached_tokens=summary.cached_tokens,
                completion_tokens=summary.completion_tokens,
                duration_ms=duration_ms,
                body=summary.body,
            )
    except IntegrityError:
        created = False
    else:
        created = True
        usage_record(
            user_id=Job.objects.values_list("owner_id", flat=True).get(pk=document.job_id),
            source=UsageDay.Source.BULK,
            prompt_tokens=summary.prompt_tokens,
            cached_tokens=summary.cached_tokens,
            completion_tokens=summary.completion_tokens,
            requests=summary.engine_calls,
        )
    document.status = Document.Status.DONE
    document.error = ""
    document.claimed_by = ""
    document.lease_until = None
    document.finished_at = timezone.now()
    document.save(update_fields=["status", "error", "claimed_by", "lease_until", "finished_at"])
    return created


def document_fail(*, document_id: int, worker: str, error: str, retryable: bool, code: str = "") -> None:
    """Record a failed attempt: try again later while attempts remain, else mark it failed (with
    the error table's `code`, where the failure has one)."""
    now = timezone.now()
    running = Document.objects.filter(pk=document_id, status=Document.Status.RUNNING, claimed_by=worker)
    if retryable:
        delay = timedelta(seconds=settings.BULK_RETRY_DELAY)
        running.filter(attempts__lt=settings.BULK_MAX_ATTEMPTS).update(
            status=Document.Status.PENDING,
            error=error,
            claimed_by="",
            lease_until=None,
            available_at=now + delay,
        )
        error = f"Failed after {settings.BULK_MAX_ATTEMPTS} attempts. {error}"
    running.update(
        status=Document.Status.FAILED,
        error=error,
        error_code=code,
        claimed_by="",
        lease_until=None,
        finished_at=now,
    )


def document_release(*, document_id: int, worker: str) -> None:
    """Give a document back without using up an attempt (preempted, or the job was cancelled)."""
    Document.objects.filter(
        pk=document_id, status=Document.Status.RUNNING, claimed_by=worker, attempts__gt=0
    ).update(status=Document.Status.PENDING, attempts=F("attempts") - 1, claimed_by="", lease_until=None)


def worker_recover(*, hostname: str, boot: str) -> list[int]:
    """A worker restarted: what its previous life held goes back to pending; the active jobs to resume."""
    Document.objects.filter(status=Document.Status.RUNNING, claimed_by__startswith=f"{hostname}/").exclude(
        claimed_by=f"{hostname}/{boot}"
    ).update(status=Document.Status.PENDING, claimed_by="", lease_until=None)
    return list(Job.objects.filter(status__in=Job.ACTIVE).values_list("pk", flat=True))
