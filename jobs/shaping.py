"""Load shaping: how many bulk requests a job keeps in flight, decided again every tick.

Engine priority alone does not protect chat on a small machine: a bigger batch
slows every step, chat's included. So the job system yields on its own:

- chat is active (the web tier's `chat:generations:active`) or the engine holds
  requests that are not bulk (running + waiting beyond every runner's in-flight
  bulk requests): drop at once to BULK_CONCURRENCY_WHILE_CHAT, and preempt the
  newest bulk requests above it;
- the engine queues requests (waiting > 0) with no chat: one fewer;
- quiet for BULK_QUIET_SECONDS: twice as many, up to BULK_CONCURRENCY (or its kind's ceiling).

It starts at the minimum and grows, so a job that starts beside busy chat never
floods the engine first; doubling, it reaches a batch's 64 in six ticks.
"""

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio as aioredis

from inference.client import EngineError, EngineLoad, EngineProbe
from redisconn import keys

# A runner's in-flight count outlives it by this long at most (it refreshes every tick).
BULK_INFLIGHT_TTL = 5


@dataclass(frozen=True)
class Signal:
    chat_active: int
    running: int
    waiting: int
    bulk_inflight: int
    # False when the engine figures are the last ones read, not new ones.
    fresh: bool = True

    @property
    def others(self) -> int:
        """Requests in the engine that no bulk runner sent: chat, or any other client."""
        return max(0, self.running + self.waiting - self.bulk_inflight)


class Shaper:
    def __init__(
        self,
        *,
        maximum: int,
        minimum: int,
        while_chat: int,
        quiet_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.maximum = maximum
        self.minimum = minimum
        self.while_chat = while_chat
        self.quiet_seconds = quiet_seconds
        self._clock = clock
        self.limit = minimum
        self.chat_busy = False
        self._busy_at = -float("inf")
        # Engine metrics lag a step behind our own bookkeeping; foreign load must show twice.
        self._others_seen = 0

    def update(self, signal: Signal | None) -> int:
        """The new in-flight limit; `None` means the signals could not be read: be careful."""
        now = self._clock()
        if signal is None:
            self.chat_busy = False
            self.limit = self.minimum
            return self.limit
        if signal.fresh:
            self._others_seen = self._others_seen + 1 if signal.others > 0 else 0
        self.chat_busy = signal.chat_active > 0 or self._others_seen >= 2
        if self.chat_busy:
            self._busy_at = now
            self.limit = self.while_chat
        elif signal.waiting > 0 and signal.fresh:
            self.limit = max(self.minimum, self.limit - 1)
        elif self._others_seen == 0 and now - self._busy_at >= self.quiet_seconds:
            self.limit = min(self.maximum, max(self.limit * 2, self.minimum))
        return self.limit


async def chat_active(r: aioredis.Redis) -> int:
    """Chat answers streaming now: a sorted set of leases scored by expiry, or a counter."""
    kind = await r.type(keys.CHAT_ACTIVE)
    kind = kind.decode() if isinstance(kind, bytes) else kind
    if kind == "zset":
        return int(await r.zcount(keys.CHAT_ACTIVE, time.time(), "+inf"))
    if kind == "string":
        return max(0, int(await r.get(keys.CHAT_ACTIVE) or 0))
    return 0


class LoadProbe:
    """Reads the signals and publishes this runner's own in-flight count for the others."""

    # The engine renders /metrics in the process that also serves chat requests, so it is
    # read about once a second; the Redis signals are cheap and read every tick.
    METRICS_EVERY = 1.0

    def __init__(
        self, r: aioredis.Redis, engine: EngineProbe, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._redis = r
        self._engine = engine
        self._clock = clock
        self._key = keys.BULK_INFLIGHT_PREFIX + uuid.uuid4().hex
        self._load: EngineLoad | None = None
        self._load_bulk = 0
        self._load_at = -float("inf")

    async def read(self, inflight: int) -> Signal | None:
        await self._redis.set(self._key, inflight, ex=BULK_INFLIGHT_TTL)
        pattern = keys.BULK_INFLIGHT_PREFIX + "*"
        runners = [key async for key in self._redis.scan_iter(match=pattern, count=100)]
        values = await self._redis.mget(runners) if runners else []
        bulk = sum(int(v) for v in values if v is not None)
        active = await chat_active(self._redis)
        fresh = self._clock() - self._load_at >= self.METRICS_EVERY
        if fresh:
            self._load_at = self._clock()
            self._load_bulk = bulk
            try:
                self._load = await self._engine.load()
            except EngineError:
                self._load = None
        if self._load is None:
            return None
        return Signal(
            chat_active=active,
            running=self._load.running,
            waiting=self._load.waiting,
            bulk_inflight=self._load_bulk,
            fresh=fresh,
        )

    async def close(self) -> None:
        await self._redis.delete(self._key)
