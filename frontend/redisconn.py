"""The web tier's asyncio Redis client: one per event loop, since its connections
belong to the loop that opened them."""

import asyncio
import weakref

import redis.asyncio as aioredis
from django.conf import settings

_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis]" = weakref.WeakKeyDictionary()


def redis_client() -> aioredis.Redis:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        # Short timeouts: a Redis outage must surface as an error, not a hang. The
        # stream reader's blocking XREAD sets its own longer read timeout.
        client = aioredis.Redis.from_url(
            settings.REDIS_URL,
            socket_connect_timeout=2,
            socket_timeout=settings.CHAT_STREAM_BLOCK_SECONDS + 5,
            retry_on_timeout=False,
            health_check_interval=30,
        )
        _clients[loop] = client
    return client
