"""The shaper yields the engine to chat at once and takes it back slowly when chat is quiet."""

import pytest
import redis.asyncio as aioredis
from django.conf import settings

from jobs.runner import new_shaper
from jobs.shaping import Shaper, Signal, chat_active
from redisconn.keys import CHAT_ACTIVE


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def quiet(bulk: int = 0) -> Signal:
    return Signal(chat_active=0, running=bulk, waiting=0, bulk_inflight=bulk)


def make(clock) -> Shaper:
    return Shaper(maximum=8, minimum=1, while_chat=1, quiet_seconds=3.0, clock=clock)


def test_it_starts_at_the_minimum_and_doubles_per_quiet_tick_up_to_the_maximum():
    clock = Clock()
    shaper = make(clock)
    limits = [shaper.update(quiet()) for _ in range(5)]
    assert limits == [2, 4, 8, 8, 8]


def test_it_drops_to_the_chat_level_at_once_when_chat_is_active_and_waits_for_quiet():
    clock = Clock()
    shaper = make(clock)
    for _ in range(8):
        shaper.update(quiet())
    assert shaper.update(Signal(chat_active=1, running=9, waiting=0, bulk_inflight=8)) == 1
    assert shaper.chat_busy
    clock.now += 2.9
    assert shaper.update(quiet(1)) == 1 and not shaper.chat_busy
    clock.now += 0.2
    assert shaper.update(quiet(1)) == 2


def test_it_treats_requests_it_did_not_send_as_chat_only_when_seen_twice():
    clock = Clock()
    shaper = make(clock)
    for _ in range(2):
        shaper.update(quiet(4))
    foreign = Signal(chat_active=0, running=5, waiting=0, bulk_inflight=4)
    assert shaper.update(foreign) == 4 and not shaper.chat_busy  # one sample may be metrics lag: hold
    assert shaper.update(foreign) == 1 and shaper.chat_busy


def test_it_backs_off_by_one_while_the_engine_queues_requests():
    clock = Clock()
    shaper = make(clock)
    for _ in range(8):
        shaper.update(quiet())
    queued = Signal(chat_active=0, running=6, waiting=2, bulk_inflight=8)
    assert [shaper.update(queued) for _ in range(3)] == [7, 6, 5]


def test_a_batch_grows_to_its_own_ceiling_and_still_drops_at_once_when_chat_starts(settings):
    settings.BULK_CONCURRENCY, settings.BATCH_CONCURRENCY = 8, 64
    settings.BULK_CONCURRENCY_MIN, settings.BULK_CONCURRENCY_WHILE_CHAT = 1, 1
    batch, summary = new_shaper("batch"), new_shaper("summary")
    for _ in range(100):
        batch.update(quiet())
        summary.update(quiet())
    assert (batch.limit, summary.limit) == (64, 8)
    chat = Signal(chat_active=1, running=65, waiting=0, bulk_inflight=64)
    assert batch.update(chat) == 1 and batch.chat_busy


def test_it_holds_the_minimum_when_the_signals_cannot_be_read():
    shaper = make(Clock())
    for _ in range(5):
        shaper.update(quiet())
    assert shaper.update(None) == 1


@pytest.mark.parametrize("value, expected", [(None, 0), ("3", 3), ("zset", 2)])
async def test_it_reads_the_chat_count_as_a_counter_or_a_lease_set(value, expected):
    import time

    r = aioredis.Redis.from_url(settings.REDIS_URL)
    await r.delete(CHAT_ACTIVE)
    if value == "zset":
        now = time.time()
        await r.zadd(CHAT_ACTIVE, {"a": now + 60, "b": now + 60, "expired": now - 1})
    elif value is not None:
        await r.set(CHAT_ACTIVE, value)
    try:
        assert await chat_active(r) == expected
    finally:
        await r.delete(CHAT_ACTIVE)
        await r.aclose()


def test_it_counts_foreign_requests_and_queueing_only_on_fresh_engine_figures():
    clock = Clock()
    shaper = make(clock)
    for _ in range(2):
        shaper.update(quiet(4))
    foreign = Signal(chat_active=0, running=5, waiting=0, bulk_inflight=4)
    stale = Signal(chat_active=0, running=5, waiting=0, bulk_inflight=4, fresh=False)
    assert shaper.update(foreign) == 4
    assert shaper.update(stale) == 4 and not shaper.chat_busy
    queued = Signal(chat_active=0, running=6, waiting=2, bulk_inflight=8, fresh=False)
    assert shaper.update(queued) == 4, "an old queue reading is not acted on again"
