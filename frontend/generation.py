"""One assistant answer being generated: engine stream in, frames out to Redis.

A `Generation` runs as its own asyncio task, owned by the web process rather than
by any WebSocket: a dropped connection does not stop it. Every frame it makes
goes into the answer's Redis stream (frontend.streams), which any connection of
the user, in any web process, follows or resumes. It also keeps its frames in
memory, so a follower in its own process (the socket that asked, most of the time)
reads them from there (`follow`), without a Redis read per token. Only an explicit
stop (from any tab: a local call, or a message from another process,
frontend.watcher) or a timeout (frontend.deadlines) aborts the engine request:
cancelling the task closes the engine stream.

The message row is written once, when the answer ends, whichever way it ends.

The answer belongs to no process either. Its stream records who owns it (answers.ownership);
the owner's heartbeat says it is alive. When the owner dies, or drains on SIGTERM and hands it
over, another web process claims it (answers.takeover) and continues it: a `Generation` made
from the frames already written (`earlier`), which asks the engine to carry on the partial answer
(`continue_final_message`) and appends to the same stream from the next position. While Redis
is away the answer goes on: its frames wait in memory, its own followers read them there, and
they are written, in order and once each, when Redis is back (`_catch_up`).

Why one module of about 300 lines: it is one object's lifecycle (request, stream, and the three
ways an answer ends: complete, stopped, failed), read top to bottom; the watcher, the deadlines
and the mapping of failures to outcomes already live beside it.
"""

import asyncio
import contextvars
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from functools import partial

import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction
from redis.exceptions import RedisError

import redisconn
from answers import drain, ownership
from frontend import (
    admission,
    metrics,
    outcomes,
    protocol,
    selectors,
    services,
    socket_auth,
    streams,
    watcher,
)
from frontend.deadlines import Deadlines
from frontend.models import Message
from frontend.protocol import Refusal
from inference.client import ChatRequest, Completion, EngineClient, EngineError
from inference.isolation import cache_salt
from inference.prompt import PromptCounts, assemble
from logcontext import bind_log_context
from usage.models import UsageDay
from usage.services import usage_check, usage_record

log = logging.getLogger(__name__)

# Answers generating in this process, by message id: a stop from the same process is a direct call.
RUNNING: dict[int, "Generation"] = {}
# Prompt token counts the engine gave, by engine client: they spare a long conversation a
# count on every turn (inference.prompt.PromptCounts).
_prompt_counts: "weakref.WeakKeyDictionary[EngineClient, PromptCounts]" = weakref.WeakKeyDictionary()
# How long an ended answer's frames wait in memory for a Redis that is away before they are dropped
# (the stored row has the answer whatever happens: followers that resume read it from there).
CATCH_UP_SECONDS = 120.0
# Stops that end the answer here without ending it: another process continues it.
LEAVING = frozenset({"superseded", "handover"})
# How long past CHAT_TAKEOVER_AFTER_SECONDS a follower waits for another process to take an
# answer over (every web process scans every CHAT_TAKEOVER_SCAN_SECONDS).
TAKEOVER_GRACE = 10.0
ABANDONED = "The process generating this answer stopped, and no other could continue it."


def cache_salt_for(user_id: int) -> str | None:
    """A per-user salt so the prefix cache never serves one user's history to another."""
    return cache_salt("cache-salt", user_id) if settings.CHAT_CACHE_SALT_PER_USER else None


