"""A large file through the running web process, up and down: its peak memory grows by a small part
of the file, never by the file (Linux's peak resident size, VmHWM, reset before the upload)."""

import io
import os
from pathlib import Path

import pytest

from tests.api.test_openai_batches_sdk import batch_client

pytestmark = pytest.mark.django_db(transaction=True)
SIZE = 64 * 1024 * 1024


def resident(pid: int, field: str) -> int:
    """A /proc/PID/status size (VmRSS, VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


def peak_growth(pid: int, act) -> int:
    """How far the process's peak resident size rose above its size before `act` ran."""
    before = resident(pid, "VmRSS")
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM starts again from VmRSS
    act()
    return resident(pid, "VmHWM") - before


def test_the_web_process_never_holds_a_large_file_whole(product_daphne, product_server, tmp_path):
    pid = product_daphne.process.pid
    api, _ = batch_client(product_server, "large")
    path = tmp_path / "large.jsonl"
    line = b'{"custom_id": "x", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'
    block = line * ((1 << 20) // len(line) + 1)
    with open(path, "wb") as out:
        while out.tell() < SIZE:
            out.write(block[: SIZE - out.tell()])
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
        assert received == SIZE

    # Twisted would parse the multipart form into memory (10 times the file, measured), and daphne
    # queue the whole body for Django; Django would read a file response whole before sending it.
    assert peak_growth(pid, upload) < SIZE / 8
    assert stored[0].bytes == SIZE
    assert peak_growth(pid, download) < SIZE / 8
    os.remove(path)
