"""The frames of one answer in the process that makes it: written to its stream (chat.streams), and
passed to the followers in this process from memory, encoded, without a Redis read per token.

A follower here is given a frame only once Redis holds it (the writer's callback says so): what it
is shown is what a reload, another process or a taker of the answer reads, and a frame whose fenced
write fails reaches no follower. Each follower has a `push`, called from that callback with every
frame it is due, in order, once each: a socket's direct sender (httpkit.websocket) sends it there
and then, and `AnswerFrames.follow` without one queues it for its iterator. While Redis is away the
frames wait in memory and are written, in order and once each, when it is back (`_catch_up`).
"""

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from answers import ownership
from answers.ownership import Claim
from chat import streams
from chat.protocol import TERMINAL
from chat.stream_reads import Frame

log = logging.getLogger(__name__)
# How long a draining process tries to write an answer's last frames before it hands the answer over.
HANDOVER_FLUSH_SECONDS = 5.0

Push = Callable[[Frame], None]


class Follower:
    """One follower's place in an answer's frames: the position of the last frame it was given
    (`after`), and whether it is `over`: given the closing frame (`closed`), or an error its `push`
    raised (`error`), or left when the answer left this process unfinished."""

    __slots__ = ("push", "after", "over", "closed", "error", "woken", "queued")

    def __init__(self, after: int) -> None:
        self.push: Push = self._queue
        self.after = after
        self.over = self.closed = False
        self.error: Exception | None = None
        # Where frames wait for `AnswerFrames.follow`'s iterator, when no push was given.
        self.woken = asyncio.Event()
        self.queued: deque[Frame] = deque()

    def _queue(self, frame: Frame) -> None:
        self.queued.append(frame)
        self.woken.set()

    def give(self, frame: Frame, position: int | None) -> None:
        """Pass on `frame` (at `position`; None: a notice, which has none)."""
        try:
            self.push(frame)
        except Exception as exc:  # the socket closed: its follower ends with this, the others go on
            self.error = exc
            self.leave()
            return
        if position is not None:
            self.after = position
        if frame["type"] in TERMINAL:
            self.closed = True
            self.leave()

    def leave(self) -> None:
        self.over = True
        self.woken.set()


