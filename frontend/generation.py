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

import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction
from redis.exceptions import RedisError, ResponseError

import redisconn
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
CLOSING_ATTEMPTS = 3


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
        lease: admission.Lease | None = None,
    ):
        self.turn = turn
        self.message_id = turn.assistant_message_id
        self._user_id = user_id
        self._engine = engine
        self._lease = lease
        self._stop_reason = "user"
        self._stopping = False
        self.task: asyncio.Task | None = None
        self.parts: list[str] = []
        self.seq = 0
        self.ttft_ms: float | None = None
        self.note = ""
        self.completion = Completion(finish_reason="")
        self._started = 0.0
        # What the answer's stream holds, as (position, frame), and an event set when it grows.
        self._frames: list[tuple[int, dict]] = []
        self._grown = asyncio.Event()
        self._ended = False

    def start(self) -> asyncio.Task:
        self.task = asyncio.create_task(self._run(), name=f"generation-{self.message_id}")
        RUNNING[self.message_id] = self
        self.task.add_done_callback(lambda _: RUNNING.pop(self.message_id, None))
        return self.task

    def stop(self, reason: str = "user") -> None:
        """Cancel the answer once: a second stop (another tab, a repeated key) must not cut
        short the storing and announcing of the stopped answer that the first one began."""
        if self.task is None or self._stopping:
            return
        self._stopping = True
        self._stop_reason = reason
        self.task.cancel()

    async def frames_after(self, after: int) -> AsyncIterator[dict]:
        """The frames after token `after`, live, as `streams.follow` reads them from Redis.

        Ends without a closing frame only if the answer ended without one (which a Redis
        follower would see as a stream that stopped growing)."""
        index = next(
            (i for i, (position, _) in enumerate(self._frames) if position > after), len(self._frames)
        )
        while True:
            while index < len(self._frames):
                frame = self._frames[index][1]
                index += 1
                yield frame
                if frame["type"] in protocol.TERMINAL:
                    return
            if self._ended:
                return
            await self._grown.wait()

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
        self._watcher = asyncio.create_task(watcher.watch(r, self.message_id, self._lease, self.stop))
        try:
            await self._generate(r)
        finally:
            self._ended = True
            self._wake()
            metrics.generation_ended()
            await self._release(r)

    async def _release(self, r: aioredis.Redis) -> None:
        self._watcher.cancel()
        await watcher.release(r, self.message_id, self._lease)

    def _elapsed_ms(self) -> float:
        return round((asyncio.get_running_loop().time() - self._started) * 1000, 1)

    async def _request(self) -> ChatRequest:
        """The engine request: the conversation fitted to the context window."""
        prompt = await assemble(
            self.turn.system_prompt,
            self.turn.history,
            context_window=settings.INFERENCE_MAX_MODEL_LEN,
            answer_budget=self.turn.max_tokens,
            count_tokens=self._engine.count_prompt_tokens,
            counts=_prompt_counts.setdefault(self._engine, PromptCounts()),
        )
        self.note = outcomes.dropped_note(prompt.dropped_turns)
        return ChatRequest(
            messages=prompt.messages,
            max_tokens=self.turn.max_tokens,
            min_tokens=self.turn.min_tokens,
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
            await self._stream(r, await self._request())
        except asyncio.CancelledError:
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
            completion_tokens=self.completion.completion_tokens,
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
        await streams.publish(r, self.message_id, position, frame)

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
        await self._release(r)
        self._wrote(self.seq, frame)
        # Readers wait for this frame: a failure of the moment gets two more tries.
        for attempt in range(CLOSING_ATTEMPTS):
            try:
                await streams.publish(r, self.message_id, self.seq, frame)
                return
            except RedisError as exc:
                # A try whose reply was lost may have written the frame: its position is taken.
                if attempt and isinstance(exc, ResponseError) and "equal or smaller" in str(exc):
                    return
                if attempt == CLOSING_ATTEMPTS - 1:
                    log.warning(
                        "answer %s ended but its closing frame could not be published",
                        self.message_id,
                        exc_info=True,
                    )
                else:
                    await asyncio.sleep(0.5)

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
    return streams.follow(redisconn.client(), message_id, after)


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
    await streams.open_stream(r, turn.assistant_message_id)
    generation = Generation(turn, user_id=user.pk, engine=engine, lease=lease)
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
