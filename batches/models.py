"""The OpenAI Batch API's files and batches (docs/openai-api.md, "Batches").

A file's bytes are on disk under BATCH_FILES_DIR, never in the database, and are streamed in and
out. A batch is a bulk job (jobs.Job, kind `batch`) with the OpenAI batch's own fields beside it:
each line of its input file is one of the job's documents, each finished line one result, so the
bulk queue's claims, leases, shaping and progress carry it."""

import uuid

from django.conf import settings
from django.core.files.storage import FileSystemStorage
from django.db import models

from jobs.models import Job


def file_storage() -> FileSystemStorage:
    return FileSystemStorage(location=settings.BATCH_FILES_DIR)


def _file_id() -> str:
    return f"file-{uuid.uuid4().hex}"


def _batch_id() -> str:
    return f"batch_{uuid.uuid4().hex}"


class File(models.Model):
    class Purpose(models.TextChoices):
        BATCH = "batch"
        BATCH_OUTPUT = "batch_output"

    file_id = models.CharField(max_length=64, unique=True, default=_file_id)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    purpose = models.CharField(max_length=16, choices=Purpose.choices)
    filename = models.CharField(max_length=255)
    content = models.FileField(storage=file_storage, upload_to="%Y/%m/%d", max_length=255)
    bytes = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    # Past it the file reads as deleted, and the sweep removes it (`expires_after`).
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["owner", "id"])]

    def __str__(self) -> str:
        return self.file_id


class Batch(models.Model):
    class Status(models.TextChoices):
        VALIDATING = "validating"
        FAILED = "failed"
        IN_PROGRESS = "in_progress"
        FINALIZING = "finalizing"
        COMPLETED = "completed"
        EXPIRED = "expired"
        CANCELLING = "cancelling"
        CANCELLED = "cancelled"

    ENDED = (Status.FAILED, Status.COMPLETED, Status.EXPIRED, Status.CANCELLED)

    batch_id = models.CharField(max_length=64, unique=True, default=_batch_id)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="batch")
    endpoint = models.CharField(max_length=64)
    completion_window = models.CharField(max_length=8, default="24h")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.VALIDATING)
    input_file = models.ForeignKey(File, null=True, on_delete=models.SET_NULL, related_name="+")
    output_file = models.ForeignKey(File, null=True, on_delete=models.SET_NULL, related_name="+")
    error_file = models.ForeignKey(File, null=True, on_delete=models.SET_NULL, related_name="+")
    metadata = models.JSONField(default=dict, blank=True)
    # A malformed input file's problems, as OpenAI's `errors.data`: code, message, line, param.
    errors = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    in_progress_at = models.DateTimeField(null=True, blank=True)
    finalizing_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    cancelling_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["owner", "id"]), models.Index(fields=["status"])]
        verbose_name_plural = "batches"

    def __str__(self) -> str:
        return self.batch_id
