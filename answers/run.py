"""One answer's whole life, the same for every surface: admitted, requested, streamed within its time
limits, ended (complete, stopped or failed), counted and stored.

`AnswerRun` is that life; what differs between surfaces is where its tokens and its end go, its
sink: the chat's answer (chat.generation) writes frames to the answer's Redis stream, which
any socket or SSE client follows and any web process can continue, and stores the message; the
OpenAI-compatible API's (openai_api.serving) hands them to the one HTTP response waiting for them
and records the exchange. Both run as a task of the web process that no connection owns, keep
their admission slot and their heartbeat in Redis (answers.watcher, answers.ownership), and count
the prompt of every request the engine started, stopped ones included.

An answer that can be continued (a chat answer) outlives its engine too: when the engine goes away
after its first token (a replica killed, the engine restarting), it waits for an engine to answer
again, up to CHAT_ENGINE_RESUME_SECONDS, its deadlines paused and its readers told why
(`engine_waiting`), then asks it to carry on the partial text as a takeover does, within the
remaining budget.
"""

import asyncio
import logging
from contextlib import aclosing
from dataclasses import replace

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import RedisError

import redisconn
from answers import admission, metrics, outcomes, ownership, pacing, watcher
from answers.deadlines import Deadlines
from answers.outcomes import Outcome
from answers.process import RUNNING
from answers.status import AnswerStatus
from inference.client import ChatRequest, Completion, EngineClient, EngineError
from inference.isolation import cache_salt
from logcontext import bind_log_context
from usage.services import usage_record

log = logging.getLogger(__name__)

# Stops that end the answer here without ending it: another process continues it.
LEAVING = frozenset({"superseded", "handover"})
# Failures of the engine that another engine, or the same one restarted, can recover from; a refused
# request (engine_rejected), an error the engine reported, or a silent engine (a deadline) is final.
ENGINE_LOST = frozenset({"engine_unavailable", "engine_timeout"})
# The waits between tries while the engine is away: doubling from the first to the last.
RESUME_WAITS = (0.5, 5.0)


def cache_salt_for(user_id: int) -> str | None:
    """A per-user salt so the prefix cache never serves one user's history to another."""
    return cache_salt("cache-salt", user_id) if settings.CHAT_CACHE_SALT_PER_USER else None


