"""A job's run in one worker: claim documents, keep the shaped number of engine
requests in flight, write each result as it ends.

`run_job` is what the Celery task calls (inside `asyncio.run`). It stops claiming
at its deadline and returns "continue" so the task can queue the rest, which keeps
every task well inside its time limits. The database calls go through Channels'
`database_sync_to_async`, which closes a connection that is broken or past its age
before and after each call, as Django does around a request: a connection the database
dropped (a restart, a failover) is replaced, not reused. The engine is reached through
inference.engine only. A document's actions are in jobs.claims, load shaping in jobs.shaping,
map-reduce summarizing in jobs.summarize."""

import asyncio
import contextlib
import functools
import logging
import os
import time
import uuid

import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone
from redis.exceptions import RedisError

import redisconn
from documents.reader import document_text
from documents.text import DocumentError
from inference.client import EngineClient, EngineError, EngineProbe
from inference.engine import engine_probe, new_engine_client
from jobs import claims, kinds, selectors
from jobs.models import Job
from jobs.shaping import LoadProbe, Shaper
from jobs.summarize import Summarizer, Summary, cache_salt_for_owner
from redisconn import keys

log = logging.getLogger(__name__)

# Engine failures worth another attempt; a refused request fails the same way again.
PERMANENT_CODES = {"engine_rejected"}
# Not the document's failure: the engine is down (restarting) or its circuit is open. The run
# pauses instead of spending the document's attempts.
ENGINE_DOWN = "engine_unavailable"
STATUS_EVERY = 1.0


def new_shaper(kind: str = "") -> Shaper:
    """The shaper of one run of a job of `kind`: its kind's ceiling (jobs.kinds), or BULK_CONCURRENCY."""
    own = kinds.KINDS[kind].concurrency if kind in kinds.KINDS else None
    return Shaper(
        maximum=own() if own is not None else settings.BULK_CONCURRENCY,
        minimum=settings.BULK_CONCURRENCY_MIN,
        while_chat=settings.BULK_CONCURRENCY_WHILE_CHAT,
        quiet_seconds=settings.BULK_QUIET_SECONDS,
    )


class RunnerLock:
    """One runner per job at a time, across workers: a Redis key the runner refreshes every
    tick. A duplicate task (a redelivery, a resume after a restart) waits for a dead
    runner's key to expire and then takes over; beside a live runner it gives up."""

    TTL = 10

    def __init__(self, r: aioredis.Redis, job_id: int) -> None:
        self._redis = r
        self._key = keys.job_runner_lock(job_id)
        self._token = uuid.uuid4().hex

    async def acquire(self, *, wait: float) -> bool:
        deadline = time.monotonic() + wait
        while not await self._redis.set(self._key, self._token, nx=True, ex=self.TTL):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.5)
        return True

    async def refresh(self) -> bool:
        """Extend the key, or take it again where it lapsed (Redis was away longer than its TTL, or
        came back without it); False when another runner holds it now."""
        if await self._redis.set(self._key, self._token, nx=True, ex=self.TTL):
            return True
        if await self._redis.get(self._key) != self._token.encode():
            return False
        await self._redis.expire(self._key, self.TTL)
        return True

    async def release(self) -> None:
        if await self._redis.get(self._key) == self._token.encode():
            await self._redis.delete(self._key)


