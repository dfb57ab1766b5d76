"""The chat's answers: engine stream in (answers.run, the life every answer shares), frames out to Redis.

A `Generation` runs as its own asyncio task, owned by the web process rather than
by any WebSocket: a dropped connection does not stop it. Every frame it makes
goes into the answer's Redis stream through its `answer_frames.AnswerFrames`, which any
connection of the user, in any web process, follows or resumes. Those frames are
kept in memory too, so a follower in its own process (the socket that asked, most
of the time) is given them from there (`follow`), without a Redis read per token. Only
an explicit stop (from any tab: a local call, or a message from another process,
answers.watcher) or a timeout (answers.deadlines) aborts the engine request:
cancelling the task closes the engine stream.

The message row is written once, when the answer ends, whichever way it ends.

The answer belongs to no process either. Its stream records who owns it (answers.ownership);
the owner's heartbeat says it is alive. When the owner dies, or drains on SIGTERM and hands it
over, another web process claims it (answers.takeover) and continues it: a `Generation` made
from the frames already written (`earlier`), which asks the engine to carry on the partial answer
(`continue_final_message`) and appends to the same stream from the next position. While Redis
is away the answer goes on: its frames wait in memory (answer_frames.AnswerFrames) and are written
when Redis is back. The life every answer shares is in answers.run, the writing of its frames in
chat.streams."""

import asyncio
import contextvars
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable
from functools import partial

import orjson
import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from redis.exceptions import RedisError

import redisconn
from answers import admission, outcomes, ownership, watcher
from answers.run import RUNNING, AnswerRun, Outcome, cache_salt_for
from chat import metrics, protocol, retrieval, socket_auth, streams
from chat.answer_frames import AnswerFrames, Push
from conversations import selectors, turns
from conversations.models import Message
from httpkit.errors import Refusal
from inference.client import ChatRequest, EngineClient
from inference.prompt import PromptCounts, assemble
from redisconn import keys
from usage.models import UsageDay
from usage.services import usage_check

log = logging.getLogger(__name__)

# Prompt token counts the engine gave, by engine client: they spare a long conversation a
# count on every turn (inference.prompt.PromptCounts).
_prompt_counts: "weakref.WeakKeyDictionary[EngineClient, PromptCounts]" = weakref.WeakKeyDictionary()
# How long an ended answer's frames wait in memory for a Redis that is away before they are dropped
# (the stored row has the answer whatever happens: followers that resume read it from there).
CATCH_UP_SECONDS = 120.0
# How long past CHAT_TAKEOVER_AFTER_SECONDS a follower waits for another process to take an
# answer over (every web process scans every CHAT_TAKEOVER_SCAN_SECONDS).
TAKEOVER_GRACE = 10.0
ABANDONED = "The process generating this answer stopped, and no other could continue it."