class Generation:
    """One answer. Its state: the text so far (`parts`), the next token's `seq`, the time to
    its first token, the note for the reader, and the engine's closing figures."""

    def __init__(
        self,
        turn: services.Turn,
        *,
        user_id: int,
        engine: EngineClient,
        owner: ownership.Claim,
        lease: admission.Lease | None = None,
        earlier: list[dict] = (),
    ):
        """`earlier`: the token frames an earlier owner wrote, when this one continues the answer."""
        self.turn = turn
        self.message_id = turn.assistant_message_id
        self._user_id = user_id
        self._engine = engine
        self.owner = owner
        self._lease = lease
        self._stop_reason = "user"
        self._stopping = False
        self.task: asyncio.Task | None = None
        self.parts: list[str] = [frame["text"] for frame in earlier]
        self.seq = len(earlier)
        self.ttft_ms: float | None = None
        self.note = ""
        self.completion = Completion(finish_reason="")
        self._started = 0.0
        # What the answer's stream holds, as (position, frame), and an event set when it grows.
        self._frames: list[tuple[int, dict]] = [(frame["seq"], frame) for frame in earlier]
        self._grown = asyncio.Event()
        self._ended = False
        # Writing the frames from `_frames[index]` on, after Redis went away; None: written as made.
        self._catching_up: asyncio.Task | None = None
        # Tokens of the partial answer an earlier owner made (counted when this one continues it).
        self._made = 0

    def start(self) -> asyncio.Task:
        self.task = asyncio.create_task(self._run(), name=f"generation-{self.message_id}")
        RUNNING[self.message_id] = self
        self.task.add_done_callback(lambda _: RUNNING.pop(self.message_id, None))
        return self.task

    def stop(self, reason: str = "user") -> None:
        """Cancel the answer once: a second stop (another tab, a repeated key) must not cut
        short the storing and announcing of the stopped answer that the first one began.
        `reason` "superseded" (another process owns it now) and "handover" (this process is
        draining) end it here without ending it: nothing is stored or announced."""
        if self.task is None or self._stopping:
            return
        self._stopping = True
        self._stop_reason = reason
        self.task.cancel()

    async def frames_after(self, after: int) -> AsyncIterator[dict]:
        """The frames after token `after`, live, as `streams.follow` reads them from Redis.

        When the answer leaves this process unfinished (handed over, or taken over), the rest
        is read from its stream, as another process writes it."""
        index = next(
            (i for i, (position, _) in enumerate(self._frames) if position > after), len(self._frames)
        )
        while True:
            while index < len(self._frames):
                after, frame = self._frames[index]
                index += 1
                yield frame
                if frame["type"] in protocol.TERMINAL:
                    return
            if self._ended:
                break
            await self._grown.wait()
        async for frame in _followed(self.message_id, after):
            yield frame

    def _wrote(self, position: int, frame: dict) -> None:
        """Keep a frame the stream is given, and wake the followers in this process."""
        self._frames.append((position, frame))
        self._wake()

    def _wake(self) -> None:
        grown, self._grown = self._grown, asyncio.Event()
        grown.set()

    async def _run(self) -> None:
        bind_log_context(
            request_id=f"chat-{self.message_id}",
            conversation_id=self.turn.conversation_id,
            message_id=self.message_id,
        )
        metrics.generation_started()
        r = redisconn.client()
        self._watcher = asyncio.create_task(watcher.watch(r, self.owner, self._lease, self.stop))
        try:
            await self._generate(r)
        finally:
            self._ended = True
            self._wake()
            metrics.generation_ended()
            if self._stop_reason != "superseded":  # the slot and the answer are another's now
                await self._release(r, handover=self._stop_reason == "handover")

    async def _release(self, r: aioredis.Redis, *, handover: bool = False) -> bool:
        self._watcher.cancel()
        return await watcher.release(r, self.owner, self._lease, handover=handover)

    def _elapsed_ms(self) -> float:
        return round((asyncio.get_running_loop().time() - self._started) * 1000, 1)

    async def _request(self) -> ChatRequest | None:
        """The engine request: the conversation fitted to the context window, and the partial
        answer to carry on when this continues one; None when that answer has no tokens left."""
        history, max_tokens, min_tokens = self.turn.history, self.turn.max_tokens, self.turn.min_tokens
        partial = "".join(self.parts)
        if partial:
            self._made = made = len(await self._engine.tokenize(partial))
            max_tokens, min_tokens = max_tokens - made, max(min_tokens - made, 0)
            if max_tokens <= 0:
                return None
            history = [*history, {"role": "assistant", "content": partial}]
        prompt = await assemble(
            self.turn.system_prompt,
            history,
            context_window=settings.INFERENCE_MAX_MODEL_LEN,
            answer_budget=max_tokens,
            count_tokens=self._engine.count_prompt_tokens,
            counts=_prompt_counts.setdefault(self._engine, PromptCounts()),
        )
        self.note = outcomes.dropped_note(prompt.dropped_turns)
        return ChatRequest(
            messages=prompt.messages,
            continue_final_message=bool(partial),
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            temperature=self.turn.temperature,
            priority=settings.CHAT_PRIORITY,
            cache_salt=cache_salt_for(self._user_id),
            request_id=f"chat-{self.message_id}",
            affinity=f"conversation-{self.turn.conversation_id}",
            model=self.turn.model,
        )

    async def _stream(self, r: aioredis.Redis, request: ChatRequest) -> None:
        """Publish the engine's tokens as they come, within the answer's time limits."""
        loop = asyncio.get_running_loop()
        clock = metrics.TokenClock(self._started)
        async with Deadlines(self._started).enforced() as deadlines:
            # aclosing: leaving the loop closes the engine stream at once, aborting the request.
            async with aclosing(self._engine.stream_chat(request)) as events:
                async for event in events:
                    if isinstance(event, Completion):
                        self.completion = event
                        continue
                    clock.tick(loop.time())
                    if self.ttft_ms is None:
                        self.ttft_ms = self._elapsed_ms()
                    self.parts.append(event.text)
                    # The position is taken before the append: a stop landing while the token
                    # is being written must not give the closing frame the token's position.
                    seq, self.seq = self.seq, self.seq + 1
                    await self._publish(r, seq, protocol.token(self.message_id, seq, event.text))
                    redisconn.raise_if_cancelled()  # a stop or deadline during the write
                    deadlines.token_arrived()

    async def _generate(self, r: aioredis.Redis) -> None:
        self._started = asyncio.get_running_loop().time()
        try:
            request = await self._request()
            if request is None:
                self.completion = Completion(finish_reason="length")
            else:
                await self._stream(r, request)
        except asyncio.CancelledError:
            if self._stop_reason not in LEAVING:
                await self._stopped(r)
            raise
        except Exception as exc:
            await self._failed(r, exc)
            return
        fields = dict(
            status=Message.Status.COMPLETE,
            finish_reason=self.completion.finish_reason,
            note=self.note,
            prompt_tokens=self.completion.prompt_tokens,
            cached_tokens=self.completion.cached_tokens,
            completion_tokens=(self.completion.completion_tokens or 0) + self._made or None,
            ttft_ms=self.ttft_ms,
            duration_ms=self._elapsed_ms(),
        )
        await self._finish(**fields)
        await self._close_stream(r, self._done_frame(fields, self.completion))

    async def _stopped(self, r: aioredis.Redis) -> None:
        fields = dict(
            status=Message.Status.STOPPED,
            finish_reason="abort",
            note=" ".join(filter(None, [self.note, outcomes.STOP_NOTES.get(self._stop_reason, "")])),
            ttft_ms=self.ttft_ms,
            duration_ms=self._elapsed_ms(),
        )
        await self._finish(**fields)
        await self._close_stream(r, self._done_frame(fields, Completion("")))

    async def _failed(self, r: aioredis.Redis, exc: Exception) -> None:
        status, code, detail = await outcomes.reported_failure(r, exc, f"answer {self.message_id}")
        await self._finish(
            status=status,
            error_code=code,
            note=" ".join(filter(None, [self.note, detail])),
            ttft_ms=self.ttft_ms,
            duration_ms=self._elapsed_ms(),
        )
        extra = exc.extra if isinstance(exc, EngineError) else {}
        content = "".join(self.parts)
        frame = protocol.failed(
            self.message_id, code=code, detail=detail, status=status, content=content, **extra
        )
        await self._close_stream(r, frame)

    async def _publish(self, r: aioredis.Redis, position: int, frame: dict) -> None:
        # Followers in this process have it at once, and never miss one whose write a stop cut.
        self._wrote(position, frame)
        if self._catching_up is not None:
            return  # written in order once Redis is back
        try:
            await streams.publish(r, self.owner, position, frame)
        except ownership.Fenced:
            self.stop("superseded")
        except ownership.Gap as gap:
            self._fall_behind(r, gap.position, gap)
        except RedisError as exc:
            self._fall_behind(r, position, exc)

    def _fall_behind(self, r: aioredis.Redis, position: int, why: Exception) -> None:
        log.warning("answer %s: its frames wait in memory from %s (%s)", self.message_id, position, why)
        self._catching_up = asyncio.create_task(
            self._catch_up(r, position), name=f"catch-up-{self.message_id}"
        )

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
                    await streams.publish(r, self.owner, position, frame)
                    index += 1
            except ownership.Fenced:
                self.stop("superseded")
                return
            except ownership.Gap as gap:
                position = gap.position
                continue
            except RedisError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            # Caught up, with no wait since the last check: the next frame is written as made.
            self._catching_up = None
            log.info("answer %s: its frames are in Redis again", self.message_id)
            return

    def _done_frame(self, fields: dict, completion: Completion) -> dict:
        return protocol.done(
            self.message_id,
            status=fields["status"],
            finish_reason=fields["finish_reason"],
            usage=protocol.usage(
                completion.prompt_tokens, completion.cached_tokens, completion.completion_tokens
            ),
            ttft_ms=fields["ttft_ms"],
            note=fields["note"],
            content="".join(self.parts),
        )

    async def _close_stream(self, r: aioredis.Redis, frame: dict) -> None:
        # The slot is free before anyone hears the answer ended, so a follow-up is admitted.
        released = await self._release(r)
        await self._publish(r, self.seq, frame)
        catching_up = self._catching_up
        if catching_up is None:
            return
        # Readers elsewhere wait for this frame; the stored row has the answer meanwhile.
        try:
            await asyncio.wait_for(asyncio.shield(catching_up), CATCH_UP_SECONDS)
        except TimeoutError:
            catching_up.cancel()
            log.warning("answer %s ended but Redis stayed away: its frames were dropped", self.message_id)
            return
        if not released:
            await self._release(r)

    async def _finish(self, **fields) -> None:
        metrics.generation_finished(
            fields["status"],
            fields.get("completion_tokens"),
            fields["duration_ms"] / 1000,
            ttft_seconds=fields["ttft_ms"] / 1000 if fields.get("ttft_ms") is not None else None,
        )
        await database_sync_to_async(self._store)(fields)

    # One commit for the message and the usage row: every answer's writes wait for the database's thread.
    @transaction.atomic
    def _store(self, fields: dict) -> None:
        services.message_finish(message_id=self.message_id, content="".join(self.parts), **fields)
        # An answer cut short has no engine figures: its streamed tokens count (about one a delta).
        usage_record(
            user_id=self._user_id,
            source=UsageDay.Source.CHAT,
            prompt_tokens=fields.get("prompt_tokens"),
            cached_tokens=fields.get("cached_tokens"),
            completion_tokens=fields.get("completion_tokens") or self.seq,
        )