class JobRunner:
    def __init__(
        self,
        *,
        job: Job,
        worker: str,
        engine: EngineClient,
        probe: LoadProbe,
        lock: RunnerLock,
        shaper: Shaper,
        deadline: float,
        interval: float,
        preempt: bool,
    ) -> None:
        self.job_id = job.pk
        self.worker = worker
        self._engine = engine
        self._probe = probe
        self._lock = lock
        self.shaper = shaper
        self._deadline = deadline
        self._interval = interval
        self._preempt = preempt
        self._summarizer = Summarizer(
            engine,
            instruction=job.instruction,
            max_tokens=job.max_summary_tokens,
            priority=settings.BULK_PRIORITY,
            temperature=settings.BULK_TEMPERATURE,
            chunk_tokens=settings.BULK_CHUNK_TOKENS,
            context_window=settings.INFERENCE_MAX_MODEL_LEN,
            cache_salt=cache_salt_for_owner(job.owner_id),
        )
        # A job of another kind checks and runs its lines with that kind's code (jobs.kinds).
        kind = None if job.kind == Job.SUMMARY else kinds.KINDS[job.kind]
        self._lines = kind.lines(job.owner_id, engine) if kind else None
        self._admit = functools.partial(kind.admit, job.owner_id) if kind else None
        # Started tasks in start order, so preemption takes the newest.
        self._inflight: dict[asyncio.Task, claims.Claim] = {}
        self._preempted: set[asyncio.Task] = set()
        # What ended lines came to, written with the next round (claims.documents_record).
        self._outcomes: list[claims.Outcome] = []
        self.peak_inflight = 0
        self._engine_back_at = -float("inf")

    async def run(self) -> str:
        """Work until the job has nothing left here; "finished", "continue", "cancelled" or "elsewhere"."""
        try:
            return await self._loop()
        finally:
            await self._stop_all()

    async def _loop(self) -> str:
        loop = asyncio.get_running_loop()
        checked_at = shaped_at = -float("inf")
        redis_away = False
        limit = 0
        while True:
            # Redis (the lock and the load signals) is read once per interval, not at every line's end.
            if loop.time() - shaped_at >= self._interval:
                shaped_at = loop.time()
                try:
                    held = await self._lock.refresh()
                    signal = await self._probe.read(len(self._inflight))
                except RedisError as exc:
                    # Redis away (restarting): the lines in flight go on and are written to the
                    # database; nothing more is claimed, and the run does not end, until it answers.
                    if not redis_away:
                        log.warning("job %s: Redis unreachable (%r); claiming nothing", self.job_id, exc)
                    redis_away, limit = True, 0
                else:
                    if redis_away:
                        log.info("job %s: Redis answers again; claiming again", self.job_id)
                        redis_away = False
                    if not held:
                        return "elsewhere"
                    limit = self.shaper.update(signal)
                if self._preempt and self.shaper.chat_busy:
                    self._preempt_above(limit)
            allowed = 0 if loop.time() < self._engine_back_at else limit  # paused until the engine is back
            out_of_time = loop.time() >= self._deadline
            want = 0 if out_of_time else max(0, allowed - len(self._inflight))
            # A cancel is seen within a second; the database is not asked every tick.
            check = loop.time() - checked_at >= STATUS_EVERY
            if check:
                checked_at = loop.time()
            if self._outcomes or want or check:
                status, claimed = await self._round(want=want, check=check)
                if status not in Job.ACTIVE:
                    return "cancelled"
                for claim, admitted in claimed:
                    task = asyncio.create_task(
                        self._process(claim, admitted), name=f"job-{self.job_id}-doc-{claim.document_id}"
                    )
                    self._inflight[task] = claim
            self.peak_inflight = max(self.peak_inflight, len(self._inflight))
            if not self._inflight and not self._outcomes:
                if out_of_time and not redis_away:  # the continuation is queued through Redis
                    return "continue"
                if allowed == 0:  # paused while chat is active, the engine is down, or Redis is away
                    await asyncio.sleep(self._interval)
                    continue
                if await database_sync_to_async(selectors.job_status)(job_id=self.job_id) not in Job.ACTIVE:
                    return "cancelled"
                backlog = await database_sync_to_async(selectors.job_backlog)(job_id=self.job_id)
                if backlog.next_retry_at is not None:
                    wait = (backlog.next_retry_at - timezone.now()).total_seconds()
                    await asyncio.sleep(min(max(wait, self._interval), 5.0))
                    continue
                return "elsewhere" if backlog.held_elsewhere else "finished"
            if self._inflight:
                done, _ = await asyncio.wait(
                    self._inflight, timeout=self._interval, return_when="FIRST_COMPLETED"
                )
                self._collect(done)

    async def _round(self, *, want: int, check: bool) -> tuple[str | None, list[tuple[claims.Claim, object]]]:
        """One trip to the database: the outcomes so far written, the job's status read (`check`),
        and up to `want` more lines claimed and admitted. A database that fails it keeps the
        outcomes for the next round."""
        outcomes = self._outcomes
        self._outcomes = []
        try:
            return await database_sync_to_async(self._round_sync)(outcomes, want, check)
        except DatabaseError as exc:
            log.warning("job %s: the database failed a round (%r); trying again", self.job_id, exc)
            self._outcomes = outcomes + self._outcomes
            await asyncio.sleep(self._interval)
            return Job.Status.RUNNING, []

    def _round_sync(
        self, outcomes: list[claims.Outcome], want: int, check: bool
    ) -> tuple[str | None, list[tuple[claims.Claim, object]]]:
        if outcomes:
            claims.documents_record(worker=self.worker, outcomes=outcomes)
        status = selectors.job_status(job_id=self.job_id) if check else Job.Status.RUNNING
        if status not in Job.ACTIVE or not want:
            return status, []
        claimed = claims.documents_claim(job_id=self.job_id, worker=self.worker, count=want)
        if self._admit is None or not claimed:
            return status, [(claim, None) for claim in claimed]
        try:
            admitted = self._admit(claimed)
        except Exception as exc:
            log.exception("job %s: admitting %s lines failed", self.job_id, len(claimed))
            failed = [claims.Failed(c.document_id, internal_error(exc), retryable=True) for c in claimed]
            claims.documents_record(worker=self.worker, outcomes=failed)
            return status, []
        refused = {
            claim.document_id: self._fail(claim, verdict.message, retryable=False, code=verdict.code)
            for claim in claimed
            if isinstance(verdict := admitted[claim.document_id], kinds.LineRefused)
        }
        if refused:
            claims.documents_record(worker=self.worker, outcomes=list(refused.values()))
        return status, [(c, admitted[c.document_id]) for c in claimed if c.document_id not in refused]

    def _collect(self, done: set[asyncio.Task]) -> None:
        """Keep what ended tasks came to: a task cancelled (preempted, a cancelled job, the run
        ending) gives its line back without using its attempt."""
        for task in done:
            claim = self._inflight.pop(task)
            self._preempted.discard(task)
            if task.cancelled():
                self._outcomes.append(claims.Released(claim.document_id))
            elif task.exception() is not None:
                exc = task.exception()
                log.error("document %s of job %s failed", claim.document_id, self.job_id, exc_info=exc)
                self._outcomes.append(claims.Failed(claim.document_id, internal_error(exc), retryable=True))
            else:
                self._outcomes.append(task.result())

    def _preempt_above(self, limit: int) -> None:
        running = [t for t in self._inflight if t not in self._preempted]
        for task in reversed(running[limit:]):
            self._preempted.add(task)
            task.cancel()

    async def _stop_all(self) -> None:
        """Cancel the lines in flight and write what every line came to."""
        tasks = list(self._inflight)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
            self._collect(set(tasks))
        if self._outcomes:
            record = database_sync_to_async(claims.documents_record)
            try:
                await record(worker=self.worker, outcomes=self._outcomes)
            except DatabaseError as exc:
                # Their leases expire and the lines run again; none was billed.
                log.error("job %s: %s outcomes not written (%r)", self.job_id, len(self._outcomes), exc)
            self._outcomes = []

    async def _process(self, claim: claims.Claim, admitted: object) -> claims.Outcome:
        started = time.monotonic()
        try:
            summary = await (self._lines(claim, admitted) if self._lines else self._summary(claim))
        except DocumentError as exc:
            return self._fail(claim, str(exc), retryable=False)
        except kinds.LineRefused as exc:
            return self._fail(claim, exc.message, retryable=False, code=exc.code)
        except EngineError as exc:
            if exc.code == ENGINE_DOWN:
                return self._wait_for_engine(claim, exc)
            return self._fail(
                claim, f"{exc.code}: {exc.detail}", retryable=exc.code not in PERMANENT_CODES, code=exc.code
            )
        except Exception as exc:
            log.exception("document %s of job %s failed", claim.document_id, self.job_id)
            return self._fail(claim, internal_error(exc), retryable=True)
        return claims.Done(claim.document_id, summary, round((time.monotonic() - started) * 1000, 1))

    async def _summary(self, claim: claims.Claim) -> Summary:
        text = claim.text
        if not text and claim.source is not None:
            text = await document_text(claim.source, claim.format)
            await database_sync_to_async(claims.document_set_text)(document_id=claim.document_id, text=text)
        return await self._summarizer.summarize(
            text, request_id=f"job-{self.job_id}-doc-{claim.document_id}-a{claim.attempt}"
        )

    def _wait_for_engine(self, claim: claims.Claim, exc: EngineError) -> claims.Released:
        """The engine is down or restarting: the document goes back without using an attempt,
        and the run claims nothing until the engine's retry-after has passed. A restart that
        takes minutes pauses the job for minutes; it loses no document."""
        retry_after = float(exc.extra.get("retry_after") or 1.0)
        self._engine_back_at = max(self._engine_back_at, asyncio.get_running_loop().time() + retry_after)
        log.warning(
            "document %s of job %s: engine unavailable; pausing %.0f s",
            claim.document_id,
            self.job_id,
            retry_after,
        )
        return claims.Released(claim.document_id)

    def _fail(self, claim: claims.Claim, error: str, *, retryable: bool, code: str = "") -> claims.Failed:
        log.warning("document %s of job %s: %s", claim.document_id, self.job_id, error)
        return claims.Failed(claim.document_id, error, retryable=retryable, code=code)


