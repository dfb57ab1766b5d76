"""Bulk summarization jobs: a job owns documents; each finished document has exactly one result.

The database is the source of truth for progress. Documents are claimed by a worker
under a lease, and a result is written once under the unique (job, document) key,
so a redelivered task or a restarted worker never duplicates or loses one.
"""

from django.conf import settings
from django.db import models


class Job(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft"
        QUEUED = "queued"
        RUNNING = "running"
        COMPLETED = "completed"
        PARTIAL = "partial"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class Preset(models.TextChoices):
        PARAGRAPH = "paragraph", "Short paragraph"
        BULLETS = "bullets", "Bullet points"
        CUSTOM = "custom", "Custom instruction"

    ACTIVE = (Status.QUEUED, Status.RUNNING)
    # A summary job's documents are summarized; another kind's lines are run by that kind's code
    # (jobs.kinds: a batch of the OpenAI API's requests, batches/).
    SUMMARY = "summary"

    kind = models.CharField(max_length=16, default=SUMMARY, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jobs")
    name = models.CharField(max_length=200, blank=True)
    preset = models.CharField(max_length=16, choices=Preset.choices, default=Preset.PARAGRAPH)
    # The instruction sent to the engine, resolved from the preset when the job is created.
    instruction = models.TextField()
    max_summary_tokens = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFT)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status"])]

    def __str__(self) -> str:
        return self.name or f"Job {self.pk}"


class Document(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class Format(models.TextChoices):
        TEXT = "text"
        HTML = "html"
        PDF = "pdf"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="documents")
    # The caller's id for the input (file name, or the id column of .jsonl/.csv).
    external_id = models.CharField(max_length=500)
    format = models.CharField(max_length=8, choices=Format.choices, default=Format.TEXT)
    text = models.TextField(blank=True)
    # The raw bytes of an HTML or PDF file until the worker extracts its text (documents.reader).
    source = models.BinaryField(null=True, blank=True, editable=False)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    # The error table's code of a failure a client reads (httpkit.errors), where it has one.
    error_code = models.CharField(max_length=64, blank=True)
    # Who holds the document while it runs, and until when; an expired lease can be reclaimed.
    claimed_by = models.CharField(max_length=200, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    # A failed attempt waits until then before the next one.
    available_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["job", "status"])]

    def __str__(self) -> str:
        return self.external_id


class Result(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="results")
    document = models.OneToOneField(Document, on_delete=models.CASCADE, related_name="result")
    summary = models.TextField()
    finish_reason = models.CharField(max_length=32, blank=True)
    # Engine calls the summary took: 1, or the chunks of a long document plus the reduce steps.
    engine_calls = models.PositiveIntegerField(default=1)
    chunks = models.PositiveIntegerField(default=1)
    document_tokens = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    duration_ms = models.FloatField(default=0)
    # The response a line of another kind answered with (a batch line's completion), as sent.
    body = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["document_id"]
        constraints = [
            models.UniqueConstraint(fields=["job", "document"], name="jobs_result_one_per_document")
        ]

    def __str__(self) -> str:
        return f"Result for {self.document_id}"