class Generation(AnswerRun):
    """A chat answer: its frames go to the answer's Redis stream, its end to the message row."""

    usage_source = UsageDay.Source.CHAT

    def __init__(
        self,
        turn: turns.Turn,
        *,
        user_id: int,
        engine: EngineClient,
        owner: ownership.Claim,
        lease: admission.Lease | None = None,
        earlier: list[dict] = (),
        user: AbstractBaseUser | None = None,
    ):
        """`earlier`: the token frames an earlier owner wrote, when this one continues the answer;
        `user`: the asker, where the caller has them (retrieval reads them by `user_id` otherwise)."""
        super().__init__(
            user_id=user_id,
            engine=engine,
            owner=owner,
            lease=lease,
            earlier=[frame["text"] for frame in earlier],
        )
        self.turn = turn
        self.user = user
        self.message_id = turn.assistant_message_id
        # The passages the prompt quoted for this turn's question (chat.retrieval).
        self.sources: list[dict] = []
        self.frames = AnswerFrames(
            self.message_id, owner, list(earlier), superseded=partial(self.stop, "superseded")
        )

    def log_context(self) -> dict:
        return {
            "request_id": f"chat-{self.message_id}",
            "conversation_id": self.turn.conversation_id,
            "message_id": self.message_id,
        }

    def frames_after(self, after: int, push: Push | None = None) -> AsyncIterator[dict]:
        """The frames after token `after`, live, as `streams.follow` reads them from Redis: from
        memory while this process writes them (to `push`, if given), then from its stream, as
        another process writes it."""
        return self.frames.follow(after, partial(_followed, self.message_id), push)

    def ended(self) -> None:
        self.frames.end()

    async def engine_waiting(self, r: aioredis.Redis, detail: str | None) -> None:
        # Followers here hear it at once; those elsewhere when their stream is quiet (`_quiet`).
        frame = detail and protocol.notice(self.message_id, code="engine_waiting", detail=detail)
        self.frames.notice(frame or None)
        key = keys.chat_notice(self.message_id)
        try:
            if frame:
                await r.set(key, orjson.dumps(frame), ex=int(settings.CHAT_ENGINE_RESUME_SECONDS) + 60)
            else:
                await r.delete(key)
        except RedisError as exc:  # the readers here know; those elsewhere see a quiet stream
            log.warning("answer %s: its notice was not written (%s)", self.message_id, exc)

    async def request(self) -> ChatRequest | None:
        """The conversation fitted to the context window, and the partial answer to carry on
        when this continues one; None when that answer has no tokens left."""
        history, max_tokens, min_tokens = self.turn.history, self.turn.max_tokens, self.turn.min_tokens
        streamed = "".join(self.parts)
        if streamed:  # the budget is the stream's: a continued answer's text before it had its own
            self.made = made = len(await self.engine.tokenize(streamed))
            max_tokens, min_tokens = max_tokens - made, max(min_tokens - made, 0)
            if max_tokens <= 0:
                return None
        partial = self.text()
        if partial:
            history = [*history, {"role": "assistant", "content": partial}]
        retrieved = await retrieval.with_passages(
            self.turn, user=self.user, user_id=self.user_id, history=history
        )
        history, self.sources = retrieved.history, retrieved.sources
        prompt = await assemble(
            self.turn.system_prompt,
            history,
            context_window=settings.INFERENCE_MAX_MODEL_LEN,
            answer_budget=max_tokens,
            count_tokens=self.engine.count_prompt_tokens,
            counts=_prompt_counts.setdefault(self.engine, PromptCounts()),
        )
        self.note = " ".join(n for n in (outcomes.dropped_note(prompt.dropped_turns), retrieved.note) if n)
        return ChatRequest(
            messages=prompt.messages,
            continue_final_message=bool(partial),
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            temperature=self.turn.temperature,
            priority=settings.CHAT_PRIORITY,
            cache_salt=cache_salt_for(self.user_id),
            request_id=f"chat-{self.message_id}",
            affinity=f"conversation-{self.turn.conversation_id}",
            model=self.turn.model,
        )

    def text(self) -> str:
        """The answer's text so far: what came before its stream (a continued answer's), and the stream's."""
        return self.turn.prefix + "".join(self.parts)

    async def token(self, r: aioredis.Redis, seq: int, text: str) -> None:
        await self.frames.publish(r, seq, protocol.token(self.message_id, seq, text))

    async def finish(self, r: aioredis.Redis, outcome: Outcome) -> None:
        await database_sync_to_async(self._store)(outcome)
        content = self.text()
        if outcome.status in {Message.Status.COMPLETE, Message.Status.STOPPED}:
            frame = protocol.done(
                self.message_id,
                status=outcome.status,
                finish_reason=outcome.finish_reason,
                usage=protocol.usage(outcome.prompt_tokens, outcome.cached_tokens, outcome.completion_tokens),
                ttft_ms=outcome.ttft_ms,
                note=outcome.note,
                content=content,
                sources=self.sources,
            )
        else:
            frame = protocol.failed(
                self.message_id,
                code=outcome.error_code,
                detail=outcome.detail,
                status=outcome.status,
                content=content,
                **outcome.extra,
            )
        await self._close_stream(r, frame)

    # One commit for the message and the usage row: every answer's writes wait for the database's thread.
    @transaction.atomic
    def _store(self, outcome: Outcome) -> None:
        turns.message_finish(message_id=self.message_id, content=self.text(), **outcome.stored())
        self.record_usage(outcome)

    async def before_handover(self, r: aioredis.Redis) -> None:
        await self.frames.before_handover(r)

    async def _close_stream(self, r: aioredis.Redis, frame: dict) -> None:
        # The slot is free before anyone hears the answer ended, so a follow-up is admitted.
        released = await self.release_answer(r)
        await self.frames.publish(r, self.seq, frame)
        catching_up = self.frames.catching_up
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
            await self.release_answer(r)