class AnswerRun:
    """One answer. Its state: the text so far (`parts`), the next token's `seq`, the time to its
    first token, the note for the reader, the prompt's tokens and the engine's closing figures.
    A sink says what the request is (`request`) and where tokens (`token`) and the end (`finish`) go."""

    usage_source: str
    # Whether another process can carry the answer on (a chat answer) or only record it (an API
    # answer, whose one reader is a connection to this process).
    continuable = True

    def __init__(
        self,
        *,
        user_id: int,
        engine: EngineClient,
        owner: ownership.Claim,
        lease: admission.Lease | None,
        earlier: list[str] = (),
    ):
        """`earlier`: the texts of the tokens an earlier owner streamed, when this one continues."""
        self.user_id = user_id
        self.engine = engine
        self.owner = owner
        self._lease = lease
        self._stop_reason = "user"
        self._stopping = False
        self._ending = False
        self.task: asyncio.Task | None = None
        self.parts: list[str] = list(earlier)
        self.seq = len(earlier)
        self.ttft_ms: float | None = None
        self.note = ""
        self.prompt_tokens: int | None = None
        self.completion = Completion(finish_reason="")
        # Tokens of the partial answer an earlier owner made (counted when this one continues it).
        self.made = 0
        self._started = 0.0
        # Seconds spent waiting for the engine to come back, by which the deadlines are put off,
        # and the prompt tokens of the requests the engine lost (the answer's usage counts them).
        self._waited = 0.0
        self._lost_prompt_tokens = 0
        # Tries since the engine was lost, and whether the readers were told it is away.
        self._engine_tries = 0
        self._told_waiting = False

    # What a sink provides.

    async def request(self) -> ChatRequest | None:
        """The engine request; None when the answer has nothing left to make."""
        raise NotImplementedError

    async def token(self, r: aioredis.Redis, seq: int, text: str) -> None:
        """Pass on token `seq`."""
        raise NotImplementedError

    async def finish(self, r: aioredis.Redis, outcome: Outcome) -> None:
        """Store and announce how the answer ended (`record_usage` counts it)."""
        raise NotImplementedError

    def log_context(self) -> dict:
        raise NotImplementedError

    def so_far(self) -> dict | None:
        """What each heartbeat keeps of the answer for a process that cannot continue it."""
        return None

    def ended(self) -> None:
        """The answer's task is ending (a sink wakes its followers)."""

    async def engine_waiting(self, r: aioredis.Redis, detail: str | None) -> None:
        """Tell the answer's readers that it waits for the engine (`detail` says why), or, with
        None, that it goes on."""

    async def before_handover(self, r: aioredis.Redis) -> None:
        """The answer is about to be left to another process: what it made must be where that
        process reads it (a sink that keeps frames writes them)."""

    # The life.

    def start(self) -> asyncio.Task:
        answer = self.owner.answer
        self.task = asyncio.create_task(self._run(), name=f"answer-{answer}")
        RUNNING[answer] = self
        self.task.add_done_callback(lambda _: RUNNING.pop(answer, None))
        return self.task

    def stop(self, reason: str = "user") -> None:
        """Cancel the answer once: a second stop (another tab, a repeated key) must not cut
        short the storing and announcing of the stopped answer that the first one began.
        `reason` "superseded" (another process owns it now) and "handover" (this process is
        draining) end it here without ending it: nothing is stored or announced. Any other stop
        that lands once the answer is ending (being stored and announced) has nothing left to
        stop: a user's or a client's would cut its end short, leaving the answer unstored and
        unannounced, and a drain's would leave another process to continue it past its end."""
        if self.task is None or self._stopping or (self._ending and reason != "superseded"):
            return
        self._stopping = True
        self._stop_reason = reason
        self.task.cancel()

    async def _run(self) -> None:
        bind_log_context(**self.log_context())
        metrics.generation_started()
        r = redisconn.client()
        self._watcher = asyncio.create_task(
            watcher.watch(r, self.owner, self._lease, self.stop, so_far=self.so_far)
        )
        try:
            await self._generate(r)
        finally:
            self.ended()
            metrics.generation_ended()
            if self._stop_reason == "handover":
                await self.before_handover(r)
            if self._stop_reason != "superseded":  # the slot and the answer are another's now
                await self.release_answer(r, handover=self._stop_reason == "handover")

    async def release_answer(self, r: aioredis.Redis, *, handover: bool = False) -> bool:
        """Give back the slot and leave the answer (idempotent); False when Redis is away."""
        self._watcher.cancel()
        return await watcher.release_answer(r, self.owner, self._lease, handover=handover)

    def elapsed_ms(self) -> float:
        return round((asyncio.get_running_loop().time() - self._started) * 1000, 1)

    async def _generate(self, r: aioredis.Redis) -> None:
        loop = asyncio.get_running_loop()
        self._started = loop.time()
        resume_by: float | None = None
        while True:
            try:
                await self._attempt(r)
            except asyncio.CancelledError:
                if self._stop_reason not in LEAVING:
                    await self._end(r, self._stopped())
                raise
            except Exception as exc:
                if self._engine_lost(exc):
                    resume_by = resume_by or loop.time() + settings.CHAT_ENGINE_RESUME_SECONDS
                    if await self._wait_for_engine(r, exc, resume_by):
                        continue
                await self._end(r, await self._failed(r, exc))
                return
            break
        await self._end(r, self._complete())

    async def _attempt(self, r: aioredis.Redis) -> None:
        """One engine request for the rest of the answer, within its deadlines (put off by the
        time spent waiting for the engine)."""
        # Assembling the prompt (the engine counts a long history) is within the first token's limit.
        async with Deadlines(self._started + self._waited).enforced() as deadlines:
            request = await self.request()
            if request is None:
                self.completion = Completion(finish_reason="length")
            else:
                await self._stream(r, request, deadlines)

    def _engine_lost(self, exc: Exception) -> bool:
        """Whether the engine went away mid-answer. Before the first token an unreachable engine is
        refused at once, as ever: the reader has nothing to wait for yet, and can ask again."""
        return self.continuable and self.seq > 0 and isinstance(exc, EngineError) and exc.code in ENGINE_LOST

    async def _wait_for_engine(self, r: aioredis.Redis, exc: EngineError, resume_by: float) -> bool:
        """The engine went away: wait before the next try, as long as the answer may (False when
        `resume_by` has passed). The prompt the lost request held is counted."""
        loop = asyncio.get_running_loop()
        if loop.time() >= resume_by:
            return False
        self._lost_prompt_tokens += self.prompt_tokens or 0
        self.prompt_tokens = None
        self._engine_tries += 1
        wait = min(RESUME_WAITS[0] * 2 ** (self._engine_tries - 1), RESUME_WAITS[1])
        wait = min(max(wait, exc.extra.get("retry_after", 0)), resume_by - loop.time())
        log.warning("answer %s: the engine went away (%s); next try in %.1f s", self.owner.answer, exc, wait)
        if not self._told_waiting:
            metrics.engine_lost()
            self._told_waiting = True
            await self.engine_waiting(r, outcomes.ENGINE_WAIT_DETAIL)
        began = loop.time()
        await asyncio.sleep(wait)
        self._waited += loop.time() - began
        return True

    async def _stream(self, r: aioredis.Redis, request: ChatRequest, deadlines: Deadlines) -> None:
        """Pass on the engine's tokens as they come, within the answer's time limits."""
        loop = asyncio.get_running_loop()
        clock = metrics.TokenClock(self._started)
        pace = pacing.Pace()
        interval = pacing.stream_interval()
        if interval != request.stream_interval:
            request = replace(request, stream_interval=interval)
        # aclosing: leaving the loop closes the engine stream at once, aborting the request.
        async with aclosing(self.engine.stream_chat(request)) as events:
            try:
                async for event in events:
                    if isinstance(event, Completion):
                        self.completion = event
                        continue
                    clock.tick(loop.time())
                    if self.ttft_ms is None:
                        self.ttft_ms = self.elapsed_ms()
                    if event.prompt_tokens is not None:
                        self.prompt_tokens = event.prompt_tokens
                    if self._told_waiting:  # an engine answers again
                        self._told_waiting, self._engine_tries = False, 0
                        await self.engine_waiting(r, None)
                    self.parts.append(event.text)
                    # The position is taken before the token is passed on: a stop landing while
                    # it is written must not give the closing frame the token's position.
                    seq, self.seq = self.seq, self.seq + 1
                    await self.token(r, seq, event.text)
                    redisconn.raise_if_cancelled()  # a stop or deadline during the write
                    deadlines.token_arrived()
                    await pace.sent()
            finally:
                clock.flush()

    def _complete(self) -> Outcome:
        return Outcome(
            status=AnswerStatus.COMPLETE,
            finish_reason=self.completion.finish_reason,
            note=self.note,
            prompt_tokens=self._prompt_tokens(self.completion.prompt_tokens),
            cached_tokens=self.completion.cached_tokens,
            completion_tokens=(self.completion.completion_tokens or 0) + self.made or None,
            ttft_ms=self.ttft_ms,
            duration_ms=self.elapsed_ms(),
        )

    def _stopped(self) -> Outcome:
        return Outcome(
            status=AnswerStatus.STOPPED,
            finish_reason="abort",
            note=" ".join(filter(None, [self.note, outcomes.STOP_NOTES.get(self._stop_reason, "")])),
            prompt_tokens=self._prompt_tokens(self.prompt_tokens),
            ttft_ms=self.ttft_ms,
            duration_ms=self.elapsed_ms(),
        )

    async def _failed(self, r: aioredis.Redis, exc: Exception) -> Outcome:
        status, code, detail = await outcomes.reported_failure(r, exc, f"answer {self.owner.answer}")
        return Outcome(
            status=status,
            error_code=code,
            note=" ".join(filter(None, [self.note, detail])),
            prompt_tokens=self._prompt_tokens(self.prompt_tokens),
            ttft_ms=self.ttft_ms,
            duration_ms=self.elapsed_ms(),
            detail=detail,
            extra=exc.extra if isinstance(exc, EngineError) else {},
        )

    def _prompt_tokens(self, last: int | None) -> int | None:
        """The prompt tokens of every request the engine began: the last one's, and those it lost."""
        if not self._lost_prompt_tokens:
            return last
        return (last or 0) + self._lost_prompt_tokens

    async def _end(self, r: aioredis.Redis, outcome: Outcome) -> None:
        self._ending = True
        if not await self._still_owned(r):
            # Taken over while this process was too slow to beat (a stalled event loop): how the
            # answer ends is its new owner's to store and announce, not this one's.
            log.warning("answer %s: another process owns it now; its end is not stored", self.owner.answer)
            self._stop_reason = "superseded"
            return
        metrics.generation_finished(
            outcome.status,
            outcome.completion_tokens,
            outcome.duration_ms / 1000,
            ttft_seconds=outcome.ttft_ms / 1000 if outcome.ttft_ms is not None else None,
        )
        await self.finish(r, outcome)

    async def _still_owned(self, r: aioredis.Redis) -> bool:
        """Whether this process still owns the answer, checked (with a heartbeat) just before its end
        is stored: the frames are fenced in Redis, the stored row is not. With Redis away nobody can
        have claimed it since."""
        try:
            return await ownership.beat(r, self.owner, self.so_far())
        except RedisError:
            return True

    def record_usage(self, outcome: Outcome) -> None:
        """Count the answer's tokens against the user's day (synchronous: in the store's commit).
        An answer cut short has no engine figures: its streamed tokens count (about one a delta),
        and its prompt as the engine counted it when it began."""
        usage_record(
            user_id=self.user_id,
            source=self.usage_source,
            prompt_tokens=outcome.prompt_tokens,
            cached_tokens=outcome.cached_tokens,
            completion_tokens=outcome.completion_tokens or self.seq,
        )
