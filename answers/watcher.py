"""What runs beside an answer while it generates: its heartbeat, its admission lease, and
its ear for stops from other processes.

The heartbeat says the answer's process is alive (answers.ownership: another process takes over
an answer whose heartbeat is stale, answers.takeover); the lease keeps its admission slot. A stop from another
web process arrives on the answer's pub/sub channel, or, when it was sent before the process
listened, as a key that is read once it listens.

One subscription per event loop hears the stops of all the answers the loop generates (a
pattern over their channels, redisconn.subscription), held while any answer runs. Losing Redis
does not lose a stop: the subscription is made again, and then the keys of the answers it
serves are read.
"""

import asyncio
import logging
from collections.abc import Callable
from functools import partial

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import RedisError

import redisconn
from answers import admission, ownership
from eventloops import PerLoop
from redisconn import keys
from redisconn.subscription import Subscription

log = logging.getLogger(__name__)


class _Stops:
    """The stops of the answers of one event loop: whom to call for each, and the subscription
    that hears them (redisconn.subscription), up while there is anyone to call."""

    def __init__(self) -> None:
        self._stoppers: dict[int, Callable[[], None]] = {}
        self._subscription = Subscription(
            "stop requests",
            keys.CHAT_STOP_CHANNELS,
            self._deliver,
            pattern=True,
            # Stops sent before it was up (by answers that did not wait, or while it was lost)
            # were left as keys.
            resubscribed=self._requested_meanwhile,
        )

    async def add(self, r: aioredis.Redis, message_id: int, stop: Callable[[], None]) -> None:
        """Call `stop` for each stop of `message_id` published from once this returns.
        TimeoutError when the subscription is not up within SUBSCRIBE_WAIT_SECONDS: stops
        sent meanwhile are then read from their keys once it is."""
        self._stoppers[message_id] = stop
        await self._subscription.wait(r)

    def discard(self, message_id: int, stop: Callable[[], None]) -> None:
        # Only its own entry: an id handed out again may already belong to a newer answer.
        if self._stoppers.get(message_id) is stop:
            del self._stoppers[message_id]
        if not self._stoppers:
            self._subscription.stop()

    def _deliver(self, channel: str, data: bytes) -> None:
        try:
            message_id = int(channel.rsplit(":", 1)[1])
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
                    # A stop sent before this process listened. The beats go on while the answer
                    # ends: its storing may outlast CHAT_TAKEOVER_AFTER_SECONDS on a slow database,
                    # and an answer that stopped beating would be claimed and continued elsewhere.
                    asked()
                first = False
            await asyncio.sleep(beat)
    finally:
        stops.discard(message_id, asked)


async def release_answer(
    r: aioredis.Redis, owner: ownership.Claim, lease: admission.Lease | None, *, handover: bool = False
) -> bool:
    """Give back the answer's slot and stop request, and leave it: ended, or (`handover`) for
    another process to continue at once; idempotent. False when Redis could not be reached."""
    try:
        async with r.pipeline(transaction=False) as pipe:
            pipe.delete(keys.chat_stop_requested(owner.answer))
            if lease is not None:
                admission.release_slot_in(pipe, lease)
            await pipe.execute()
        await ownership.leave(r, owner, handover=handover)
    except RedisError:
        log.warning("answer %s: could not release its slot; its lease expires", owner.answer)
        return False
    return True
