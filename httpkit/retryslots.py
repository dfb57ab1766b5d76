"""When a refused client is told to come back: the next free slot at the rate the process takes work.

A fixed retry window sends a storm back as a storm: 4,000 sockets cut by a restart and told "2 to 8 s"
return within those 6 s, more than one process accepts, and most are refused again. `RetrySlots`
hands each refusal its own moment instead, `first` seconds away at the soonest and each one
`1 / (rate × share)` after the last, so the refused come back no faster than the process takes them
and the rest of its rate is left for clients arriving afresh. The rate is the process's own, measured
as it works: while the pending count is at least half full, the pieces of work leaving it over
WINDOW seconds of such time (the process's service rate then, not its clients' pace; pieces leave in
bursts, a few in one instant after a stall, so a span of time measures it where the gap between two
of them would not); otherwise the time a piece took with nothing else pending (its service time
with waits for I/O included, so an estimate on the safe side). No slot comes before the work already
taken has left (`pending` of it, at the measured rate): a client told to come back while the bound
is still full is refused again.
`rate` is the first guess, for a process that has measured nothing yet; `prior` replaces it with the
rate the fleet measured before (chatsite.asgi keeps it in Redis), so a process started into a storm does not
hand out its first slots from a guess. The first measurements are averaged plainly, so a handful
of them outweigh any guess (which counts as GUESS_WEIGHT of them); later ones move the mean by WEIGHT.
When the storm has passed the next slot is in the past again and a refusal waits `first`.
"""

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# How much a newly measured gap moves the mean once it has WEIGHT⁻¹ of them: enough to follow a
# change within a few dozen accepts, little enough that one burst of accepts in the same millisecond
# does not swing it.
WEIGHT = 0.1
# What the first guess counts for, in measurements of this process: little, but enough that two
# pieces of work leaving in one instant do not make the process look infinitely fast.
GUESS_WEIGHT = 2
# How long a refusal waits for the fleet's rate being read, at most, before it takes the guess.
READ_WAIT = 0.5
# The span over which pieces leaving a saturated process are counted into one measurement: longer
# than a burst of them and the stall before it.
WINDOW = 1.0


class RetrySlots:
    def __init__(
        self,
        *,
        first: float,
        rate: float,
        share: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.first = first
        self.share = share
        self.clock = clock
        self.gap = 1.0 / rate  # seconds between accepts while saturated, as measured
        self.weight = GUESS_WEIGHT  # how many measurements `gap` is the mean of, a guess counted in
        self.next_free = 0.0
        self.last_left: float | None = None
        self.window = 0.0  # saturated time counted towards the next measurement, and pieces left in it
        self.window_left = 0

    @property
    def rate(self) -> float:
        """Work taken a second while the process is saturated, as last measured."""
        return 1.0 / self.gap

    def prior(self, rate: float) -> None:
        """A rate measured before this process began (the fleet's): it replaces a guess, not this
        process's own measurements."""
        if self.weight == GUESS_WEIGHT and rate > 0:
            self.gap, self.weight = 1.0 / rate, 1.0 / WEIGHT

    def take(self, pending: int = 0) -> float:
        """A refused client's wait, in seconds: the next free slot, which it now holds. `pending`:
        the work taken and not yet begun, which leaves first."""
        now = self.clock()
        slot = max(self.next_free, now + self.first, now + pending * self.gap)
        self.next_free = slot + 1.0 / (self.rate * self.share)
        return slot - now

    def left(self, *, saturated: bool, alone: float | None = None) -> None:
        """One piece of work left the pending count. `saturated`: the count was at least half full;
        `alone`: the seconds it took with nothing else pending, if so."""
        if not saturated:
            self.last_left = None  # a gap that spans a lull is the clients' pace, not the process's
            if alone is not None:
                self._measured(alone)
            return
        now = self.clock()
        if self.last_left is not None:
            self.window += now - self.last_left
            self.window_left += 1
        self.last_left = now
        if self.window >= WINDOW:
            self._measured(self.window / self.window_left, self.window_left)
            self.window, self.window_left = 0.0, 0

    def _measured(self, gap: float, count: int = 1) -> None:
        """`count` gaps of `gap` measured: the mean moves as `count` single measurements would."""
        self.weight += count
        moved = max(1.0 - (1.0 - WEIGHT) ** count, count / self.weight)
        self.gap += moved * (max(gap, 1e-5) - self.gap)


class SharedRate:
    """The rate as the fleet's web processes measured it, kept where each of them reads it (`read`,
    `write`: chatsite.asgi keeps it in Redis): read once, as a process takes its first piece of work,
    as the `prior` of its slots; written every `every` seconds while the process measures its own.
    A process started into a storm then hands out its first slots at a measured rate, not a guess.
    Neither step holds up the work (each runs as a task of its own, and one that fails is skipped);
    only a refusal made while the rate is being read waits for it (`read_first`)."""

    def __init__(
        self,
        slots: RetrySlots,
        *,
        read: Callable[[], Awaitable[float | None]],
        write: Callable[[float], Awaitable[None]],
        every: float = 10.0,
    ):
        self.slots = slots
        self.read = read
        self.write = write
        self.every = every
        self.task: asyncio.Task | None = None
        self.known = False  # the fleet's rate was read (or found missing)
        self.written_at = -math.inf
        self.written_weight = GUESS_WEIGHT

    def tick(self) -> None:
        """A piece of work came in: read or write the rate if it is time and nothing is under way."""
        if self.task is not None and not self.task.done():
            return
        if not self.known:
            self.task = asyncio.ensure_future(self._read())
        elif self.slots.weight > self.written_weight and self.slots.clock() - self.written_at >= self.every:
            self.written_at, self.written_weight = self.slots.clock(), self.slots.weight
            self.task = asyncio.ensure_future(self._guarded(self.write(self.slots.rate)))

    async def read_first(self) -> None:
        """Before the first refusal: wait for the fleet's rate if it is being read (at most a
        connect's time, then the guess stands)."""
        if not self.known and self.task is not None:
            await asyncio.wait([self.task], timeout=READ_WAIT)

    async def _read(self) -> None:
        rate = await self._guarded(self.read())
        self.known = True
        if rate:
            self.slots.prior(rate)

    @staticmethod
    async def _guarded(step: Awaitable):
        try:
            return await step
        except Exception as exc:  # the rate is advice: a process without it guesses, as before
            log.warning("the fleet's rate of taking work: %s", exc)
            return None
