"""The job runner on the real database and Redis, with a fault-injecting engine."""

import asyncio

import pytest
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, connections

from documents.text import DocumentError
from harness.waiting import until
from inference.client import EngineError
from jobs import services
from jobs.models import Document, Job, Result
from jobs.runner import document_text, run_job
from jobs.shaping import Shaper
from redisconn.keys import CHAT_ACTIVE
from tests.support.fake_engine import FakeEngine
from tests.support.jobs_helpers import aqueued_job
from tests.support.jobs_pdf import pdf_with_text

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast(settings):
    settings.BULK_RETRY_DELAY = 0.0
    settings.BULK_SHAPER_INTERVAL = 0.02
    settings.BULK_QUIET_SECONDS = 0.0
    settings.BULK_MAX_ATTEMPTS = 2


@pytest.fixture(autouse=True)
async def chat_key():
    """No chat running, whatever earlier tests left: a lease of an answer another test's web
    process was still running (it expires after CHAT_LEASE_SECONDS) made the runner yield to
    chat and run one document at a time. Tests that want chat activity set it here."""
    r = aioredis.Redis.from_url(settings.REDIS_URL)
    await r.delete(CHAT_ACTIVE)
    yield r
    await r.delete(CHAT_ACTIVE)
    await r.aclose()


def documents(n: int, words: int = 20) -> dict[str, str]:
    return {f"doc-{i}": " ".join(f"w{i}x{j}" for j in range(words)) for i in range(n)}


@sync_to_async
def statuses(job: Job) -> dict[str, str]:
    return dict(job.documents.values_list("external_id", "status"))


async def test_it_summarizes_every_document_and_completes_the_job():
    job = await aqueued_job(documents(12))
    engine = FakeEngine(delay=0.05)
    assert (
        await run_job(job_id=job.pk, worker="test/1", seconds=30, engine=engine, probe=engine) == "finished"
    )
    await job.arefresh_from_db()
    assert job.status == Job.Status.COMPLETED and job.started_at and job.finished_at
    assert set((await statuses(job)).values()) == {"done"}
    assert await Result.objects.filter(job=job).acount() == 12
    assert engine.peak > 1, "documents run concurrently, not one at a time"
    assert all(r.priority == settings.BULK_PRIORITY for r in engine.requests)
    assert all(r.messages[0]["content"] == job.instruction for r in engine.requests)


async def test_it_map_reduces_a_document_longer_than_a_chunk(settings):
    settings.BULK_CHUNK_TOKENS = 128
    job = await aqueued_job({"long": " ".join(f"t{i}" for i in range(1000))}, max_summary_tokens=32)
    engine = FakeEngine(delay=0)
    assert (
        await run_job(job_id=job.pk, worker="test/1", seconds=30, engine=engine, probe=engine) == "finished"
    )
    result = await Result.objects.aget(job=job)
    assert result.chunks == 9 and result.document_tokens == 1000
    assert result.engine_calls == 10
    assert max(len(r.messages[-1]["content"].split()) for r in engine.requests) <= 128


async def test_it_fails_a_document_after_its_attempts_and_the_job_ends_partial():
    texts = documents(5)
    texts["doc-2"] = "this one is POISON for the engine"
    job = await aqueued_job(texts)
    engine = FakeEngine(delay=0)
    assert (
        await run_job(job_id=job.pk, worker="test/1", seconds=30, engine=engine, probe=engine) == "finished"
    )
    await job.arefresh_from_db()
    assert job.status == Job.Status.PARTIAL
    poisoned = await Document.objects.aget(job=job, external_id="doc-2")
    assert poisoned.status == "failed" and poisoned.attempts == 2
    assert "Failed after 2 attempts" in poisoned.error and "boom" in poisoned.error
    assert await Result.objects.filter(job=job).acount() == 4


async def test_it_keeps_one_request_in_flight_while_chat_is_active(chat_key):
    await chat_key.set(CHAT_ACTIVE, 2)
    job = await aqueued_job(documents(6))
    engine = FakeEngine(delay=0.05)
    assert (
        await run_job(job_id=job.pk, worker="test/1", seconds=30, engine=engine, probe=engine) == "finished"
    )
    assert engine.peak == 1