async def take_over(r: aioredis.Redis, claim: ownership.Claim, engine: EngineClient) -> Generation | None:
    """Continue a chat answer claimed from a dead or draining process (answers.takeover) from what
    its stream holds; None when there is nothing to continue (it ended meanwhile, or its stream is
    gone, and then its row says so)."""
    message_id = claim.answer
    turn = await database_sync_to_async(turns.chat_turn_of_answer)(message_id=message_id)
    written = await streams.written(r, message_id)
    lease = admission.Lease(user_id=claim.user_id, member=claim.lease) if claim.lease else None
    if turn is None or (written and written[-1]["type"] in protocol.TERMINAL):
        await watcher.release_answer(
            r, claim, lease
        )  # it ended: its row was stored before its end was written
        return None
    if written is None:
        log.warning("answer %s: its stream is gone; it cannot be continued", message_id)
        await database_sync_to_async(turns.message_finish)(
            message_id=message_id,
            content=turn.prefix,
            status=Message.Status.INTERRUPTED,
            error_code="interrupted",
            note=ABANDONED,
        )
        await watcher.release_answer(r, claim, lease)
        return None
    if lease is not None:
        async with r.pipeline(transaction=False) as pipe:
            admission.refresh_in(pipe, lease, retake=True)
            await pipe.execute()
    log.info("answer %s: taken over after %s frames (fence %s)", message_id, len(written), claim.fence)
    generation = Generation(
        turn, user_id=claim.user_id, engine=engine, owner=claim, lease=lease, earlier=written
    )
    # A fresh context, as every answer has (answer_start).
    contextvars.Context().run(generation.start)
    return generation


def follow(message_id: int, after: int = -1, push: Push | None = None) -> AsyncIterator[dict]:
    """The answer's frames after token `after` (-1: from the start), live, until its closing frame:
    from memory when this process generates it (given to `push` as Redis holds them, if given, and
    not yielded), else from its Redis stream."""
    generation = RUNNING.get(message_id)
    if isinstance(generation, Generation) and generation.task.get_loop() is asyncio.get_running_loop():
        return generation.frames_after(after, push)
    return _followed(message_id, after)


def _followed(message_id: int, after: int) -> AsyncIterator[dict]:
    r = redisconn.client()
    return streams.follow(r, message_id, after, quiet=partial(_quiet, r, message_id))


async def _quiet(r: aioredis.Redis, message_id: int) -> dict | None:
    """A stream with no new frame for a while: None while its answer is alive or may yet be taken
    over (or why it makes no tokens, a `chat.notice`), else how it ended: from the store, or, when
    no process could continue it, as interrupted."""
    beat = await ownership.last_beat(r, message_id)
    if beat is not None and time.time() - beat < settings.CHAT_TAKEOVER_AFTER_SECONDS + TAKEOVER_GRACE:
        notice = await r.get(keys.chat_notice(message_id))
        return orjson.loads(notice) if notice else None
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
        content=message.content + protocol.text_of(written),
    )


def _checked_start(
    start_turn: Callable[..., turns.Turn], *, user, still_allowed: Callable[[], bool] | None, **arguments
) -> turns.Turn:
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
    start_turn: Callable[..., turns.Turn],
    still_allowed: Callable[[], bool] | None = None,
    **arguments,
) -> Generation:
    """Admit an answer, store its turn, open its stream and start generating it.

    The one way an answer begins, for the WebSocket and the HTTP stream alike.
    `still_allowed`, if given, runs in the turn's own trip to the database first (the socket's
    login check: socket_auth.LoggedOut when it fails, nothing stored).
    Raises Refusal: `busy` (nothing stored), or whatever `start_turn` refuses,
    after giving the slot back.

    Once called, the start runs to its end even when its caller is cancelled (a socket closed while
    its turn is stored, and the server gave up waiting for its consumer): the answer then runs and a
    reload follows it, where a start cut midway would leave a stored question whose answer row nothing
    generates and no slot given back.
    """
    starting = asyncio.ensure_future(
        _answer_begin(
            user=user, engine=engine, start_turn=start_turn, still_allowed=still_allowed, **arguments
        )
    )
    # Its refusal is read here even when no caller is left to read it.
    starting.add_done_callback(lambda task: task.cancelled() or task.exception())
    return await asyncio.shield(starting)


async def _answer_begin(
    *, user, engine: EngineClient, start_turn: Callable[..., turns.Turn], still_allowed, **arguments
) -> Generation:
    r = redisconn.client()
    lease = await admission.admit_answer(r, user_id=user.pk)
    storing = time.perf_counter()
    try:
        turn = await database_sync_to_async(_checked_start)(
            start_turn, user=user, still_allowed=still_allowed, **arguments
        )
    except BaseException:
        await admission.release_slot(r, lease)
        raise
    metrics.turn_stored(time.perf_counter() - storing)
    # Opened before anyone follows it: a leftover stream under a reused id is replaced first.
    owner = await streams.open_stream(r, turn.assistant_message_id, user_id=user.pk, lease=lease.member)
    generation = Generation(turn, user_id=user.pk, engine=engine, owner=owner, lease=lease, user=user)
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
