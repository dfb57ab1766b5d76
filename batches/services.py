"""A batch's life: created (`validating`), its file read into a bulk job's documents (`in_progress`,
or `failed` with the file's errors), cancelled (`cancelling`), expired past its window, and, once its
job has ended, its output and error files written (`finalizing`, then `completed`, `cancelled` or
`expired`). Each step is conditional on the status it expects, so a task delivered twice, or a
finalize asked for by the runner and the sweep alike, acts once."""

import tempfile
from datetime import timedelta

import orjson
from celery import current_app
from django.contrib.auth.models import AbstractBaseUser
from django.core.files import File as DjangoFile
from django.db import transaction
from django.utils import timezone

import redisconn
from batches import files, selectors
from batches.models import Batch, File
from batches.protocol import error_line, output_line
from batches.validation import Malformed, documents_from_file
from httpkit.errors import Refusal
from jobs.models import Document, Job
from jobs.services import job_cancel, job_start
from redisconn import keys

WINDOW = timedelta(hours=24)
LEFT = {
    Batch.Status.CANCELLING: ("batch_cancelled", "The batch was cancelled before this request ran."),
    Batch.Status.EXPIRED: ("batch_expired", "The batch's completion window ended before this request ran."),
    Batch.Status.COMPLETED: ("internal_error", "The request did not run."),
}


def runner_holds(job_id: int) -> bool:
    """Whether a runner holds the job now (jobs.runner.RunnerLock): its in-flight lines may still end."""
    return bool(redisconn.sync_client().exists(keys.job_runner_lock(job_id)))


def _later(task_name: str, batch_pk: int) -> None:
    """Queue a task of batches.tasks (which calls these services) once this transaction commits."""
    transaction.on_commit(lambda: current_app.send_task(f"batches.tasks.{task_name}", args=[batch_pk]))


@transaction.atomic
def batch_create(
    *, owner: AbstractBaseUser, input_file_id: str, endpoint: str, completion_window: str, metadata: dict
) -> Batch:
    """A batch of the owner's input file, `validating` until the bulk worker has read it."""
    input_file = files.file_get(owner=owner, file_id=input_file_id)
    if input_file is None:
        raise Refusal("not_found", f"No file {input_file_id}.", param="input_file_id")
    if input_file.purpose != File.Purpose.BATCH:
        raise Refusal("invalid_field", "The input file's purpose must be batch.", param="input_file_id")
    job = Job.objects.create(owner=owner, kind="batch", instruction="", max_summary_tokens=0)
    batch = Batch.objects.create(
        owner=owner,
        job=job,
        endpoint=endpoint,
        completion_window=completion_window,
        input_file=input_file,
        metadata=metadata,
        expires_at=timezone.now() + WINDOW,
    )
    job.name = batch.batch_id
    job.save(update_fields=["name"])
    _later("batch_validate", batch.pk)
    return batch


def batch_validate(*, batch_pk: int) -> None:
    """Read the input file into the job's documents and start the job, or fail the batch."""
    with transaction.atomic():
        batch = (
            Batch.objects.select_for_update(of=("self",))
            .select_related("job", "owner", "input_file")
            .get(pk=batch_pk)
        )
        if batch.status != Batch.Status.VALIDATING:
            return
        try:
            if batch.input_file is None:
                raise Malformed(
                    [{"code": "missing_file", "message": "The input file was deleted.", "line": None}]
                )
            with transaction.atomic(), batch.input_file.content.open("rb") as stream:
                documents_from_file(batch, batch.owner, stream)
        except Malformed as malformed:
            batch.status, batch.failed_at, batch.errors = (
                Batch.Status.FAILED,
                timezone.now(),
                malformed.errors,
            )
            batch.save(update_fields=["status", "failed_at", "errors"])
            Job.objects.filter(pk=batch.job_id).update(status=Job.Status.FAILED, finished_at=timezone.now())
            return
        batch.status, batch.in_progress_at = Batch.Status.IN_PROGRESS, timezone.now()
        batch.save(update_fields=["status", "in_progress_at"])
        job = job_start(job=batch.job)
    if job.status not in Job.ACTIVE:  # every line refused: nothing to run
        batch_finalize(batch.job_id)


