"""When a refused client is told to come back: the next free slot at the rate the process takes work.

A fixed retry window sends a storm back as a storm: 4,000 sockets cut by a restart and told "2 to 8 s"
return within those 6 s, more than one process accepts, and most are refused again. `RetrySlots`
hands each refusal its own moment instead, `first` seconds away at the soonest and each one
`1 / (rate × share)` after the last, so the refused come back no faster than the process takes them
and the rest of its rate is left for clients arriving afresh. The rate is the process's own, measured
as it works: while the pending count is at least half full, the mean gap between two pieces of work
leaving it (the process's service time then, not its clients' pace); otherwise the time a piece took
with nothing else pending (its service time with waits for I/O included, so an estimate on the safe
side). `rate` is the first guess, for a process that has measured nothing yet.
When the storm has passed the next slot is in the past again and a refusal waits `first`.
"""

import time
from collections.abc import Callable

# How much a newly measured gap moves the mean: enough to follow a restart within a few dozen
# accepts, little enough that one burst of accepts in the same millisecond does not swing it.
WEIGHT = 0.1


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
        self.next_free = 0.0
        self.last_left: float | None = None

    @property
    def rate(self) -> float:
        """Work taken a second while the process is saturated, as last measured."""
        return 1.0 / self.gap

    def take(self) -> float:
        """A refused client's wait, in seconds: the next free slot, which it now holds."""
        now = self.clock()
        slot = max(self.next_free, now + self.first)
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
            self._measured(now - self.last_left)
        self.last_left = now

    def _measured(self, gap: float) -> None:
        self.gap += WEIGHT * (max(gap, 1e-5) - self.gap)
