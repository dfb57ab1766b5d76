"""What runs beside an answer while it generates: its heartbeat, its admission lease, and
its ear for stops from other processes.

The heartbeat key says the answer's process is alive (the sweeper, frontend.tasks, marks
answers without one interrupted); the lease keeps its admission slot. A stop from
another web process arrives on the answer's pub/sub channel, or, when it was sent before
the watcher listened, as a key the watcher reads once it has subscribed.
"""

import logging
import time
from collections.abc import Callable

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import RedisError

import redisconn
from frontend import admission
from redisconn import keys

log = logging.getLogger(__name__)


async def watch(
    r: aioredis.Redis, message_id: int, lease: admission.Lease | None, stop: Callable[[], None]
) -> None:
    """Keep the heartbeat and the lease fresh until cancelled; call `stop` when asked to."""
    beat = settings.CHAT_HEARTBEAT_SECONDS
    try:
        async with r.pubsub() as pubsub:
            await pubsub.subscribe(keys.chat_stop_channel(message_id))
            if await r.exists(keys.chat_stop_requested(message_id)):
                stop()
                return
            while True:
                await r.set(keys.chat_alive(message_id), 1, ex=int(beat * 3))
                if lease is not None:
                    await admission.refresh(r, lease)
                redisconn.raise_if_cancelled()
                deadline = time.monotonic() + beat
                while (left := deadline - time.monotonic()) > 0:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
                    # Cancelled when the answer ends: a swallowed cancellation would keep the
                    # heartbeat and the admission slot alive after it.
                    redisconn.raise_if_cancelled()
                    if message is not None:
                        stop()
                        return
    except RedisError:
        log.warning("answer %s: heartbeat lost its Redis connection", message_id)


async def release(r: aioredis.Redis, message_id: int, lease: admission.Lease | None) -> None:
    """Give back the answer's heartbeat, stop request and slot; idempotent."""
    try:
        await r.delete(keys.chat_alive(message_id), keys.chat_stop_requested(message_id))
        if lease is not None:
            await admission.release(r, lease)
    except RedisError:
        log.warning("answer %s: could not release its slot; its lease expires", message_id)