class AnswerFrames:
    """The frames of one answer as its owner makes them. `superseded` is called when another process
    owns the answer now."""

    def __init__(self, message_id: int, owner: Claim, earlier: list[dict], superseded: Callable[[], None]):
        """`earlier`: the token frames an earlier owner wrote, when this one continues the answer."""
        self.message_id = message_id
        self.owner = owner
        self._superseded = superseded
        # The frames made, as (position, frame); the first `_shown` of them are in Redis.
        self._frames: list[tuple[int, Frame]] = [(frame["seq"], Frame.encoded(frame)) for frame in earlier]
        self._followers: list[Follower] = []
        self._ended = False
        # Writing the frames from a position on, after Redis went away; None: written as made.
        self.catching_up: asyncio.Task | None = None
        # The position of the last frame known to be in the stream, and how many of `_frames` that is.
        self._written = earlier[-1]["seq"] if earlier else -1
        self._shown = len(self._frames)
        # Why no token comes for now (a `chat.notice`), for followers here; None: none.
        self._notice: Frame | None = None

    async def follow(
        self, after: int, rest: Callable[[int], AsyncIterator[dict]], push: Push | None = None
    ) -> AsyncIterator[dict]:
        """The frames after token `after` that Redis holds, live; when the answer leaves this process
        unfinished (handed over, or taken over), the rest from `rest(after)`, its stream's. With
        `push`, the frames from memory go to it, as Redis holds them, and only the rest are yielded."""
        follower = self.attach(after, push)
        try:
            while True:
                while follower.queued:
                    yield follower.queued.popleft()
                if follower.over:
                    break
                follower.woken.clear()
                await follower.woken.wait()
        finally:
            self.detach(follower)
        if follower.error is not None:
            raise follower.error
        if not follower.closed:
            async for frame in rest(follower.after):
                yield frame

    def attach(self, after: int, push: Push | None = None) -> Follower:
        """A follower from token `after` on: given the frames Redis holds after it now, the notice
        if there is one, then each frame as Redis holds it (`_stored`)."""
        follower = Follower(after)
        if push is not None:
            follower.push = push
        index = next(
            (i for i, (position, _) in enumerate(self._frames) if position > after), len(self._frames)
        )
        for position, frame in self._frames[index : self._shown]:
            follower.give(frame, position)
            if follower.over:
                return follower
        if self._notice is not None:
            follower.give(self._notice, None)
        if self._ended:
            follower.leave()
        elif not follower.over:
            self._followers.append(follower)
        return follower

    def detach(self, follower: Follower) -> None:
        if follower in self._followers:
            self._followers.remove(follower)

    def notice(self, frame: dict | None) -> None:
        """Tell the followers here why no token comes for now (None: that has passed)."""
        self._notice = Frame.encoded(frame) if frame is not None else None
        if self._notice is not None:
            self._give_all([(None, self._notice)])

    def end(self) -> None:
        """This process writes no more of the answer: followers here read the rest from its stream."""
        self._ended = True
        followers, self._followers = self._followers, []
        for follower in followers:
            follower.leave()

    def _stored(self, position: int) -> None:
        """Redis holds the frames up to `position`: give them to the followers."""
        self._written = max(self._written, position)
        shown = self._shown
        while shown < len(self._frames) and self._frames[shown][0] <= self._written:
            shown += 1
        if shown != self._shown:
            new, self._shown = self._frames[self._shown : shown], shown
            self._give_all(new)

    def _give_all(self, frames: list[tuple[int | None, Frame]]) -> None:
        for follower in self._followers:
            for position, frame in frames:
                follower.give(frame, position)
                if follower.over:
                    break
        if any(follower.over for follower in self._followers):
            self._followers = [follower for follower in self._followers if not follower.over]

    async def publish(self, r: aioredis.Redis, position: int, frame: dict) -> None:
        self._frames.append((position, Frame.encoded(frame)))
        if self.catching_up is not None:
            return  # written in order once Redis is back
        try:
            await streams.publish(r, self.owner, position, self._frames[-1][1], self._stored)
        except ownership.Fenced:
            self._superseded()
        except ownership.Gap as gap:
            self._fall_behind(r, gap.position, gap)
        except RedisError as exc:
            self._fall_behind(r, position, exc)

    def _fall_behind(self, r: aioredis.Redis, position: int, why: Exception) -> None:
        log.warning("answer %s: its frames wait in memory from %s (%s)", self.message_id, position, why)
        catching_up = self._catch_up(r, position)
        self.catching_up = asyncio.create_task(catching_up, name=f"catch-up-{self.message_id}")

    async def _catch_up(self, r: aioredis.Redis, position: int) -> None:
        """Write the frames from `position` on, in order, once Redis answers again: each at its
        position, so one written before the failure is not written twice, and from wherever the
        stream ends if Redis lost some."""
        delay = 0.25
        while True:
            index = next((i for i, (p, _) in enumerate(self._frames) if p >= position), len(self._frames))
            try:
                while index < len(self._frames):
                    position, frame = self._frames[index]
                    await streams.publish(r, self.owner, position, frame, self._stored)
                    index += 1
            except ownership.Fenced:
                self._superseded()
                return
            except ownership.Gap as gap:
                position = gap.position
                continue
            except RedisError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            # Caught up, with no wait since the last check: the next frame is written as made.
            self.catching_up = None
            log.info("answer %s: its frames are in Redis again", self.message_id)
            return

    async def before_handover(self, r: aioredis.Redis) -> None:
        """Write the frames a follower here may have been shown but whose write the handover cut (or
        that wait for Redis), so the process that continues the answer starts after them, not over them."""
        if self.catching_up is None and (not self._frames or self._frames[-1][0] <= self._written):
            return
        if self.catching_up is not None:
            self.catching_up.cancel()
        try:
            await asyncio.wait_for(self._catch_up(r, self._written + 1), HANDOVER_FLUSH_SECONDS)
        except TimeoutError:
            log.warning(
                "answer %s: handed over with frames not written from %s", self.message_id, self._written + 1
            )
