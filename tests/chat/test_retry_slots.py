"""A storm of refused clients comes back no faster than the web process takes them (httpkit.retryslots):
each refusal is told a slot of its own at the rate the process was measured to take work, so a
socket refused once is not refused again."""

import asyncio
import json
import random
from collections import Counter

from chat.protocol import refused
from httpkit.pending import TRY_AGAIN_LATER, PendingBound
from httpkit.retryslots import RetrySlots, SharedRate

STEP = 0.01  # the simulation's tick, in virtual seconds


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_slots_follow_one_another_at_a_share_of_the_rate():
    clock = Clock()
    slots = RetrySlots(first=2.0, rate=10.0, share=0.5, clock=clock)
    assert [round(slots.take(), 3) for _ in range(3)] == [2.0, 2.2, 2.4]
    clock.now = 10.0  # the storm has passed: the next refusal waits `first` again
    assert slots.take() == 2.0


def test_the_rate_is_measured_while_saturated_and_a_lull_does_not_count():
    clock = Clock()
    slots = RetrySlots(first=2.0, rate=1000.0, clock=clock)
    for _ in range(200):
        clock.now += 0.01
        slots.left(saturated=True)
    assert 99 < slots.rate < 101
    clock.now += 60  # idle for a minute, then saturated again
    slots.left(saturated=False)
    slots.left(saturated=True)
    clock.now += 0.01
    slots.left(saturated=True)
    assert 99 < slots.rate < 101, "a lull was taken for the process's pace"


def test_no_slot_comes_before_the_work_already_taken_has_left():
    slots = RetrySlots(first=2.0, rate=10.0, clock=Clock())
    assert slots.take(pending=64) == 6.4  # 64 pieces at 10 a second: the bound is full until then


def test_two_pieces_leaving_in_one_instant_do_not_make_the_process_look_infinitely_fast():
    clock = Clock()
    slots = RetrySlots(first=2.0, rate=100.0, clock=clock)
    slots.left(saturated=True)
    slots.left(saturated=True)  # the same instant
    assert slots.rate < 200
    for _ in range(24):  # and a second of measurements outweighs the guess
        clock.now += 0.05
        slots.left(saturated=True)
    assert slots.rate < 25


def test_a_burst_of_pieces_leaving_after_a_stall_is_measured_with_the_stall():
    """Pieces leave a saturated process in bursts: twenty in a millisecond after a 200 ms stall is
    100 a second, not the 20,000 a second the gaps inside the burst say."""
    clock = Clock()
    slots = RetrySlots(first=2.0, rate=100.0, clock=clock)
    for _ in range(10):
        clock.now += 0.2
        for _ in range(20):
            clock.now += 0.00005
            slots.left(saturated=True)
    assert 80 < slots.rate < 120


def test_work_done_alone_measures_the_rate_of_a_process_that_is_not_saturated():
    slots = RetrySlots(first=2.0, rate=1000.0, clock=Clock())
    for _ in range(100):
        slots.left(saturated=False, alone=0.02)  # a handshake took 20 ms with nothing else pending
    assert 49 < slots.rate < 51


