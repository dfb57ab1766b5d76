"""API tokens: stored as a SHA-256 digest, scoped, revocable. The plain token is
shown once, when issued, and never stored or logged."""

from django.conf import settings
from django.db import models


class Scope(models.TextChoices):
    CHAT = "chat", "Chat through the HTTP API"
    STORE_READ = "store.read", "Read the conversation store"
    JOBS_SUBMIT = "jobs.submit", "Submit and read bulk jobs"
    OPENAI = "openai", "Call the OpenAI-compatible API (/v1/)"
    KNOWLEDGE = "knowledge", "Read and search collections, upload documents"
    BATCH = "batch", "Upload files and run batches (/v1/files, /v1/batches)"


# The permission that lets a user hold the batch scope; staff give it to groups in the admin.
BATCH_PERMISSION = "apitokens.use_batch_api"


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    # The public part of the token, used to find the row; the rest is only digested.
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        permissions = [("use_batch_api", "Can run OpenAI batches (the batch scope of API keys)")]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
