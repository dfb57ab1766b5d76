"""One pub/sub subscription of an event loop, held while anyone listens to it.

A subscription of each listener would cost a Redis connection of its own, opened and closed with
it; one for the loop serves them all (the stops of every answer the loop generates,
answers.watcher; the logouts and user changes of every chat socket the loop holds,
chat.sockets). Losing Redis does not end it: it is made again, with backoff, and is up again
once Redis confirms it, when `resubscribed` runs (to read what was sent meanwhile).
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

import redisconn

log = logging.getLogger(__name__)

# How long a listener waits for the subscription to be confirmed before it goes on without it.
SUBSCRIBE_WAIT_SECONDS = redisconn.CONNECT_TIMEOUT
# A subscription that hears nothing, not even the reply to its own ping, for this long is taken
# for lost: a connection cut without a reset would otherwise read as a quiet one.
PING_SECONDS = 10.0


class Subscription:
    """`deliver(channel, data)` for each message published on `channel` (or, with `pattern`, on
    every channel that matches it), from `start` until `stop`."""

    def __init__(
        self,
        name: str,
        channel: str,
        deliver: Callable[[str, bytes], None],
        *,
        pattern: bool = False,
        resubscribed: Callable[[aioredis.Redis], Awaitable[None]] | None = None,
    ) -> None:
        self.name = name
        self._channel = channel
        self._deliver = deliver
        self._pattern = pattern
        self._resubscribed = resubscribed
        self._listener: asyncio.Task | None = None
        self._subscribed: asyncio.Future | None = None

    def start(self, r: aioredis.Redis) -> asyncio.Future:
        """Listen, if not yet: a future done once the subscription is confirmed (or failed: it
        then goes on trying, and `resubscribed` runs once it is up)."""
        if self._listener is None:
            subscribed = self._subscribed = asyncio.get_running_loop().create_future()
            # Read here as well, so an outcome no one waited for is never reported as unread.
            subscribed.add_done_callback(lambda done: done.cancelled() or done.exception())
            self._listener = asyncio.create_task(self._listen(r, subscribed), name=self.name)
            self._listener.add_done_callback(lambda task: self._ended(task, subscribed))
        return self._subscribed

    async def wait(self, r: aioredis.Redis) -> None:
        """`start`, and wait up to SUBSCRIBE_WAIT_SECONDS for it: TimeoutError past that."""
        await asyncio.wait_for(asyncio.shield(self.start(r)), SUBSCRIBE_WAIT_SECONDS)

    def _hand_over(self, channel: bytes | str, data: bytes) -> None:
        try:
            self._deliver(channel.decode() if isinstance(channel, bytes) else str(channel), data)
        except Exception:  # one message's failure is not the subscription's
            log.exception("%s: a message could not be delivered", self.name)

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            self._listener = self._subscribed = None

    def _ended(self, task: asyncio.Task, subscribed: asyncio.Future) -> None:
        if not subscribed.done():  # listeners still waiting go on as if it had timed out
            subscribed.set_exception(TimeoutError("the subscription ended"))
        if self._listener is task:  # it ended on its own, not stopped
            self._listener = self._subscribed = None
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: the subscription ended", self.name, exc_info=task.exception())

    async def _listen(self, r: aioredis.Redis, subscribed: asyncio.Future) -> None:
        delay = 0.5
        while True:
            try:
                async with r.pubsub() as pubsub:
                    await self._subscribe(pubsub)
                    if not subscribed.done():
                        subscribed.set_result(None)
                    elif delay > 0.5:
                        log.info("%s: subscribed again", self.name)
                    if self._resubscribed is not None:
                        await self._resubscribed(r)
                    delay = 0.5
                    await self._hear(pubsub)
            except (RedisError, OSError) as exc:
                redisconn.raise_if_cancelled()
                log.warning("%s: lost Redis (%s); subscribing again in %.1fs", self.name, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def _subscribe(self, pubsub: aioredis.client.PubSub) -> None:
        # Up once Redis confirms it, not once it is sent: a message published before then is not heard.
        if self._pattern:
            await pubsub.psubscribe(self._channel)
        else:
            await pubsub.subscribe(self._channel)
        confirmation = "psubscribe" if self._pattern else "subscribe"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SUBSCRIBE_WAIT_SECONDS
        while (left := deadline - loop.time()) > 0:
            message = await pubsub.get_message(timeout=left)
            redisconn.raise_if_cancelled()
            if message is not None and message["type"] == confirmation:
                return
        raise RedisConnectionError("no confirmation of the subscription")

    async def _hear(self, pubsub: aioredis.client.PubSub) -> None:
        loop = asyncio.get_running_loop()
        heard = pinged = loop.time()
        while True:
            # A bounded wait: redis-py can swallow the cancellation that stop sends.
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            redisconn.raise_if_cancelled()
            now = loop.time()
            if message is not None:
                heard = now
                if message["type"] in ("message", "pmessage"):
                    self._hand_over(message["channel"], message["data"])
            if now - heard > 2 * PING_SECONDS:
                raise RedisConnectionError(f"nothing heard for {now - heard:.0f}s")
            if now - pinged > PING_SECONDS:
                await pubsub.ping()
                pinged = now
