"""A runner's hold on the documents of a job: claim a group of them, store a PDF's text, record
what each came to (its summary, a failed attempt, or given back), a group in one transaction; a
job's start and end as its runner sees them; a restarted worker's recovery.

Every state change of a document is conditional on the state it expects, so a stale
worker (a redelivered task, a preempted request) cannot undo another's work; results are
written once under the unique (job, document) key. The job runner and the tasks call these.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
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
def documents_claim(*, job_id: int, worker: str, count: int) -> list[Claim]:
    """Take up to `count` runnable documents of an active job under a lease, counting an attempt
    of each, in one transaction.

    A document whose attempts are used up is marked failed with its last error instead."""
    now = timezone.now()
    taken: list[Claim] = []
    while len(taken) < count:
        documents = list(
            Document.objects.select_for_update(skip_locked=True)
            .filter(job_id=job_id, job__status__in=Job.ACTIVE)
            .filter(
                Q(status=Document.Status.PENDING, available_at__isnull=True)
                | Q(status=Document.Status.PENDING, available_at__lte=now)
                | Q(status=Document.Status.RUNNING, lease_until__lt=now)
            )
            .order_by("id")[: count - len(taken)]
        )
        if not documents:
            break
        spent = [d for d in documents if d.attempts >= settings.BULK_MAX_ATTEMPTS]
        for document in spent:
            document.status = Document.Status.FAILED
            document.error = document.error or "The worker stopped while summarizing it, too many times."
            document.error = f"Failed after {document.attempts} attempts. {document.error}"
            document.finished_at = now
            document.claimed_by = ""
            document.lease_until = None
            document.save(update_fields=["status", "error", "finished_at", "claimed_by", "lease_until"])
        runnable = [d for d in documents if d.attempts < settings.BULK_MAX_ATTEMPTS]
        Document.objects.filter(pk__in=[d.pk for d in runnable]).update(
            status=Document.Status.RUNNING,
            attempts=F("attempts") + 1,
            claimed_by=worker,
            lease_until=now + timedelta(seconds=settings.BULK_TASK_TIME_LIMIT),
        )
        taken += [
            Claim(
                d.pk,
                d.external_id,
                d.text,
                bytes(d.source) if d.source is not None else None,
                d.format,
                d.attempts + 1,
            )
            for d in runnable
        ]
    return taken


def document_set_text(*, document_id: int, text: str) -> None:
    """Keep a PDF's extracted text, so a retry does not parse it again."""
    Document.objects.filter(pk=document_id).update(text=text, source=None)


@dataclass(frozen=True)
class Done:
    """A claimed document answered: its figures, and how long its run took."""

    document_id: int
    summary: Summary
    duration_ms: float


@dataclass(frozen=True)
class Failed:
    """A claimed document's attempt failed (document_fail)."""

    document_id: int
    error: str
    retryable: bool
    code: str = ""


@dataclass(frozen=True)
class Released:
    """A claimed document given back unrun (document_release)."""

    document_id: int


Outcome = Done | Failed | Released


@transaction.atomic
def documents_record(*, worker: str, outcomes: Sequence[Outcome]) -> int:
    """Write what a runner's claimed documents came to, in one transaction: each answered one's one
    result and its owner's usage, failed attempts, documents given back. Returns the results
    written: an answered document that already had one (a duplicate delivery) gets none and bills
    nothing."""
    # Every row it touches locked first, in id order, as a cancel locks them (jobs.services.job_cancel).
    list(
        Document.objects.select_for_update()
        .filter(pk__in=[o.document_id for o in outcomes])
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    done = {o.document_id: o for o in outcomes if isinstance(o, Done)}
    created = _documents_complete(done) if done else 0
    for outcome in outcomes:
        if isinstance(outcome, Failed):
            document_fail(
                document_id=outcome.document_id,
                worker=worker,
                error=outcome.error,
                retryable=outcome.retryable,
                code=outcome.code,
            )
    released = [o.document_id for o in outcomes if isinstance(o, Released)]
    if released:
        Document.objects.filter(
            pk__in=released, status=Document.Status.RUNNING, claimed_by=worker, attempts__gt=0
        ).update(status=Document.Status.PENDING, attempts=F("attempts") - 1, claimed_by="", lease_until=None)
    return created


def _documents_complete(done: dict[int, Done]) -> int:
    # Locked by documents_record, so a stale runner recording the same documents waits there and then
    # sees the results here.
    rows = list(Document.objects.filter(pk__in=done).order_by("pk").values_list("pk", "job_id"))
    existing = set(Result.objects.filter(document_id__in=done).values_list("document_id", flat=True))
    new = [(pk, job_id, done[pk]) for pk, job_id in rows if pk not in existing]
    Result.objects.bulk_create(
        Result(
            job_id=job_id,
            document_id=pk,
            summary=d.summary.text,
            finish_reason=d.summary.finish_reason,
            engine_calls=d.summary.engine_calls,
            chunks=d.summary.chunks,
            document_tokens=d.summary.document_tokens,
            prompt_tokens=d.summary.prompt_tokens,
            cached_tokens=d.summary.cached_tokens,
            completion_tokens=d.summary.completion_tokens,
            duration_ms=d.duration_ms,
            body=d.summary.body,
        )
        for pk, job_id, d in new
    )
    owners = dict(Job.objects.filter(pk__in={job_id for _, job_id, _ in new}).values_list("pk", "owner_id"))
    billed: dict[int, list[Summary]] = {}
    for _, job_id, d in new:
        billed.setdefault(owners[job_id], []).append(d.summary)
    for owner_id, summaries in billed.items():
        usage_record(
            user_id=owner_id,
            source=UsageDay.Source.BULK,
            prompt_tokens=sum(s.prompt_tokens for s in summaries),
            cached_tokens=sum(s.cached_tokens for s in summaries),
            completion_tokens=sum(s.completion_tokens for s in summaries),
            requests=sum(s.engine_calls for s in summaries),
        )
    Document.objects.filter(pk__in=done).update(
        status=Document.Status.DONE, error="", claimed_by="", lease_until=None, finished_at=timezone.now()
    )
    return len(new)


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


def worker_recover(*, hostname: str, boot: str) -> list[int]:
    """A worker restarted: what its previous life held goes back to pending; the active jobs to resume."""
    Document.objects.filter(status=Document.Status.RUNNING, claimed_by__startswith=f"{hostname}/").exclude(
        claimed_by=f"{hostname}/{boot}"
    ).update(status=Document.Status.PENDING, claimed_by="", lease_until=None)
    return list(Job.objects.filter(status__in=Job.ACTIVE).values_list("pk", flat=True))
