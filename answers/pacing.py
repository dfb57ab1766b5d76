"""How often an answer sends a frame while its web process is busy.

A frame costs the web process about the same whatever text it carries: the engine event's parse, the
write to Redis, the send to each socket. A process that keeps up sends a frame a token; one whose
event loop runs late spends on those frames the core that new answers wait for, and they start later.
So while the loop runs CHAT_BUSY_LAG_SECONDS late or more, each answer sends at most one frame every
CHAT_BUSY_FRAME_SECONDS: the tokens the engine makes meanwhile wait in the engine stream's buffer and
go out together in the next frame. That interval bounds the latency added to a token; a process that
keeps up sends each token as it comes, and an answer's first token never waits. Off by default
(CHAT_BUSY_FRAME_SECONDS 0): where the process's cost a token is mostly reading the engine's events, one
a token, fewer frames save little (docs/benchmarks.md, section 5).

That read is what CHAT_BUSY_STREAM_INTERVAL cuts: an answer that starts while the loop runs late asks the
engine for that many tokens an event (vLLM's per-request stream_interval), so the engine sends, and this
process reads, parses and passes on, one event where it would have sent that many.
"""

import asyncio

from django.conf import settings

from answers import metrics
from eventloops import PerLoop

# How often the loop's lateness is sampled, and how long it is sampled after the last question about it.
TICK_SECONDS = 0.05
IDLE_AFTER_SECONDS = 10.0


class LoopLag:
    """How late the running loop runs a timer: sampled every TICK_SECONDS while answers ask, smoothed
    over a few samples. A timer handle, not a task: a loop that closes drops it without a warning."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.seconds = 0.0
        self._asked = 0.0
        self._ticking = False

    def busy(self) -> bool:
        self._asked = self._loop.time()
        if not self._ticking:
            self._ticking = True
            self._schedule()
        return self.seconds >= settings.CHAT_BUSY_LAG_SECONDS

    def _schedule(self) -> None:
        due = self._loop.time() + TICK_SECONDS
        self._loop.call_at(due, self._tick, due)

    def _tick(self, due: float) -> None:
        now = self._loop.time()
        self.seconds += (max(now - due, 0.0) - self.seconds) / 2
        metrics.loop_lag(self.seconds)
        if now - self._asked > IDLE_AFTER_SECONDS:  # no answer runs here: stop sampling
            self._ticking = False
            self.seconds = 0.0
            metrics.loop_lag(0.0)
            return
        self._schedule()


lag = PerLoop(LoopLag)


def stream_interval() -> int:
    """Tokens an engine event for an answer starting now: CHAT_BUSY_STREAM_INTERVAL while the loop runs
    late, else 1. The engine then sends an answer's tokens in fewer events, so its process reads fewer."""
    interval = settings.CHAT_BUSY_STREAM_INTERVAL
    if interval > 1 and lag().busy():
        metrics.stream_interval_asked()
        return interval
    return 1


class Pace:
    """One answer's frames: `await pace.sent()` after each frame waits, while the loop is busy, until
    CHAT_BUSY_FRAME_SECONDS have passed since the frame before it went out."""

    __slots__ = ("_loop", "_lag", "_last")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._lag = lag()
        self._last: float | None = None

    async def sent(self) -> None:
        now = self._loop.time()
        last, self._last = self._last, now
        busy = self._lag.busy()  # asked paced or not: the lag is a metric too
        interval = settings.CHAT_BUSY_FRAME_SECONDS
        if last is None or interval <= 0 or not busy:
            return
        wait = last + interval - now
        if wait > 0:
            metrics.frame_paced()
            await asyncio.sleep(wait)
            self._last = self._loop.time()
