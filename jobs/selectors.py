"""Reads: progress figures, jobs a user may see, and result rows in the OpenAI batch shape."""

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, F, Min, Q, Sum
from django.utils import timezone

from jobs.models import Document, Job, Result


@dataclass(frozen=True)
class Progress:
    job: int
    status: str
    total: int
    done: int
    failed: int
    cancelled: int
    running: int
    pending: int
    percent: float
    docs_per_minute: float | None
    eta_seconds: float | None
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cache_hit_ratio: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def _progress(job: Job, counts: dict[str, int], tokens: dict, finished_since_start: int) -> Progress:
    total = sum(counts.values())
    done, failed = counts.get(Document.Status.DONE, 0), counts.get(Document.Status.FAILED, 0)
    cancelled = counts.get(Document.Status.CANCELLED, 0)
    remaining = counts.get(Document.Status.PENDING, 0) + counts.get(Document.Status.RUNNING, 0)
    rate = eta = None
    if job.started_at is not None:
        end = job.finished_at or timezone.now()
        minutes = max((end - job.started_at).total_seconds(), 1.0) / 60
        rate = round(finished_since_start / minutes, 2)
        if rate > 0 and job.status in Job.ACTIVE:
            eta = round(remaining / rate * 60, 1)
    prompt, cached = tokens.get("prompt") or 0, tokens.get("cached") or 0
    return Progress(
        job=job.pk,
        status=job.status,
        total=total,
        done=done,
        failed=failed,
        cancelled=cancelled,
        running=counts.get(Document.Status.RUNNING, 0),
        pending=counts.get(Document.Status.PENDING, 0),
        percent=round(100 * (done + failed + cancelled) / total, 1) if total else 0.0,
        docs_per_minute=rate,
        eta_seconds=eta,
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=tokens.get("completion") or 0,
        cache_hit_ratio=round(cached / prompt, 4) if prompt else None,
    )


def jobs_progress(*, jobs: Iterable[Job]) -> dict[int, Progress]:
    """Progress of several jobs in three queries, for the admin list and its live updates."""
    jobs = {job.pk: job for job in jobs}
    counts: dict[int, dict[str, int]] = {pk: {} for pk in jobs}
    finished: dict[int, int] = dict.fromkeys(jobs, 0)
    rows = Document.objects.filter(job_id__in=jobs).values("job_id", "status").annotate(n=Count("id"))
    for row in rows:
        counts[row["job_id"]][row["status"]] = row["n"]
    recent = (
        Document.objects.filter(job_id__in=jobs, finished_at__isnull=False, job__started_at__isnull=False)
        # Documents refused at upload finished before the job started; they are not throughput.
        .filter(finished_at__gte=F("job__started_at"))
        .values("job_id")
        .annotate(n=Count("id"))
    )
    for row in recent:
        finished[row["job_id"]] = row["n"]
    tokens = {
        row["job_id"]: row
        for row in Result.objects.filter(job_id__in=jobs)
        .values("job_id")
        .annotate(
            prompt=Sum("prompt_tokens"), cached=Sum("cached_tokens"), completion=Sum("completion_tokens")
        )
    }
    return {pk: _progress(job, counts[pk], tokens.get(pk, {}), finished[pk]) for pk, job in jobs.items()}


def job_progress(*, job: Job) -> Progress:
    return jobs_progress(jobs=[job])[job.pk]


def job_as_dict(job: Job) -> dict:
    """A job as the jobs API shows it, with its progress."""
    return {
        "id": job.pk,
        "name": job.name,
        "status": job.status,
        "preset": job.preset,
        "max_summary_tokens": job.max_summary_tokens,
        "created_at": job.created_at.isoformat(),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "progress": job_progress(job=job).as_dict(),
        "results_url": f"/api/jobs/{job.pk}/results",
    }


def job_visible_to(*, user: AbstractBaseUser, job_id: int) -> Job | None:
    """A job its owner, or a superuser, may see; others read the same as a missing one."""
    jobs = Job.objects.all() if user.is_superuser else Job.objects.filter(owner=user)
    return jobs.filter(pk=job_id).first()


def job_status(*, job_id: int) -> str | None:
    return Job.objects.filter(pk=job_id).values_list("status", flat=True).first()


@dataclass(frozen=True)
class Backlog:
    """What keeps a runner from finishing a job when it has nothing to claim."""

    next_retry_at: datetime | None
    held_elsewhere: int


def job_backlog(*, job_id: int) -> Backlog:
    rows = Document.objects.filter(job_id=job_id).aggregate(
        next_retry_at=Min("available_at", filter=Q(status=Document.Status.PENDING)),
        held=Count("id", filter=Q(status=Document.Status.RUNNING)),
    )
    return Backlog(next_retry_at=rows["next_retry_at"], held_elsewhere=rows["held"])


def job_document_counts(*, job: Job) -> tuple[int, int]:
    """(documents, failed ones) of a job."""
    rows = job.documents.aggregate(
        total=Count("id"), failed=Count("id", filter=Q(status=Document.Status.FAILED))
    )
    return rows["total"], rows["failed"]


def job_refused_documents(*, job: Job) -> list[tuple[str, str]]:
    """(id, error) of the job's failed documents: just after creation, those refused at upload."""
    return list(
        job.documents.filter(status=Document.Status.FAILED).order_by("id").values_list("external_id", "error")
    )


def job_documents(*, job: Job) -> Iterator[Document]:
    """The job's documents with their results, without loading the PDF bytes."""
    return (
        job.documents.select_related("result").defer("source", "text").order_by("id").iterator(chunk_size=500)
    )


def result_line(*, job: Job, document: Document) -> dict | None:
    """One output line in the OpenAI batch shape, or None while the document is unfinished."""
    request_id = f"job-{job.pk}-doc-{document.pk}"
    result = getattr(document, "result", None)
    if result is not None:
        usage = {
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": result.cached_tokens},
        }
        body = {
            "object": "chat.completion",
            "model": settings.INFERENCE_MODEL_NAME,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": result.summary},
                    "finish_reason": result.finish_reason,
                }
            ],
            "usage": usage,
            "chunks": result.chunks,
            "document_tokens": result.document_tokens,
        }
        return {
            "id": request_id,
            "custom_id": document.external_id,
            "response": {"status_code": 200, "request_id": request_id, "body": body},
            "error": None,
        }
    if document.status in (Document.Status.FAILED, Document.Status.CANCELLED):
        code = "cancelled" if document.status == Document.Status.CANCELLED else "failed"
        return {
            "id": request_id,
            "custom_id": document.external_id,
            "response": None,
            "error": {"code": code, "message": document.error or "Cancelled before it was summarized."},
        }
    return None


def job_result_lines(*, job: Job) -> Iterator[dict]:
    for document in job_documents(job=job):
        line = result_line(job=job, document=document)
        if line is not None:
            yield line
