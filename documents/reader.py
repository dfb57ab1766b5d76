"""Reading a document's text without trusting it: the parse runs in a child process (documents.child)
with a memory limit, a CPU-time limit and an empty environment (no SECRET_KEY, no DATABASE_URL),
under a wall-clock timeout; its output is read as it comes and cut off at a bound, so neither a
parser loop, a decompression bomb, a quadratic parse nor a flood of text reaches the web process or
the worker, which only await it."""

import asyncio
import math
import signal
import sys

from django.conf import settings

from documents.text import DocumentError

# The child module; tests swap in a probe that misbehaves on purpose.
CHILD = "documents.child"
STDERR_BYTES = 64 * 1024
# Enough for the interpreter to start and decode UTF-8 whatever the host's locale; nothing secret.
CHILD_ENVIRONMENT = {"PYTHONUTF8": "1", "PYTHONDONTWRITEBYTECODE": "1"}


class TooMuchOutput(Exception):
    pass


def file_limit() -> int:
    """The most bytes a document file may have, however it arrives (BULK_MAX_FILE_BYTES): a bulk
    job's upload or a chat attachment."""
    return settings.BULK_MAX_FILE_BYTES


async def _read_bounded(stream: asyncio.StreamReader, limit: int, *, cut: bool = False) -> bytes:
    """All of `stream`, up to `limit` bytes: past it TooMuchOutput, or with `cut` the first `limit`."""
    chunks, size = [], 0
    while chunk := await stream.read(64 * 1024):
        size += len(chunk)
        if size > limit:
            if not cut:
                raise TooMuchOutput
            continue  # drain, keep nothing more
        chunks.append(chunk)
    return b"".join(chunks)


async def _discard(stream: asyncio.StreamReader) -> None:
    while await stream.read(64 * 1024):
        pass


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    try:
        stdin.write(data)
        await stdin.drain()
        stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the child stopped reading: its exit status says why


async def document_text(data: bytes, format: str, *, seconds: float | None = None,
                        cpu_seconds: float | None = None, page_breaks: bool = False) -> str:  # fmt: skip
    """Text of a document (`format`: text, html or pdf), read in a child process killed after
    `seconds` (BULK_PDF_TIMEOUT) of wall clock or `cpu_seconds` (BULK_PDF_CPU_SECONDS) of CPU
    time; DocumentError says why it failed. `page_breaks`: a form feed ends each PDF page."""
    seconds = settings.BULK_PDF_TIMEOUT if seconds is None else seconds
    cpu = math.ceil(cpu_seconds if cpu_seconds is not None else settings.BULK_PDF_CPU_SECONDS)
    limit = file_limit() * 4
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        CHILD,
        "--cpu-seconds",
        str(cpu),
        "--format",
        format,
        *(["--page-breaks"] if page_breaks else []),
        cwd=str(settings.BASE_DIR),
        env=CHILD_ENVIRONMENT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    io = [
        asyncio.create_task(_feed(process.stdin, data)),
        asyncio.create_task(_read_bounded(process.stdout, limit)),
        asyncio.create_task(_read_bounded(process.stderr, STDERR_BYTES, cut=True)),
    ]
    try:
        async with asyncio.timeout(seconds):
            _, out, err = await asyncio.gather(*io)
            await process.wait()
    except TimeoutError:
        raise DocumentError(f"Reading the document took longer than {seconds:g} s.") from None
    except TooMuchOutput:
        raise DocumentError("The document's text is larger than the file limit allows.") from None
    finally:
        # A failed read leaves the others running: end them before the pipes are read to their end.
        for task in io:
            task.cancel()
        await asyncio.gather(*io, return_exceptions=True)
        if process.returncode is None:
            process.kill()
            # asyncio reports the exit only once every pipe has reached its end, and a pipe left
            # unread with a full buffer never does: read both to the end (the child is dead).
            await asyncio.gather(_discard(process.stdout), _discard(process.stderr))
            await process.wait()
    if process.returncode == -signal.SIGXCPU:
        raise DocumentError(f"Reading the document used more than {cpu} s of CPU time.")
    if process.returncode == -signal.SIGKILL:
        raise DocumentError("Reading the document was stopped by a resource limit.")
    if process.returncode != 0:
        reason = err.decode("utf-8", "replace").strip().splitlines()
        raise DocumentError(
            reason[-1] if reason else f"Reading the document failed (exit {process.returncode})."
        )
    # The child wrote UTF-8 (PYTHONUTF8) of text it checked.
    return out.decode("utf-8", "replace")