def follow(message_id: int, after: int = -1) -> AsyncIterator[dict]:
    """The answer's frames after token `after` (-1: from the start), live, until its closing frame:
    from memory when this process generates it, else from its Redis stream."""
    generation = RUNNING.get(message_id)
    if generation is not None and generation.task.get_loop() is asyncio.get_running_loop():
        return generation.frames_after(after)
    return _followed(message_id, after)


def _followed(message_id: int, after: int) -> AsyncIterator[dict]:
    r = redisconn.client()
    return streams.follow(r, message_id, after, quiet=partial(_quiet, r, message_id))


async def _quiet(r: aioredis.Redis, message_id: int) -> dict | None:
    """A stream with no new frame for a while: None while its answer is alive or may yet be taken
    over, else how it ended: from the store, or, when no process could continue it, as interrupted."""
    beat = await ownership.last_beat(r, message_id)
    if beat is not None and time.time() - beat < settings.CHAT_TAKEOVER_AFTER_SECONDS + TAKEOVER_GRACE:
        return None
    message = await Message.objects.filter(pk=message_id).afirst()
    if message is None:
        return protocol.failed(
            message_id, code="not_found", detail="no such message", status="error", content=""
        )
    if message.status != Message.Status.GENERATING:
        return protocol.closing(message)
    written = await streams.written(r, message_id) or []
    return protocol.failed(
        message_id,
        code="interrupted",
        detail=ABANDONED,
        status=Message.Status.INTERRUPTED,
        content="".join(frame["text"] for frame in written if frame["type"] == "chat.token"),
    )


