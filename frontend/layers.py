"""The channel layer: channels-redis, made to outlive a Redis restart.

Every consumer waits on the layer for messages addressed to it. With the stock
layer, a lost Redis connection raises out of that wait and kills every open
WebSocket at once (close code 1011). Here the wait logs the failure and retries
with backoff, so sockets stay open, the answers in flight end with their own
clear errors, and messaging resumes when Redis is back.
"""

import asyncio
import logging

from channels_redis.core import RedisChannelLayer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)


class ReconnectingRedisChannelLayer(RedisChannelLayer):
    async def receive(self, channel: str) -> dict:
        delay = 0.5
        while True:
            try:
                return await super().receive(channel)
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                log.warning("channel layer lost Redis (%s); retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