async def test_it_preempts_newest_requests_when_chat_starts_and_they_do_not_lose_an_attempt(chat_key):
    job = await aqueued_job(documents(10))
    engine = FakeEngine(delay=1.0)
    shaper = Shaper(maximum=6, minimum=6, while_chat=1, quiet_seconds=60)
    run = asyncio.create_task(
        run_job(job_id=job.pk, worker="test/1", seconds=30, engine=engine, probe=engine, shaper=shaper)
    )
    assert await until(lambda: engine.active == 6)
    await chat_key.set(CHAT_ACTIVE, 1)
    assert await until(lambda: engine.active == 1)
    assert engine.aborted == 5
    assert await run == "finished"
    attempts = [d.attempts async for d in Document.objects.filter(job=job)]
    assert attempts == [1] * 10
    assert await Result.objects.filter(job=job).acount() == 10


async def test_it_aborts_in_flight_requests_on_cancel_and_keeps_finished_results():
    job = await aqueued_job(documents(8))
    engine = FakeEngine(delay=1.5)
    shaper = Shaper(maximum=4, minimum=4, while_chat=4, quiet_seconds=0)
    run = asyncio.create_task(
        run_job(job_id=job.pk, worker="test/1", seconds=30, engine=engine, probe=engine, shaper=shaper)
    )
    for _ in range(500):
        if await Result.objects.filter(job=job).acount() >= 4:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.05)
    await sync_to_async(services.job_cancel)(job=job)
    assert await run == "cancelled"
    assert engine.active == 0 and engine.aborted >= 1
    done = await Result.objects.filter(job=job).acount()
    assert 4 <= done < 8
    counts = await statuses(job)
    assert sorted(set(counts.values())) == ["cancelled", "done"]
    await job.arefresh_from_db()
    assert job.status == Job.Status.CANCELLED


async def test_it_stops_claiming_at_its_deadline_and_asks_to_continue():
    job = await aqueued_job(documents(6))
    engine = FakeEngine(delay=0.05)
    shaper = Shaper(maximum=1, minimum=1, while_chat=1, quiet_seconds=0)
    assert (
        await run_job(
            job_id=job.pk, worker="test/1", seconds=0.08, engine=engine, probe=engine, shaper=shaper
        )
        == "continue"
    )
    pending = await Document.objects.filter(job=job, status="pending").acount()
    assert 0 < pending < 6
    assert (
        await run_job(job_id=job.pk, worker="test/1", seconds=30, engine=engine, probe=engine) == "finished"
    )


async def test_it_reads_pdf_text_in_a_child_process_and_reports_bad_pdfs():
    def pdf_text(data: bytes, seconds: float):
        return document_text(data, "pdf", seconds=seconds)

    assert "Quarterly revenue grew" in await pdf_text(pdf_with_text("Quarterly revenue grew by 4%."), 30)
    with pytest.raises(DocumentError, match="could not be read"):
        await pdf_text(
            b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 9 0 R >> endobj\ntrailer << /Root 1 0 R >>", 30
        )
    with pytest.raises(DocumentError, match="took longer than"):
        await pdf_text(pdf_with_text("slow"), 0.001)
    with pytest.raises(DocumentError, match="no extractable text"):
        await pdf_text(pdf_with_text(""), 30)
    with pytest.raises(DocumentError, match="not a PDF"):
        await pdf_text(b"hello", 30)


async def test_it_fails_an_unreadable_pdf_alone_and_the_job_ends_partial():
    job = await aqueued_job(documents(2))
    await sync_to_async(Document.objects.create)(
        job=job, external_id="hostile.pdf", format="pdf", source=b"%PDF-1.7\n1 0 obj << /Pages 2 0 R"
    )
    engine = FakeEngine(delay=0)
    assert (
        await run_job(job_id=job.pk, worker="test/1", seconds=30, engine=engine, probe=engine) == "finished"
    )
    await job.arefresh_from_db()
    assert job.status == Job.Status.PARTIAL
    hostile = await Document.objects.aget(job=job, external_id="hostile.pdf")
    assert hostile.status == "failed" and "PDF" in hostile.error and hostile.attempts == 1


async def test_it_reads_an_html_document_in_the_child_process_and_stores_its_text():
    job = await aqueued_job(documents(1))
    await sync_to_async(Document.objects.create)(
        job=job, external_id="page.html", format="html", source=b"<p>Tide tables<script>x()</script>"
    )
    engine = FakeEngine(delay=0)
    assert (
        await run_job(job_id=job.pk, worker="test/1", seconds=30, engine=engine, probe=engine) == "finished"
    )
    page = await Document.objects.aget(job=job, external_id="page.html")
    assert (page.status, page.text) == ("done", "Tide tables")


