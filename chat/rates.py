"""Bounds on what one user or one socket may do, beside admission control's bounds on answers:

- frames per socket (CHAT_SOCKET_FRAMES_PER_MINUTE), counted by the socket itself: a socket lives
  in one process;
- open sockets per user (CHAT_MAX_SOCKETS_PER_USER), across web processes: leases in a Redis
  sorted set scored by expiry, refreshed while the socket is open, so a dead process's sockets
  free themselves (the same shape as admission's answer slots);
- changes to conversations per user (CHAT_CONVERSATION_CHANGES_PER_MINUTE): create, rename,
  delete, settings, counted in Redis across processes.

Past a bound the caller gets `busy` (httpkit.errors.busy) with its reason and a time to retry.
Windows are moving windows: the `limits` package's in Redis; a socket's own, in its memory (limits'
memory storage sweeps every window it holds, with a thread hop each, after each frame of any socket).
"""

import time
from collections import deque
from functools import cache

import redis.asyncio as aioredis
from django.conf import settings
from limits import RateLimitItemPerMinute
from limits.storage import RedisStorage
from limits.strategies import MovingWindowRateLimiter

import redisconn
from httpkit import errors
from redisconn import keys

_SOCKET_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 1 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 0
"""
SOCKET_LEASE_SECONDS = 60


def _retry_after(stats_reset: float) -> float:
    return max(1.0, stats_reset - time.time())


class FrameWindow:
    """One socket's frames in the last minute: the times of the last `limit` it let through."""

    def __init__(self, limit: int) -> None:
        self._times: deque[float] = deque(maxlen=limit)

    def check(self) -> None:
        """Count one frame; Refusal `busy` (socket_rate) past the per-minute bound, not counted."""
        now, times = time.monotonic(), self._times
        if len(times) == times.maxlen and (age := now - times[0]) < 60:
            raise errors.busy("socket_rate", max(1.0, 60 - age))
        times.append(now)


async def socket_open(r: aioredis.Redis, *, user_id: int, socket: str) -> None:
    """Hold one of the user's socket slots; Refusal `busy` (user_sockets) when all are held."""
    now = time.time()
    refused = await r.eval(
        _SOCKET_ACQUIRE,
        1,
        keys.chat_user_sockets(user_id),
        now,
        now + SOCKET_LEASE_SECONDS,
        socket,
        settings.CHAT_MAX_SOCKETS_PER_USER,
        SOCKET_LEASE_SECONDS + 1,
    )
    if refused:
        raise errors.busy("user_sockets", settings.CHAT_BUSY_RETRY_AFTER)


async def sockets_refresh(r: aioredis.Redis, sockets: list[tuple[int, str]], chunk: int = 1000) -> None:
    """Renew the leases of `sockets` (user id, socket), still held, and their users' sets, which
    would otherwise expire a lease after their last acquire: one pipeline for each `chunk`."""
    until = time.time() + SOCKET_LEASE_SECONDS
    for start in range(0, len(sockets), chunk):
        async with r.pipeline(transaction=False) as pipe:
            for user_id, socket in sockets[start : start + chunk]:
                key = keys.chat_user_sockets(user_id)
                pipe.zadd(key, {socket: until}, xx=True)
                pipe.expire(key, SOCKET_LEASE_SECONDS + 1)
            await pipe.execute()


async def socket_close(r: aioredis.Redis, *, user_id: int, socket: str) -> None:
    await r.zrem(keys.chat_user_sockets(user_id), socket)


@cache
def _change_limiter() -> MovingWindowRateLimiter:
    return MovingWindowRateLimiter(RedisStorage(redisconn.limits_storage_uri(asynchronous=False)))


def change_check(*, user_id: int) -> None:
    """Count one change to the user's conversations; Refusal `busy` (user_changes) past the bound."""
    item = RateLimitItemPerMinute(settings.CHAT_CONVERSATION_CHANGES_PER_MINUTE)
    limiter = _change_limiter()
    if not limiter.hit(item, keys.CHAT_CHANGES_LIMIT, str(user_id)):
        stats = limiter.get_window_stats(item, keys.CHAT_CHANGES_LIMIT, str(user_id))
        raise errors.busy("user_changes", _retry_after(stats.reset_time))