@transaction.atomic
def batch_cancel(*, batch: Batch, expired: bool = False) -> Batch:
    """Stop a batch: lines not finished are not run; those finished are kept in its output."""
    batch = Batch.objects.select_for_update().get(pk=batch.pk)
    if batch.status not in (Batch.Status.VALIDATING, Batch.Status.IN_PROGRESS):
        return batch
    now = timezone.now()
    batch.status = Batch.Status.CANCELLING
    batch.cancelling_at = now
    batch.expired_at = now if expired else None
    batch.save(update_fields=["status", "cancelling_at", "expired_at"])
    job_cancel(job=batch.job)
    _later("batch_finalize_when_stopped", batch.pk)
    return batch


def _write(lines, name: str, owner, file_name: str) -> File | None:
    """A file of JSON lines, spooled on disk and stored; None when there are none."""
    with tempfile.TemporaryFile() as spool:
        for line in lines:
            spool.write(orjson.dumps(line) + b"\n")
        if not spool.tell():
            return None
        spool.seek(0)
        content = DjangoFile(spool, name=name)
        content.size = spool.seek(0, 2) or 0
        spool.seek(0)
        return files.file_store(
            owner=owner,
            content=content,
            filename=file_name,
            purpose=File.Purpose.BATCH_OUTPUT,
            expires_seconds=None,
        )


def batch_finalize(job_id: int) -> None:
    """Write the output and error files of a batch whose job has ended, and end the batch."""
    with transaction.atomic():
        batch = (
            Batch.objects.select_for_update(of=("self",)).select_related("job").filter(job_id=job_id).first()
        )
        if (
            batch is None
            or batch.status in (*Batch.ENDED, Batch.Status.VALIDATING)
            or batch.job.status in Job.ACTIVE
        ):
            return
        if batch.status != Batch.Status.FINALIZING:
            batch.finalizing_at = timezone.now()
        ending = (
            Batch.Status.EXPIRED
            if batch.expired_at
            else Batch.Status.CANCELLING
            if batch.cancelling_at or batch.job.status == Job.Status.CANCELLED
            else Batch.Status.COMPLETED
        )
        batch.status = Batch.Status.FINALIZING
        batch.save(update_fields=["status", "finalizing_at"])
    left = LEFT[ending]
    documents = Document.objects.filter(job_id=job_id).select_related("result").order_by("pk")
    output = _write(
        (
            output_line(line_id=selectors.line_id(d), custom_id=d.external_id, body=d.result.body)
            for d in documents.filter(status=Document.Status.DONE).iterator(chunk_size=500)
        ),
        "output.jsonl",
        batch.owner,
        f"{batch.batch_id}_output.jsonl",
    )
    failed = (
        error_line(
            line_id=selectors.line_id(d),
            custom_id=d.external_id,
            **(
                {"code": d.error_code or "internal_error", "message": d.error}
                if d.status == Document.Status.FAILED
                else dict(zip(("code", "message"), left, strict=True))
            ),
        )
        for d in documents.exclude(status=Document.Status.DONE).iterator(chunk_size=500)
    )
    errors = _write(failed, "errors.jsonl", batch.owner, f"{batch.batch_id}_error.jsonl")
    with transaction.atomic():
        batch = Batch.objects.select_for_update().get(pk=batch.pk)
        if batch.status != Batch.Status.FINALIZING:
            return
        now = timezone.now()
        batch.output_file, batch.error_file = output, errors
        if ending == Batch.Status.EXPIRED:
            batch.status = Batch.Status.EXPIRED
        elif ending == Batch.Status.CANCELLING:
            batch.status, batch.cancelled_at = Batch.Status.CANCELLED, now
        else:
            batch.status, batch.completed_at = Batch.Status.COMPLETED, now
        batch.save(update_fields=["output_file", "error_file", "status", "cancelled_at", "completed_at"])


def batches_sweep() -> None:
    """Expire batches past their window, end those whose job ended without a finalize (a worker
    that died between the two, a job cancelled from the admin), and delete expired files."""
    for batch in Batch.objects.filter(
        status__in=[Batch.Status.VALIDATING, Batch.Status.IN_PROGRESS], expires_at__lte=timezone.now()
    ):
        batch_cancel(batch=batch, expired=True)
    stranded = Batch.objects.filter(
        status__in=[Batch.Status.IN_PROGRESS, Batch.Status.FINALIZING, Batch.Status.CANCELLING]
    ).exclude(job__status__in=Job.ACTIVE)
    for job_id in stranded.values_list("job_id", flat=True):
        if not runner_holds(job_id):  # a line answered meanwhile is kept: the next sweep ends it
            batch_finalize(job_id)
    files.files_expire()
