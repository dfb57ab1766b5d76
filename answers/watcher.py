"""What runs beside an answer while it generates: its heartbeat, its admission lease, and
its ear for stops from other processes.

The heartbeat says the answer's process is alive (answers.ownership: another process takes over
an answer whose heartbeat is stale, answers.takeover); the lease keeps its admission slot. A stop from another
web process arrives on the answer's pub/sub channel, or, when it was sent before the process
listened, as a key that is read once it listens.

One subscription per event loop hears the stops of all the answers the loop generates (a
pattern over their channels), held while any answer runs: a subscription of each answer's
own cost a Redis connection of its own, opened and closed with every answer. Losing Redis
does not lose a stop: the subscription is made again, and then the keys of the answers it
serves are read.
"""

import asyncio
import logging
from collections.abc import Callable
from functools import partial

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

import redisconn
from answers import admission, ownership
from eventloops import PerLoop
from redisconn import keys

log = logging.getLogger(__name__)

# How long an answer waits for its process's subscription before it goes on without it (its
# stops are then read from their keys once the subscription is made).
SUBSCRIBE_WAIT_SECONDS = redisconn.CONNECT_TIMEOUT
# A subscription that hears nothing, not even the reply to its own ping, for this long is
# taken for lost: a connection cut without a reset would otherwise read as a quiet one.
PING_SECONDS = 10.0


