"""One assistant answer being generated: engine stream in, frames out to Redis.

A `Generation` runs as its own asyncio task, owned by the web process rather than
by any WebSocket: a dropped connection does not stop it. Every frame it makes
goes into the answer's Redis stream (frontend.streams), which any connection of
the user, in any web process, follows or resumes. Only an explicit stop (from any
tab: a local call, or a Redis pub/sub message from another process) or a timeout
aborts the engine request: cancelling the task closes the engine stream.

The message row is written once, when the answer ends, whichever way it ends.
While it runs, a heartbeat key says the answer is alive; the sweeper
(frontend.tasks) marks answers without one as interrupted.
"""

import asyncio
import contextvars
import logging
import time
import weakref
from collections.abc import Callable
from contextlib import aclosing

import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from django.conf import settings
from redis.exceptions import RedisError

import redisconn
from frontend import admission, metrics, protocol, services, streams
from frontend.models import Message
from frontend.protocol import Refusal
from inference.client import ChatRequest, Completion, EngineClient, EngineError
from inference.isolation import cache_salt
from inference.prompt import PromptCounts, PromptTooLong, assemble
from logcontext import bind_log_context
from redisconn import keys

log = logging.getLogger(__name__)

# Answers generating in this process, by message id: a stop from the same process is a direct call.
RUNNING: dict[int, "Generation"] = {}
# Prompt token counts the engine gave, by engine client: they spare a long conversation a
# count on every turn (inference.prompt.PromptCounts).
_prompt_counts: "weakref.WeakKeyDictionary[EngineClient, PromptCounts]" = weakref.WeakKeyDictionary()

STOP_NOTES = {
    "user": "Stopped by the user.",
    "disconnect": "The HTTP client went away before the answer finished.",
}
TIMEOUT_NOTES = {
    "timeout_first_token": "The engine sent no first token within {:g} s.",
    "timeout_between_tokens": "The engine sent no token for {:g} s.",
    "timeout_total": "The answer took longer than {:g} s.",
}


def cache_salt_for(user_id: int) -> str | None:
    """A per-user salt so the prefix cache never serves one user's history to another."""
    return cache_salt("cache-salt", user_id) if settings.CHAT_CACHE_SALT_PER_USER else None


def _dropped_note(dropped: int) -> str:
    if not dropped:
        return ""
    turns = "turn" if dropped == 1 else "turns"
    return (
        f"The {dropped} oldest {turns} of this conversation were left out of the prompt "
        "to fit the model's context window."
    )


class _Timeout(Exception):
    def __init__(self, code: str, seconds: float):
        self.code = code
        self.detail = TIMEOUT_NOTES[code].format(seconds)


def _failure(exc: Exception) -> tuple[str, str, str]:
    """(status, code, detail) for an answer that failed with `exc`."""
    if isinstance(exc, _Timeout):
        return Message.Status.TIMEOUT, exc.code, exc.detail
    if isinstance(exc, PromptTooLong):
        return Message.Status.ERROR, "prompt_too_long", str(exc)
    if isinstance(exc, EngineError):
        status = Message.Status.ERROR if exc.code == "engine_rejected" else Message.Status.INTERRUPTED
        return status, exc.code, exc.detail
    if isinstance(exc, RedisError):
        return Message.Status.INTERRUPTED, "stream_unavailable", "The token stream store is unavailable."
    return Message.Status.ERROR, "internal_error", "The answer failed unexpectedly."