async def test_it_leaves_a_job_to_the_runner_that_holds_it(settings):
    from jobs.runner import RunnerLock

    job = await aqueued_job(documents(2))
    r = aioredis.Redis.from_url(settings.REDIS_URL)
    holder = RunnerLock(r, job.pk)
    assert await holder.acquire(wait=0)
    try:
        RunnerLock.TTL, ttl = 1, RunnerLock.TTL
        started = asyncio.get_running_loop().time()
        outcome = await run_job(job_id=job.pk, worker="test/2", seconds=30, engine=FakeEngine(delay=0))
        assert outcome == "elsewhere" and asyncio.get_running_loop().time() - started >= 2
    finally:
        RunnerLock.TTL = ttl
        await holder.release()
        await r.aclose()
    assert await Document.objects.filter(job=job, status="pending").acount() == 2


class CountingShaper(Shaper):
    """Counts the runner's shaping rounds: each is a point where it would start work if let."""

    rounds = 0

    def update(self, signal):
        self.rounds += 1
        return super().update(signal)


async def test_it_pauses_while_chat_is_active_when_told_to_and_resumes_after(chat_key):
    await chat_key.set(CHAT_ACTIVE, 1)
    job = await aqueued_job(documents(3))
    engine = FakeEngine(delay=0)
    shaper = CountingShaper(maximum=4, minimum=1, while_chat=0, quiet_seconds=0)
    run = asyncio.create_task(
        run_job(job_id=job.pk, worker="test/1", seconds=30, engine=engine, probe=engine, shaper=shaper)
    )
    assert await until(lambda: shaper.rounds >= 5), "the runner made no shaping rounds"
    assert (shaper.chat_busy, shaper.limit) == (True, 0)
    assert not run.done() and engine.requests == []
    await chat_key.delete(CHAT_ACTIVE)
    assert await run == "finished"
    assert await Result.objects.filter(job=job).acount() == 3


async def test_it_goes_on_when_the_database_drops_its_connection_mid_job():
    if connection.vendor != "postgresql":
        pytest.skip("a dropped connection is shown on PostgreSQL")

    def end_this_threads_session() -> bool:
        # Runs in asgiref's thread, where the runner's database calls run, so none runs meanwhile:
        # the connection it leaves behind is dead when the runner's next call comes.
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s, 10000)", [pid])  # waits for its end
                return cursor.fetchone()[0]
        finally:
            other.close()

    job = await aqueued_job(documents(8))
    engine = FakeEngine(delay=0.3)
    shaper = Shaper(maximum=2, minimum=2, while_chat=2, quiet_seconds=0)
    run = asyncio.create_task(
        run_job(job_id=job.pk, worker="test/1", seconds=60, engine=engine, probe=engine, shaper=shaper)
    )
    assert await until(lambda: len(engine.requests) >= 2), "the job did not start"
    # As a database restart does: the server ends the session under the runner.
    assert await sync_to_async(end_this_threads_session)()
    assert await run == "finished"
    assert set((await statuses(job)).values()) == {"done"}
    assert await Result.objects.filter(job=job).acount() == 8


async def test_it_pauses_while_the_engine_is_down_and_loses_no_document():
    """An engine restarting after a crash: documents go back unspent and the run waits out the
    retry-after; it does not burn their attempts and end the job partial."""
    job = await aqueued_job(documents(6))
    down = EngineError("The engine is not reachable.", code="engine_unavailable", extra={"retry_after": 0.3})
    engine = FakeEngine(delay=0, fail_with=down)

    async def back_after_a_while():
        # Down long enough for every document's attempts to be spent twice over.
        assert await until(lambda: len(engine.requests) >= 1)
        await asyncio.sleep(1.5)
        engine.fail_with = None

    comeback = asyncio.create_task(back_after_a_while())
    assert (
        await run_job(job_id=job.pk, worker="test/1", seconds=30, engine=engine, probe=engine) == "finished"
    )
    await comeback
    await job.arefresh_from_db()
    assert job.status == Job.Status.COMPLETED
    assert set((await statuses(job)).values()) == {"done"}
    attempts = [d.attempts async for d in Document.objects.filter(job=job)]
    assert attempts == [1] * 6
    # Paused, not spinning: a few tries per retry-after while it was down, not hundreds.
    assert len(engine.requests) < 6 + 6 * 8
