"""Per-user bounds on uploads to collections (KNOWLEDGE_UPLOADS_PER_MINUTE) and searches of them
(KNOWLEDGE_SEARCHES_PER_MINUTE), counted in Redis across web processes with the `limits` package's
moving windows. Past a bound the caller gets `busy` with its reason and a time to retry."""

import time
from functools import cache

from django.conf import settings
from limits import RateLimitItemPerMinute
from limits.storage import RedisStorage
from limits.strategies import MovingWindowRateLimiter

import redisconn
from httpkit import errors
from redisconn import keys


@cache
def _limiter() -> MovingWindowRateLimiter:
    return MovingWindowRateLimiter(RedisStorage(redisconn.limits_storage_uri(asynchronous=False)))


def _check(namespace: str, per_minute: int, reason: str, user_id: int) -> None:
    item = RateLimitItemPerMinute(per_minute)
    limiter = _limiter()
    if not limiter.hit(item, namespace, str(user_id)):
        reset = limiter.get_window_stats(item, namespace, str(user_id)).reset_time
        raise errors.busy(reason, max(1.0, reset - time.time()))


def upload_check(*, user_id: int) -> None:
    """Count one upload of the user's; Refusal `busy` (knowledge_uploads) past the bound."""
    _check(keys.KNOWLEDGE_UPLOADS_LIMIT, settings.KNOWLEDGE_UPLOADS_PER_MINUTE, "knowledge_uploads", user_id)


def search_check(*, user_id: int) -> None:
    """Count one search of the user's; Refusal `busy` (knowledge_searches) past the bound."""
    _check(
        keys.KNOWLEDGE_SEARCHES_LIMIT, settings.KNOWLEDGE_SEARCHES_PER_MINUTE, "knowledge_searches", user_id
    )
