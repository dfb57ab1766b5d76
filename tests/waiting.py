"""Waiting for the event a test means, in async tests, instead of sleeping a guessed time."""

import asyncio


async def until(predicate, seconds: float = 30.0) -> bool:
    """Whether `predicate()` became true within `seconds` (checked every 10 ms); a busy machine
    only makes the wait longer, never the answer different."""
    for _ in range(int(seconds / 0.01)):
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return predicate()