class Server:
    """A web process's inner application that takes `capacity` handshakes a virtual second, one by
    one, as the simulation lets it: each takes 1 / `capacity` at least, alone or not."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.waiting: list[tuple[float, asyncio.Future]] = []

    async def __call__(self, scope, receive, send):
        await receive()
        turn = asyncio.get_running_loop().create_future()
        self.waiting.append((self.clock(), turn))
        await turn
        await send({"type": "websocket.accept"})


async def handshake(app) -> float | None:
    """One try: None when accepted, else the `retry_after` the refusal said."""
    sent = []

    async def receive():
        return {"type": "websocket.connect"}

    async def send(message):
        sent.append(message)

    await app({"type": "websocket", "path": "/ws/chat/", "headers": []}, receive, send)
    if sent[-1] != {"type": "websocket.close", "code": TRY_AGAIN_LATER}:
        return None
    return json.loads(sent[1]["text"])["retry_after"]


async def settle():
    for _ in range(3):
        await asyncio.sleep(0)


async def storm(
    *, clients: int, capacity: float, limit: int, rate_guess: float, fleet: float | None = None
) -> Counter:
    """`clients` sockets cut at once come back within half a second (the page's jitter) to a process
    that takes `capacity` handshakes a second; each refused one returns when it was told to. The
    count of refusals each socket met. `fleet`: the rate the fleet measured before, kept for the
    process to read as it starts."""
    clock = Clock()
    server = Server(clock)
    slots = RetrySlots(first=2.0, rate=rate_guess, clock=clock)
    kept = []

    async def read():
        return fleet

    async def write(rate):
        kept.append(rate)

    app = PendingBound(
        server,
        limit=limit,
        retry_slots=slots,
        socket_frame=refused,
        json_body=lambda path, refusal: {},
        shared_rate=SharedRate(slots, read=read, write=write, every=1.0),
    )
    draw = random.Random(7)
    due = {client: draw.uniform(0, 0.5) for client in range(clients)}
    refusals, tries, opened, budget = Counter(), {}, set(), 0.0
    while len(opened) < clients:
        for client in [client for client, at in due.items() if at <= clock.now]:
            del due[client]
            tries[client] = asyncio.ensure_future(handshake(app))
        await settle()
        budget = min(budget + capacity * STEP, 1 + capacity * STEP)
        while budget >= 1 and server.waiting and server.waiting[0][0] <= clock.now + STEP / 2 - 1 / capacity:
            server.waiting.pop(0)[1].set_result(None)
            budget -= 1
        await settle()
        for client, attempt in [(client, attempt) for client, attempt in tries.items() if attempt.done()]:
            del tries[client]
            wait = attempt.result()
            if wait is None:
                opened.add(client)
            else:
                refusals[client] += 1
                due[client] = clock.now + wait
        clock.now += STEP
        assert clock.now < 600, "the storm never settled"
    storm.kept = kept  # what the process measured, kept for the next one
    return refusals


async def test_a_reconnect_storm_past_the_process_rate_is_refused_at_most_once_a_socket():
    # 1,000 sockets against 100 handshakes a second, the first guess of the rate 1.5 times too high:
    # a window of 2-8 s would bring them back at about 150 a second, and refuse many again.
    refusals = await storm(clients=1000, capacity=100, limit=16, rate_guess=150)
    assert sum(refusals.values()) > 800, "the storm did not reach the bound"
    assert max(refusals.values()) == 1, f"sockets by refusals: {sorted(Counter(refusals.values()).items())}"


async def test_a_process_started_into_a_storm_takes_the_rate_the_fleet_measured_not_its_guess():
    # The restarted process's guess is ten times too high; its predecessors measured the rate on the
    # safe side (alone, waits included: 80% of it). Slots handed out from the guess bring the first
    # few hundred back while the bound is still full.
    guessed = await storm(clients=1000, capacity=20, limit=64, rate_guess=200)
    assert max(guessed.values()) == 2
    refusals = await storm(clients=1000, capacity=20, limit=64, rate_guess=200, fleet=16)
    assert sum(refusals.values()) > 800, "the storm did not reach the bound"
    assert storm.kept and 10 < storm.kept[-1] < 40, "what the process measured is kept for the next one"
    assert max(refusals.values()) == 1, f"sockets by refusals: {sorted(Counter(refusals.values()).items())}"


async def test_the_fleets_rate_missing_or_unreadable_leaves_the_guess():
    slots = RetrySlots(first=2.0, rate=100.0, clock=Clock())

    async def unreadable():
        raise ConnectionError("Redis is away")

    async def write(rate):
        raise AssertionError("nothing was measured to write")

    shared = SharedRate(slots, read=unreadable, write=write)
    shared.tick()
    await shared.read_first()
    assert shared.known and slots.rate == 100.0
    shared.tick()  # measured nothing: writes nothing
    await settle()
