"""Tokens used, per user, per day (UTC) and per way in (chat, API, bulk), and the optional daily
quotas that bound them (docs/usage.md)."""

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models


class UsageDay(models.Model):
    class Source(models.TextChoices):
        CHAT = "chat"
        API = "api", "API"
        BULK = "bulk"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="usage_days")
    day = models.DateField()
    source = models.CharField(max_length=8, choices=Source.choices)
    requests = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    # Of the prompt tokens, those the engine's prefix cache served.
    cached_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "day", "source"], name="usage_one_row_per_day")
        ]
        indexes = [models.Index(fields=["day", "user"])]
        ordering = ["-day", "user_id", "source"]

    def __str__(self) -> str:
        return f"{self.user} {self.day} {self.source}"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class DailyQuota(models.Model):
    """Most tokens (prompt and completion) a user may use in a UTC day, for one user or a group's members."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="daily_quota"
    )
    group = models.OneToOneField(
        Group, null=True, blank=True, on_delete=models.CASCADE, related_name="daily_quota"
    )
    tokens = models.PositiveBigIntegerField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=False, group__isnull=True)
                | models.Q(user__isnull=True, group__isnull=False),
                name="quota_for_a_user_or_a_group",
            )
        ]

    def __str__(self) -> str:
        return f"{self.user or self.group}: {self.tokens} tokens a day"
