"""Reads of batches: the owner's, a page at a time, and each batch's counts and usage from its job."""

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Q, Sum

from batches.models import Batch
from httpkit.pages import cursor_page
from jobs.models import Document, Result


def line_id(document: Document) -> str:
    return f"batch_req_{document.pk}"


def batch_get(*, owner: AbstractBaseUser, batch_id: str) -> Batch | None:
    """The owner's batch, or None: another user's reads as missing."""
    return _batches(owner).filter(batch_id=batch_id).first()


def _batches(owner: AbstractBaseUser):
    return Batch.objects.filter(owner=owner).select_related("input_file", "output_file", "error_file", "job")


def batch_list(*, owner: AbstractBaseUser, after: str | None, limit: int) -> tuple[list[Batch], bool]:
    """A page of the owner's batches, newest first, as OpenAI lists them (LookupError: bad `after`)."""
    batches = _batches(owner)
    return cursor_page(batches, visible=batches, key="batch_id", after=after, limit=limit, descending=True)


def batch_counts(batch: Batch) -> dict:
    """total, completed and failed lines; lines that did not run count as failed once it ended."""
    figures = Document.objects.filter(job_id=batch.job_id).aggregate(
        total=Count("pk"),
        completed=Count("pk", filter=Q(status=Document.Status.DONE)),
        failed=Count("pk", filter=Q(status=Document.Status.FAILED)),
        cancelled=Count("pk", filter=Q(status=Document.Status.CANCELLED)),
    )
    ended = batch.status in Batch.ENDED
    failed = figures["failed"] + (figures["cancelled"] if ended else 0)
    return {"total": figures["total"], "completed": figures["completed"], "failed": failed}


def batch_usage(batch: Batch) -> dict:
    sums = Result.objects.filter(job_id=batch.job_id).aggregate(
        prompt_tokens=Sum("prompt_tokens"),
        cached_tokens=Sum("cached_tokens"),
        completion_tokens=Sum("completion_tokens"),
    )
    return {name: value or 0 for name, value in sums.items()}
