"""Counting usage and enforcing quotas. Every answer is counted once, when it ends, by the path that
made it (chat, API, bulk); a quota is checked when an answer starts, so an answer already under way
finishes even if it crosses the quota."""

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from httpkit.errors import Refusal
from usage import selectors
from usage.models import UsageDay


def usage_record(
    *,
    user_id: int,
    source: str,
    prompt_tokens: int | None,
    cached_tokens: int | None,
    completion_tokens: int | None,
    requests: int = 1,
) -> None:
    """Add one answer's (or one document's) tokens to the user's row for today and `source`."""
    figures = {
        "requests": requests,
        "prompt_tokens": prompt_tokens or 0,
        "cached_tokens": cached_tokens or 0,
        "completion_tokens": completion_tokens or 0,
    }
    row = UsageDay.objects.filter(user_id=user_id, day=selectors.today(), source=source)
    increments = {name: F(name) + value for name, value in figures.items()}
    if row.update(**increments):
        return
    try:
        with transaction.atomic():
            UsageDay.objects.create(user_id=user_id, day=selectors.today(), source=source, **figures)
    except IntegrityError:
        # Another answer of the same user created today's row first.
        row.update(**increments)


def usage_check(*, user: AbstractBaseUser) -> None:
    """Refuse (Refusal `quota_exceeded`) a user whose daily quota is spent, saying when it resets."""
    quota = selectors.quota_for(user=user)
    if quota is None or selectors.tokens_used(user_id=user.pk, day=selectors.today()) < quota:
        return
    reset = selectors.next_reset()
    raise Refusal(
        "quota_exceeded",
        f"You have used your {quota:,} tokens for today. The quota resets at {reset:%H:%M} UTC.",
        retry_after=max(1, round((reset - timezone.now()).total_seconds())),
        reset_at=reset.isoformat(),
    )
