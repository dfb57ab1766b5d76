"""Reads of usage: today's tokens, a user's quota, a user's recent days, the top users of a day."""

import datetime as dt
from collections import defaultdict

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import F, Q, Sum
from django.utils import timezone

from usage.models import DailyQuota, UsageDay


def today() -> dt.date:
    """Usage days are UTC days, the same for every user and every web process."""
    return timezone.now().astimezone(dt.UTC).date()


def next_reset() -> dt.datetime:
    """When today's usage stops counting: the next midnight, UTC."""
    return dt.datetime.combine(today() + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)


def quota_for(*, user: AbstractBaseUser) -> int | None:
    """The user's daily token quota: their own, else the largest of their groups', else
    USAGE_DAILY_TOKENS (0: none). None when nothing bounds them."""
    own, groups = None, []
    for user_id, tokens in DailyQuota.objects.filter(Q(user=user) | Q(group__user=user)).values_list(
        "user_id", "tokens"
    ):
        if user_id is not None:
            own = tokens
        else:
            groups.append(tokens)
    if own is not None:
        return own
    if groups:
        return max(groups)
    return settings.USAGE_DAILY_TOKENS or None


def tokens_used(*, user_id: int, day: dt.date) -> int:
    """Prompt and completion tokens of every source on `day`."""
    total = UsageDay.objects.filter(user_id=user_id, day=day).aggregate(
        total=Sum(F("prompt_tokens") + F("completion_tokens"))
    )["total"]
    return total or 0


def usage_days(*, user: AbstractBaseUser, days: int = 30) -> list[dict]:
    """The user's last `days` days with any use, newest first: per source (`cells`, in the order of
    UsageDay.Source) and in total."""
    since = today() - dt.timedelta(days=days - 1)
    by_day: dict[dt.date, dict] = defaultdict(lambda: {"sources": {}, "total_tokens": 0, "requests": 0})
    for row in UsageDay.objects.filter(user=user, day__gte=since):
        entry = by_day[row.day]
        entry["sources"][row.source] = row
        entry["total_tokens"] += row.total_tokens
        entry["requests"] += row.requests
    return [
        {**by_day[day], "day": day, "cells": [by_day[day]["sources"].get(s) for s in UsageDay.Source.values]}
        for day in sorted(by_day, reverse=True)
    ]


def top_users(*, day: dt.date, limit: int = 10) -> list[dict]:
    """The users who used the most tokens on `day`, with their requests and tokens."""
    return list(
        UsageDay.objects.filter(day=day)
        .values(username=F("user__username"))
        # The total first: after it, the names below stand for the sums, not the fields.
        .annotate(total_tokens=Sum(F("prompt_tokens") + F("completion_tokens")))
        .annotate(
            requests=Sum("requests"),
            prompt_tokens=Sum("prompt_tokens"),
            cached_tokens=Sum("cached_tokens"),
            completion_tokens=Sum("completion_tokens"),
        )
        .order_by("-total_tokens", "username")[:limit]
    )
