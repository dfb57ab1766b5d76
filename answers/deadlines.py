"""An answer's time limits: its first token, the gap between two tokens, and the whole answer.

One `Deadlines` per answer gives the moment the next token is due, whichever limit comes
first, and remembers which limit that is, so the timeout that fires can say which one.
"""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from django.conf import settings

NOTES = {
    "timeout_first_token": "The engine sent no first token within {:g} s.",
    "timeout_between_tokens": "The engine sent no token for {:g} s.",
    "timeout_total": "The answer took longer than {:g} s.",
}


class AnswerTimeout(Exception):
    """An answer ran past one of its limits; `code` names it (docs/protocol.md)."""

    def __init__(self, code: str, seconds: float):
        super().__init__(code)
        self.code = code
        self.detail = NOTES[code].format(seconds)


class Deadlines:
    def __init__(self, started: float) -> None:
        self._total = started + settings.CHAT_TOTAL_TIMEOUT
        self.expiring = "timeout_first_token"
        self._timer: asyncio.Timeout | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._check_handle: asyncio.TimerHandle | None = None
        # When the last token arrived; None before the first.
        self._last: float | None = None

    @asynccontextmanager
    async def enforced(self) -> AsyncIterator["Deadlines"]:
        """Run the block until the next token is due: from the first token's deadline on,
        moved by each `token_arrived()`. Past it the block is cancelled and AnswerTimeout
        raised. The block must read the engine in the task that entered it.

        One timer: a token only notes its time (the first sets the timer for the gap after it),
        and the timer, when it fires, sets itself again for the deadline the last token moved."""
        self._loop = loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(None) as self._timer:
                self._check_handle = loop.call_at(self.first_token(loop.time()), self._check)
                try:
                    yield self
                finally:
                    self._check_handle.cancel()
        except TimeoutError:
            raise self.expired() from None

    def token_arrived(self) -> None:
        """A token came (and was passed on): the next one is due from now."""
        now = self._loop.time()
        if self._last is None:  # the gap after the first token may end before the first token's wait
            self._check_handle.cancel()
            self._check_handle = self._loop.call_at(self.next_token(now), self._check)
        self._last = now

    def _check(self) -> None:
        """The deadline the timer was set for has come: time the block out, unless a token came
        since and moved it."""
        now = self._loop.time()
        if self._last is not None and (due := self.next_token(self._last)) > now:
            self._check_handle = self._loop.call_at(due, self._check)
        else:
            self._timer.reschedule(now)

    def first_token(self, now: float) -> float:
        """When the first token is due, counted from `now` (the request leaving)."""
        return self._next(now, settings.CHAT_FIRST_TOKEN_TIMEOUT, "timeout_first_token")

    def next_token(self, now: float) -> float:
        """When the token after one that arrived at `now` is due."""
        return self._next(now, settings.CHAT_TOKEN_TIMEOUT, "timeout_between_tokens")

    def expired(self) -> AnswerTimeout:
        """The timeout of the limit that was nearest when the deadline passed."""
        seconds = {
            "timeout_first_token": settings.CHAT_FIRST_TOKEN_TIMEOUT,
            "timeout_between_tokens": settings.CHAT_TOKEN_TIMEOUT,
            "timeout_total": settings.CHAT_TOTAL_TIMEOUT,
        }[self.expiring]
        return AnswerTimeout(self.expiring, seconds)

    def _next(self, now: float, wait: float, code: str) -> float:
        deadline = min(now + wait, self._total)
        self.expiring = code if deadline < self._total else "timeout_total"
        return deadline
