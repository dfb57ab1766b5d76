"""The document child process: an empty environment, a CPU-time limit, and output read as it comes
and cut off at a bound (documents/reader.py); markup that makes a parser quadratic costs nothing."""

import json
import os
import time
import tracemalloc

import pytest

from documents import reader
from documents.reader import document_text
from documents.text import DocumentError


def pdf_text(data: bytes, seconds: float, **limits) -> str:
    return document_text(data, "pdf", seconds=seconds, **limits)


@pytest.fixture
def probe(monkeypatch):
    monkeypatch.setattr(reader, "CHILD", "tests.support.document_probe")


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


async def test_it_reads_unclosed_tags_that_make_html_parser_quadratic_in_linear_time():
    # `<a<a<a…`: the standard library's html.parser took 4.5 s for 64 KB and would take a day for
    # the 10 MiB the file limit allows. The child reads the whole 10 MiB within its 20 s of CPU.
    started = time.monotonic()
    with pytest.raises(DocumentError, match="The HTML has no text"):
        await document_text(b"<a" * (5 * 1024 * 1024), "html", seconds=60)
    assert time.monotonic() - started < 20


async def test_it_reads_html_text_without_scripts_and_styles():
    html = b"<html><head><style>p{}</style><script>x()</script></head><body><p>Hello &amp; bye<div>two"
    assert await document_text(html, "html") == "Hello & bye\ntwo"
