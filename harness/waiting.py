"""Waiting for the condition a test or a benchmark means, instead of sleeping a guessed time.

`wait_for` is for synchronous code (a process starting, a state stored) and fails loudly;
`until` is for async tests, which assert its answer.
"""

import asyncio
import time
from collections.abc import Callable


def wait_for(check: Callable[[], bool], timeout: float, what: str, *, every: float = 0.2) -> None:
    """Return once `check()` is true, checked every `every` seconds; TimeoutError after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {timeout:.0f}s")


async def until(check: Callable[[], bool], seconds: float = 30.0) -> bool:
    """Whether `check()` became true within `seconds` of checks 10 ms apart. The checks are
    counted, not the clock: a busy machine only makes the wait longer, never the answer different."""
    for _ in range(int(seconds / 0.01)):
        if check():
            return True
        await asyncio.sleep(0.01)
    return check()