class _Stops:
    """The stops of the answers of one event loop: whom to call for each, and the subscription
    that hears them, up while there is anyone to call."""

    def __init__(self) -> None:
        self._stoppers: dict[int, Callable[[], None]] = {}
        self._listener: asyncio.Task | None = None
        self._subscribed: asyncio.Future | None = None

    async def add(self, r: aioredis.Redis, message_id: int, stop: Callable[[], None]) -> None:
        """Call `stop` for each stop of `message_id` published from once this returns.
        TimeoutError when the subscription is not up within SUBSCRIBE_WAIT_SECONDS: stops
        sent meanwhile are then read from their keys once it is."""
        self._stoppers[message_id] = stop
        if self._listener is None:
            subscribed = self._subscribed = asyncio.get_running_loop().create_future()
            # Read here as well, so an outcome no answer waited for is never reported as unread.
            subscribed.add_done_callback(lambda done: done.cancelled() or done.exception())
            self._listener = asyncio.create_task(self._listen(r, subscribed), name="chat-stop-listener")
            self._listener.add_done_callback(lambda task: self._ended(task, subscribed))
        await asyncio.wait_for(asyncio.shield(self._subscribed), SUBSCRIBE_WAIT_SECONDS)

    def discard(self, message_id: int, stop: Callable[[], None]) -> None:
        # Only its own entry: an id handed out again may already belong to a newer answer.
        if self._stoppers.get(message_id) is stop:
            del self._stoppers[message_id]
        if not self._stoppers and self._listener is not None:
            self._listener.cancel()
            self._listener = self._subscribed = None

    def _ended(self, task: asyncio.Task, subscribed: asyncio.Future) -> None:
        if not subscribed.done():  # answers still waiting go on as if it had timed out
            subscribed.set_exception(TimeoutError("the subscription ended"))
        if self._listener is task:  # it ended on its own, not cancelled by discard
            self._listener = self._subscribed = None
        if not task.cancelled() and task.exception() is not None:
            log.error("stop requests: the subscription ended", exc_info=task.exception())

    async def _listen(self, r: aioredis.Redis, subscribed: asyncio.Future) -> None:
        delay = 0.5
        while True:
            try:
                async with r.pubsub() as pubsub:
                    await self._subscribe(pubsub)
                    if not subscribed.done():
                        subscribed.set_result(None)
                    elif delay > 0.5:
                        log.info("stop requests: subscribed again")
                    # Stops sent before it was up (by answers that did not wait, or while it
                    # was lost) were left as keys.
                    await self._requested_meanwhile(r)
                    delay = 0.5
                    await self._hear(pubsub)
            except (RedisError, OSError) as exc:
                redisconn.raise_if_cancelled()
                log.warning("stop requests: lost Redis (%s); subscribing again in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def _subscribe(self, pubsub: aioredis.client.PubSub) -> None:
        # Up once Redis confirms it, not once it is sent: a stop published before then is not heard.
        await pubsub.psubscribe(keys.CHAT_STOP_CHANNELS)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SUBSCRIBE_WAIT_SECONDS
        while (left := deadline - loop.time()) > 0:
            message = await pubsub.get_message(timeout=left)
            redisconn.raise_if_cancelled()
            if message is not None and message["type"] == "psubscribe":
                return
        raise RedisConnectionError("no confirmation of the subscription")

    async def _hear(self, pubsub: aioredis.client.PubSub) -> None:
        loop = asyncio.get_running_loop()
        heard = pinged = loop.time()
        while True:
            # A bounded wait: redis-py can swallow the cancellation that discard sends.
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            redisconn.raise_if_cancelled()
            now = loop.time()
            if message is not None:
                heard = now
                if message["type"] == "pmessage":
                    self._deliver(message["channel"])
            if now - heard > 2 * PING_SECONDS:
                raise RedisConnectionError(f"nothing heard for {now - heard:.0f}s")
            if now - pinged > PING_SECONDS:
                await pubsub.ping()
                pinged = now

    def _deliver(self, channel: bytes | str) -> None:
        name = channel.decode() if isinstance(channel, bytes) else str(channel)
        try:
            message_id = int(name.rsplit(":", 1)[1])
        except (IndexError, ValueError):
            return
        stop = self._stoppers.get(message_id)
        if stop is not None:
            stop()

    async def _requested_meanwhile(self, r: aioredis.Redis) -> None:
        waiting = list(self._stoppers)
        if not waiting:
            return
        requested = await r.mget([keys.chat_stop_requested(message_id) for message_id in waiting])
        for message_id, value in zip(waiting, requested, strict=True):
            if value is not None and (stop := self._stoppers.get(message_id)) is not None:
                stop()


# The stops of the running loop's answers: one listener on the channel for them all.
_stops_of = PerLoop(_Stops)


async def watch(
    r: aioredis.Redis,
    owner: ownership.Claim,
    lease: admission.Lease | None,
    stop: Callable[[str], None],
    so_far: Callable[[], dict] | None = None,
) -> None:
    """Keep the heartbeat and the lease fresh until cancelled; call `stop("user")` when asked
    to, `stop("superseded")` when another process owns the answer now. A Redis that is away
    is tried again at every beat: the answer goes on meanwhile (answers.run). Each beat keeps
    `so_far()` in the answer's owner record (answers.ownership.beat)."""
    message_id = owner.answer
    beat = settings.CHAT_HEARTBEAT_SECONDS
    stops = _stops_of()
    asked = partial(stop, "user")
    try:
        try:
            await stops.add(r, message_id, asked)
        except TimeoutError:
            log.warning("answer %s: stops from other processes wait for Redis", message_id)
        first = True
        while True:
            try:
                # The lease and (the first time) a stop sent before: one round trip; the heartbeat,
                # a script that checks the answer is still this process's, another.
                async with r.pipeline(transaction=False) as pipe:
                    if first:
                        pipe.exists(keys.chat_stop_requested(message_id))
                    if lease is not None:
                        admission.refresh_in(pipe, lease)
                    replies = await pipe.execute()
                owned = await ownership.beat(r, owner, so_far() if so_far is not None else None)
            except (RedisError, OSError) as exc:
                redisconn.raise_if_cancelled()
                log.warning(
                    "answer %s: heartbeat lost its Redis connection (%s); trying again", message_id, exc
                )
                # Soon: once Redis is back, a late heartbeat must not read as a dead process.
                await asyncio.sleep(min(beat, 0.5))
                continue
            else:
                # Cancelled when the answer ends: a swallowed cancellation would keep the
                # heartbeat and the admission slot alive after it.
                redisconn.raise_if_cancelled()
                if not owned:
                    stop("superseded")
                    return
                if first and replies and replies[0]:
                    asked()
                    return
                first = False
            await asyncio.sleep(beat)
    finally:
        stops.discard(message_id, asked)


async def release(
    r: aioredis.Redis, owner: ownership.Claim, lease: admission.Lease | None, *, handover: bool = False
) -> bool:
    """Give back the answer's slot and stop request, and leave it: ended, or (`handover`) for
    another process to continue at once; idempotent. False when Redis could not be reached."""
    try:
        async with r.pipeline(transaction=False) as pipe:
            pipe.delete(keys.chat_stop_requested(owner.answer))
            if lease is not None:
                admission.release_in(pipe, lease)
            await pipe.execute()
        await ownership.leave(r, owner, handover=handover)
    except RedisError:
        log.warning("answer %s: could not release its slot; its lease expires", owner.answer)
        return False
    return True
