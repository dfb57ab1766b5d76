"""A file at the size limit (BATCH_FILE_MAX_BYTES, 200 MiB by default) through the running web process,
up and down: its peak memory grows by a small part of the file, never by the file (Linux's peak
resident size, VmHWM, reset before the upload; bench/batch_file_memory.py reports the figures)."""

import io

import pytest
from django.conf import settings

from harness.memory import batch_lines_file, peak_growth
from tests.api.test_openai_batches_sdk import batch_client

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_web_process_never_holds_a_file_at_the_limit_whole(product_daphne, product_server, tmp_path):
    pid, size = product_daphne.process.pid, settings.BATCH_FILE_MAX_BYTES  # the web process's too
    api, _ = batch_client(product_server, "large")
    path = batch_lines_file(tmp_path / "large.jsonl", size)
    with open(path, "rb") as upload:  # the first upload loads what uploads use, once
        warm = api.files.create(file=("warm.jsonl", io.BytesIO(upload.read(1 << 20))), purpose="batch")
    api.files.delete(warm.id)
    stored = []

    def upload() -> None:
        with open(path, "rb") as file:
            stored.append(api.files.create(file=("large.jsonl", file), purpose="batch"))

    def download() -> None:
        received = 0
        with api.files.with_streaming_response.content(stored[0].id) as response:
            for chunk in response.iter_bytes(1 << 20):
                received += len(chunk)
        assert received == size

    # Twisted would parse the multipart form into memory (10 times the file, measured), and daphne
    # queue the whole body for Django; Django would read a file response whole before sending it.
    assert peak_growth(pid, upload) < size / 8
    assert stored[0].bytes == size
    assert peak_growth(pid, download) < size / 8
    api.files.delete(stored[0].id)
    path.unlink()
