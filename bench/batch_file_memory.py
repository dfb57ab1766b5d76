"""A Batch API file at the size limit (BATCH_FILE_MAX_BYTES, 200 MiB by default) uploaded and downloaded
with the openai SDK through one web process (daphne in production mode, as `make run` starts it), the
process's peak resident memory measured around each (harness.memory): it streams the file in and out and
never holds it. The suite's test does the same with 64 MiB (tests/api/test_openai_files_memory.py).
Prints JSON and writes docs/benchmarks/batch_file_memory.json.

    python -m bench.batch_file_memory
"""

import io
import json
import tempfile
import time
from pathlib import Path

from bench.results import RESULTS, arguments, save

MIB = 1024 * 1024


def run(size: int | None) -> dict:
    import openai
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.core.management import call_command

    from apitokens.services import token_issue
    from bench.processes import product_process, redis_running
    from harness.memory import batch_lines_file, peak_growth, resident

    size = size or settings.BATCH_FILE_MAX_BYTES
    call_command("migrate", verbosity=0)
    person = get_user_model().objects.create_user(f"bench-files-{time.time_ns()}")
    person.user_permissions.add(Permission.objects.get(codename="use_batch_api"))
    _, key = token_issue(user=person, scopes=["openai", "batch"])
    # No engine: files never reach it.
    with (
        tempfile.TemporaryDirectory(dir=settings.DATA_DIR) as folder,
        redis_running(),
        product_process("http://127.0.0.1:1", BATCH_FILE_MAX_BYTES=str(size), LOG_LEVEL="WARNING") as (
            base,
            process,
        ),
    ):
        api = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=600)
        path = batch_lines_file(Path(folder) / "limit.jsonl", size)
        with open(path, "rb") as upload:  # the first upload loads what uploads use, once
            warm = api.files.create(file=("warm.jsonl", io.BytesIO(upload.read(MIB))), purpose="batch")
        api.files.delete(warm.id)
        idle = resident(process.pid, "VmRSS")
        stored, timings = [], {}

        def upload() -> None:
            began = time.perf_counter()
            with open(path, "rb") as file:
                stored.append(api.files.create(file=("limit.jsonl", file), purpose="batch"))
            timings["upload_s"] = time.perf_counter() - began

        def download() -> None:
            began, received = time.perf_counter(), 0
            with api.files.with_streaming_response.content(stored[0].id) as response:
                for chunk in response.iter_bytes(MIB):
                    received += len(chunk)
            timings["download_s"] = time.perf_counter() - began
            assert received == size, received

        up, down = peak_growth(process.pid, upload), peak_growth(process.pid, download)
        assert stored[0].bytes == size
        api.files.delete(stored[0].id)
        person.delete()
    return {
        "benchmark": "batch_file_memory",
        "file_bytes": size,
        "idle_rss_mib": round(idle / MIB, 1),
        "upload_peak_growth_mib": round(up / MIB, 1),
        "download_peak_growth_mib": round(down / MIB, 1),
        "upload_s": round(timings["upload_s"], 1),
        "download_s": round(timings["download_s"], 1),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=None, help="the file's size (default: the limit)")
    options = parser.parse_args(argv)
    result = run(options.bytes)
    print(json.dumps(result, indent=2))
    if options.output == RESULTS and options.bytes is None:
        save(options.output, "batch_file_memory", result)
    return result


if __name__ == "__main__":
    from bench import setup

    setup()
    main()
