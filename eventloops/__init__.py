"""State kept for each asyncio event loop: the one way the product holds what belongs to a loop.

Connections belong to the loop that opened them (a Redis client's, an HTTP session's, a rate
limiter's storage), and one process can run several loops over its life: daphne's, a bulk job's
`asyncio.run`, each test's. `PerLoop(make)` gives the running loop its own `make()`, made on first
use. The entries of loops that have closed are dropped when a new loop asks, so a value may hold
its loop (an aiohttp session does) without keeping it alive forever, and nothing is pruned by hand.
"""

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerLoop(Generic[T]):
    """One `make()` for each running event loop."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._made: dict[asyncio.AbstractEventLoop, T] = {}

    def __call__(self) -> T:
        loop = asyncio.get_running_loop()
        found = self._made.get(loop)
        if found is None:
            for ended in [other for other in self._made if other.is_closed()]:
                del self._made[ended]
            found = self._made[loop] = self._make()
        return found

    def pop(self) -> T | None:
        """The running loop's value, forgotten (to close it); None when it had none."""
        return self._made.pop(asyncio.get_running_loop(), None)
