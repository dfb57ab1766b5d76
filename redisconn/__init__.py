"""Redis, as every part of the product reaches it: the connections, made here with one
set of timeouts, and the key names (redisconn.keys), spelled once for the app that
writes a key and the one that reads it.

A Redis outage surfaces as a RedisError within seconds, never as a hang: connections
time out after CONNECT_TIMEOUT, and a command after the longest blocking read the
product makes (a stream follower's XREAD, CHAT_STREAM_BLOCK_SECONDS) plus a margin.
"""

import asyncio
from functools import cache

import redis
import redis.asyncio as aioredis
from django.conf import settings
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from eventloops import PerLoop

CONNECT_TIMEOUT = 2.0


def _options() -> dict:
    return {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": settings.CHAT_STREAM_BLOCK_SECONDS + 5,
        "retry_on_timeout": False,
        "health_check_interval": 30,
    }


def new_client() -> aioredis.Redis:
    """An asyncio client of its own, for work that runs in an event loop of its own and
    ends with it (a bulk job's run); the caller closes it."""
    return aioredis.Redis.from_url(settings.REDIS_URL, **_options())


def lone_connection() -> aioredis.Connection:
    """One connection, not yet made, outside any client: nothing retries a command on it or makes
    it again unseen (a pool checks its connections and quietly makes a broken one again), so its
    owner knows when Redis may have restarted between two commands: its connect callbacks run.
    For a writer that must know that; it sends commands and reads replies itself."""
    pool = aioredis.ConnectionPool.from_url(settings.REDIS_URL, retry=Retry(NoBackoff(), 0), **_options())
    return pool.make_connection()


# The asyncio client of the running event loop, `redisconn.client()`: its connections belong to that loop.
client = PerLoop(new_client)


def sync_client() -> redis.Redis:
    """The process's synchronous client (thread-safe), for views, tasks and checks."""
    return _sync_client(settings.REDIS_URL)


@cache
def _sync_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, **_options())


def limits_storage_uri(*, asynchronous: bool) -> str:
    """REDIS_URL as the `limits` package spells it, for its sync or asyncio storage."""
    return settings.REDIS_URL.replace("redis://", "async+redis://", 1) if asynchronous else settings.REDIS_URL


def raise_if_cancelled() -> None:
    """Raise the cancellation that a Redis command swallowed.

    redis-py's asyncio client can swallow a CancelledError that lands while a command runs
    (redis/redis-py#2028 and #2551; checked here with 6.4: a task cancelled during XADD
    returned normally 199 times in 200). A loop that must end when its task is cancelled (an
    answer being stopped, a follower whose socket closed, a heartbeat) calls this after each
    command, so a stop is never lost."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
