"""The PDF child process: an empty environment, a CPU-time limit, and output read as it comes and
cut off at a bound (jobs/pdfread.py)."""

import json
import os
import time
import tracemalloc

import pytest

from jobs import pdfread
from jobs.ingest import DocumentError
from jobs.pdfread import pdf_text


@pytest.fixture
def probe(monkeypatch):
    monkeypatch.setattr(pdfread, "CHILD", "tests.pdf_probe")
    monkeypatch.setattr(pdfread, "decode_text", lambda out: out.decode())


async def test_it_gives_the_child_no_secrets_and_its_limits(probe, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "the-real-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://user:password@db/chat")
    described = json.loads(await pdf_text(b"describe", 30, cpu_seconds=7))
    assert "the-real-secret" not in json.dumps(described)
    assert not set(described["environment"]) & {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "PATH", "HOME"}
    assert described["limits"] == {"cpu": 7, "memory": 1024**3}
    assert os.environ["SECRET_KEY"] == "the-real-secret"  # the worker's own is untouched


async def test_it_stops_a_parse_that_spins_at_its_cpu_limit(probe):
    started = time.monotonic()
    with pytest.raises(DocumentError, match="more than 1 s of CPU time"):
        await pdf_text(b"spin", 60, cpu_seconds=1)
    # The kernel stopped it, long before the wall clock would have.
    assert time.monotonic() - started < 30


async def test_it_cuts_off_a_flood_of_text_at_the_bound_without_holding_it(probe, settings):
    settings.BULK_MAX_FILE_BYTES = 1024 * 1024  # the bound: four times that
    tracemalloc.start()
    try:
        with pytest.raises(DocumentError, match="larger than the file limit"):
            await pdf_text(b"flood", 60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024