class Generation:
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
        self._parts: list[str] = []
        self._seq = 0
        self.task: asyncio.Task | None = None

    def start(self) -> asyncio.Task:
        self.task = asyncio.create_task(self._run(), name=f"generation-{self.message_id}")
        RUNNING[self.message_id] = self
        self.task.add_done_callback(lambda _: RUNNING.pop(self.message_id, None))
        return self.task

    def stop(self, reason: str = "user") -> None:
        self._stop_reason = reason
        if self.task is not None:
            self.task.cancel()

    async def _run(self) -> None:
        bind_log_context(
            request_id=f"chat-{self.message_id}",
            conversation_id=self.turn.conversation_id,
            message_id=self.message_id,
        )
        metrics.generation_started()
        r = redisconn.client()
        self._watcher = asyncio.create_task(self._watch(r))
        try:
            await self._generate(r)
        finally:
            metrics.generation_ended()
            await self._release(r)

    async def _release(self, r: aioredis.Redis) -> None:
        """Give back the answer's slot and heartbeat; idempotent."""
        self._watcher.cancel()
        try:
            await r.delete(keys.chat_alive(self.message_id), keys.chat_stop_requested(self.message_id))
            if self._lease is not None:
                await admission.release(r, self._lease)
        except RedisError:
            log.warning("answer %s: could not release its slot; its lease expires", self.message_id)

    async def _watch(self, r: aioredis.Redis) -> None:
        """Keep the heartbeat and the admission lease fresh; obey stops from other processes."""
        beat = settings.CHAT_HEARTBEAT_SECONDS
        try:
            async with r.pubsub() as pubsub:
                await pubsub.subscribe(keys.chat_stop_channel(self.message_id))
                if await r.exists(keys.chat_stop_requested(self.message_id)):
                    self.stop("user")
                    return
                while True:
                    await r.set(keys.chat_alive(self.message_id), 1, ex=int(beat * 3))
                    if self._lease is not None:
                        await admission.refresh(r, self._lease)
                    deadline = time.monotonic() + beat
                    while (left := deadline - time.monotonic()) > 0:
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
                        if message is not None:
                            self.stop("user")
                            return
        except RedisError:
            log.warning("answer %s: heartbeat lost its Redis connection", self.message_id)

    async def _publish(self, r: aioredis.Redis, frame: dict) -> None:
        await streams.publish(r, self.message_id, self._seq, frame)

    async def _generate(self, r: aioredis.Redis) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        token_clock = metrics.TokenClock(started)
        total_deadline = started + settings.CHAT_TOTAL_TIMEOUT
        ttft_ms: float | None = None
        note = ""
        completion = Completion(finish_reason="")
        expiring = "timeout_first_token"

        def elapsed_ms() -> float:
            return round((loop.time() - started) * 1000, 1)

        def next_deadline(wait: float, code: str) -> float:
            nonlocal expiring
            deadline = min(loop.time() + wait, total_deadline)
            expiring = code if deadline < total_deadline else "timeout_total"
            return deadline

        try:
            prompt = await assemble(
                self.turn.system_prompt,
                self.turn.history,
                context_window=settings.INFERENCE_MAX_MODEL_LEN,
                answer_budget=self.turn.max_tokens,
                count_tokens=self._engine.count_prompt_tokens,
                counts=_prompt_counts.setdefault(self._engine, PromptCounts()),
            )
            note = _dropped_note(prompt.dropped_turns)
            request = ChatRequest(
                messages=prompt.messages,
                max_tokens=self.turn.max_tokens,
                min_tokens=self.turn.min_tokens,
                temperature=self.turn.temperature,
                priority=settings.CHAT_PRIORITY,
                cache_salt=cache_salt_for(self._user_id),
                request_id=f"chat-{self.message_id}",
            )
            try:
                async with asyncio.timeout_at(
                    next_deadline(settings.CHAT_FIRST_TOKEN_TIMEOUT, "timeout_first_token")
                ) as timer:
                    # aclosing: leaving the loop closes the engine stream at once, aborting the request.
                    async with aclosing(self._engine.stream_chat(request)) as events:
                        async for event in events:
                            if isinstance(event, Completion):
                                completion = event
                                continue
                            token_clock.tick(loop.time())
                            if ttft_ms is None:
                                ttft_ms = elapsed_ms()
                            self._parts.append(event.text)
                            await self._publish(r, protocol.token(self.message_id, self._seq, event.text))
                            self._seq += 1
                            timer.reschedule(
                                next_deadline(settings.CHAT_TOKEN_TIMEOUT, "timeout_between_tokens")
                            )
            except TimeoutError:
                seconds = {
                    "timeout_first_token": settings.CHAT_FIRST_TOKEN_TIMEOUT,
                    "timeout_between_tokens": settings.CHAT_TOKEN_TIMEOUT,
                    "timeout_total": settings.CHAT_TOTAL_TIMEOUT,
                }[expiring]
                raise _Timeout(expiring, seconds) from None
        except asyncio.CancelledError:
            fields = dict(
                status=Message.Status.STOPPED,
                finish_reason="abort",
                note=" ".join(filter(None, [note, STOP_NOTES.get(self._stop_reason, "")])),
                ttft_ms=ttft_ms,
                duration_ms=elapsed_ms(),
            )
            await self._finish(**fields)
            await self._close_stream(r, self._done_frame(fields, Completion("")))
            raise
        except Exception as exc:
            status, code, detail = _failure(exc)
            if isinstance(exc, EngineError | _Timeout):
                metrics.engine_error(code)
            if code == "internal_error":
                log.exception("answer %s failed", self.message_id)
            else:
                log.warning("answer %s failed: %s %s", self.message_id, code, detail)
            await self._finish(
                status=status,
                error_code=code,
                note=" ".join(filter(None, [note, detail])),
                ttft_ms=ttft_ms,
                duration_ms=elapsed_ms(),
            )
            extra = exc.extra if isinstance(exc, EngineError) else {}
            frame = protocol.failed(
                self.message_id,
                code=code,
                detail=detail,
                status=status,
                content="".join(self._parts),
                **extra,
            )
            await self._close_stream(r, frame)
            return
        fields = dict(
            status=Message.Status.COMPLETE,
            finish_reason=completion.finish_reason,
            note=note,
            prompt_tokens=completion.prompt_tokens,
            cached_tokens=completion.cached_tokens,
            completion_tokens=completion.completion_tokens,
            ttft_ms=ttft_ms,
            duration_ms=elapsed_ms(),
        )
        await self._finish(**fields)
        await self._close_stream(r, self._done_frame(fields, completion))

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
            content="".join(self._parts),
        )

    async def _close_stream(self, r: aioredis.Redis, frame: dict) -> None:
        # The slot is free before anyone hears the answer ended, so a follow-up is admitted.
        await self._release(r)
        try:
            await self._publish(r, frame)
        except RedisError:
            log.warning("answer %s ended but its closing frame could not be published", self.message_id)

    async def _finish(self, **fields) -> None:
        metrics.generation_finished(
            fields["status"],
            fields.get("completion_tokens"),
            fields["duration_ms"] / 1000,
            ttft_seconds=fields["ttft_ms"] / 1000 if fields.get("ttft_ms") is not None else None,
        )
        await database_sync_to_async(services.message_finish)(
            message_id=self.message_id, content="".join(self._parts), **fields
        )


async def answer_start(
    *, user, engine: EngineClient, start_turn: Callable[..., services.Turn], **arguments
) -> Generation:
    """Admit an answer, store its turn, open its stream and start generating it.

    The one way an answer begins, for the WebSocket and the HTTP stream alike.
    Raises protocol.Refusal: `busy` (nothing stored), or whatever `start_turn` refuses,
    after giving the slot back.
    """
    r = redisconn.client()
    try:
        lease = await admission.admit(r, user_id=user.pk)
    except Refusal as refusal:
        metrics.admission_refused(refusal.extra["reason"])
        raise
    try:
        turn = await database_sync_to_async(start_turn)(user=user, **arguments)
    except BaseException:
        await admission.release(r, lease)
        raise
    # Opened before anyone follows it: a leftover stream under a reused id is replaced first.
    await streams.open_stream(r, turn.assistant_message_id)
    generation = Generation(turn, user_id=user.pk, engine=engine, lease=lease)
    # A fresh context: code started from a view would otherwise send its ORM calls to
    # a thread of that view's call, which is gone once the view returns.
    contextvars.Context().run(generation.start)
    return generation