def _checked_start(
    start_turn: Callable[..., services.Turn], *, user, still_allowed: Callable[[], bool] | None, **arguments
) -> services.Turn:
    # One trip to the database's thread for the caller's own check, the quota and the turn: all
    # are on every answer's path, and in a burst of answers that thread is the queue they wait in.
    if still_allowed is not None and not still_allowed():
        raise socket_auth.LoggedOut
    usage_check(user=user)
    return start_turn(user=user, **arguments)


async def answer_start(
    *,
    user,
    engine: EngineClient,
    start_turn: Callable[..., services.Turn],
    still_allowed: Callable[[], bool] | None = None,
    **arguments,
) -> Generation:
    """Admit an answer, store its turn, open its stream and start generating it.

    The one way an answer begins, for the WebSocket and the HTTP stream alike.
    `still_allowed`, if given, runs in the turn's own trip to the database first (the socket's
    login check: socket_auth.LoggedOut when it fails, nothing stored).
    Raises protocol.Refusal: `busy` (nothing stored), or whatever `start_turn` refuses,
    after giving the slot back.
    """
    r = redisconn.client()
    if drain.draining():
        metrics.admission_refused("draining")
        raise protocol.busy("draining", 1.0)
    try:
        lease = await admission.admit(r, user_id=user.pk)
    except Refusal as refusal:
        metrics.admission_refused(refusal.extra["reason"])
        raise
    storing = time.perf_counter()
    try:
        turn = await database_sync_to_async(_checked_start)(
            start_turn, user=user, still_allowed=still_allowed, **arguments
        )
    except BaseException:
        await admission.release(r, lease)
        raise
    metrics.turn_stored(time.perf_counter() - storing)
    # Opened before anyone follows it: a leftover stream under a reused id is replaced first.
    owner = await streams.open_stream(r, turn.assistant_message_id, user_id=user.pk, lease=lease.member)
    generation = Generation(turn, user_id=user.pk, engine=engine, owner=owner, lease=lease)
    # A fresh context: code started from a view would otherwise send its ORM calls to
    # a thread of that view's call, which is gone once the view returns.
    contextvars.Context().run(generation.start)
    return generation


async def answer_stop(*, user, message_id: int) -> None:
    """Stop one of the user's answers, from whichever tab or web process it runs in: a direct
    call here, a message on its stop channel elsewhere. Refusal `not_found` / `not_running`."""
    message = await database_sync_to_async(selectors.message_get)(user=user, message_id=message_id)
    if message is None:
        raise Refusal("not_found", "no such message", message=message_id)
    if message.status != Message.Status.GENERATING:
        raise Refusal("not_running", "that answer is not being generated", message=message_id)
    generation = RUNNING.get(message_id)
    if generation is not None:
        generation.stop("user")
    else:
        await streams.request_stop(redisconn.client(), message_id)