def internal_error(exc: BaseException) -> str:
    """A line's error where the product itself failed: retried, its cause in the log."""
    return f"internal_error: {exc.__class__.__name__}"


def local_worker_id() -> str:
    return f"local/{os.getpid()}"


async def run_job(
    *,
    job_id: int,
    worker: str,
    seconds: float,
    engine: EngineClient | None = None,
    probe: EngineProbe | None = None,
    shaper: Shaper | None = None,
) -> str:
    """Run a job here for up to `seconds`; finish it when nothing is left. Returns the outcome.
    `engine` answers and `probe` tells the engine's load: the real engine's unless given."""
    job = await database_sync_to_async(Job.objects.filter(pk=job_id).first)()
    if job is None:
        return "gone"
    if job.status not in Job.ACTIVE:
        return job.status
    await database_sync_to_async(claims.job_mark_running)(job_id=job_id)
    own_engine = new_engine_client() if engine is None else None
    engine = engine or own_engine
    r = redisconn.new_client()
    lock = RunnerLock(r, job_id)
    if not await lock.acquire(wait=RunnerLock.TTL + 1):
        await r.aclose()
        if own_engine is not None:
            await own_engine.aclose()
        return "elsewhere"
    load = LoadProbe(r, probe or engine_probe())
    runner = JobRunner(
        job=job,
        worker=worker,
        engine=engine,
        probe=load,
        lock=lock,
        shaper=shaper or new_shaper(job.kind),
        deadline=asyncio.get_running_loop().time() + seconds,
        interval=settings.BULK_SHAPER_INTERVAL,
        preempt=settings.BULK_PREEMPT,
    )
    try:
        outcome = await runner.run()
    finally:
        # Both keys expire by themselves where Redis is away now.
        with contextlib.suppress(RedisError):
            await load.close()
            await lock.release()
        await r.aclose()
        if own_engine is not None:
            await own_engine.aclose()
    if outcome == "finished":
        final = await database_sync_to_async(claims.job_finish)(job_id=job_id)
        log.info("job %s finished: %s (peak %s in flight)", job_id, final, runner.peak_inflight)
    if outcome in ("finished", "cancelled") and job.kind != Job.SUMMARY:
        await database_sync_to_async(kinds.KINDS[job.kind].ended)(job_id)
    return outcome
