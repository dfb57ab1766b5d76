"""Admission control for chat answers, counted in Redis so it holds across web processes.

Three limits: answers generating at once per user and in total (leases in sorted
sets, scored by expiry so a dead process's slots free themselves), and messages per
user per minute (the `limits` library's moving window). Past any of them the caller
gets `busy` (httpkit.errors.busy) with a retry-after; the queue is never unbounded.

The per-user rate uses a maintained library; the concurrency leases are a short
Lua script because `limits` counts events in windows and has no notion of a slot
that is held and then released.
"""

import time
import uuid
from dataclasses import dataclass

import redis.asyncio as aioredis
from django.conf import settings
from limits import RateLimitItemPerMinute
from limits.aio.storage import RedisStorage
from limits.aio.strategies import MovingWindowRateLimiter

import redisconn
from answers import metrics, process
from eventloops import PerLoop
from httpkit import errors, pending
from redisconn import keys

_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 2 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[6])
return 0
"""


@dataclass(frozen=True)
class Lease:
    user_id: int
    member: str


# One limiter per event loop: its Redis connections belong to the loop that opened them.
_rate_limiter = PerLoop(
    lambda: MovingWindowRateLimiter(
        RedisStorage(redisconn.limits_storage_uri(asynchronous=True), implementation="redispy")
    )
)


async def admit_answer(r: aioredis.Redis, *, user_id: int) -> Lease:
    """`admit`, counted: the one way every answer (chat or API) is admitted. A draining process
    (answers.drain) admits none."""
    if process.draining():
        metrics.admission_refused("draining")
        raise errors.busy("draining", 1.0)
    try:
        lease = await admit(r, user_id=user_id)
    except errors.Refusal as refusal:
        metrics.admission_refused(refusal.extra["reason"])
        raise
    pending.taken()  # the answer is bounded by its slot now, not by the web process's pending count
    return lease


async def admit(r: aioredis.Redis, *, user_id: int) -> Lease:
    """Take a generation slot for the user, or raise httpkit.errors.busy's Refusal."""
    lease = Lease(user_id=user_id, member=uuid.uuid4().hex)
    now = time.time()
    lease_seconds = settings.CHAT_LEASE_SECONDS
    refused = await r.eval(
        _ACQUIRE,
        2,
        keys.CHAT_ACTIVE,
        keys.chat_user_generations(user_id),
        now,
        now + lease_seconds,
        lease.member,
        settings.CHAT_MAX_ACTIVE_TOTAL,
        settings.CHAT_MAX_ACTIVE_PER_USER,
        int(lease_seconds) + 1,
    )
    if refused == 1:
        raise errors.busy("user_concurrency", settings.CHAT_BUSY_RETRY_AFTER)
    if refused == 2:
        raise errors.busy("total_concurrency", settings.CHAT_BUSY_RETRY_AFTER)
    item = RateLimitItemPerMinute(settings.CHAT_MESSAGES_PER_MINUTE)
    limiter = _rate_limiter()
    if not await limiter.hit(item, keys.CHAT_MESSAGES_LIMIT, str(user_id)):
        await release_slot(r, lease)
        stats = await limiter.get_window_stats(item, keys.CHAT_MESSAGES_LIMIT, str(user_id))
        raise errors.busy("user_rate", max(1.0, stats.reset_time - time.time()))
    return lease


def refresh_in(pipe: aioredis.client.Pipeline, lease: Lease, *, retake: bool = False) -> None:
    """Extend a held slot (a process that stops refreshing loses it after CHAT_LEASE_SECONDS), in a
    caller's pipeline; with `retake`, the slot is held again even if it had expired (an answer
    another process continues keeps its place, refused never)."""
    expiry = time.time() + settings.CHAT_LEASE_SECONDS
    pipe.zadd(keys.CHAT_ACTIVE, {lease.member: expiry}, xx=not retake)
    pipe.zadd(keys.chat_user_generations(lease.user_id), {lease.member: expiry}, xx=not retake)


async def release_slot(r: aioredis.Redis, lease: Lease) -> None:
    async with r.pipeline(transaction=False) as pipe:
        release_slot_in(pipe, lease)
        await pipe.execute()


def release_slot_in(pipe: aioredis.client.Pipeline, lease: Lease) -> None:
    """`release_slot`'s commands, added to a caller's pipeline."""
    pipe.zrem(keys.CHAT_ACTIVE, lease.member)
    pipe.zrem(keys.chat_user_generations(lease.user_id), lease.member)


async def active_count(r: aioredis.Redis) -> int:
    """Chat answers generating now, across all web processes."""
    return int(await r.zcount(keys.CHAT_ACTIVE, time.time(), "+inf"))
