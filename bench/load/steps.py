"""The ramp's figures: what the box did at each step of users (docs/benchmarks.md, "Capacity").

Around each step the run samples the web processes (CPU seconds, resident memory), Redis (the time
its commands took, INFO commandstats) and the product's own counters at /metrics (answers ended,
tokens relayed, `busy` refusals, the time the chat's turns spent in the database); while the step
runs, a thread keeps the peak memory and the sockets open. `figures` turns the differences and
locust's percentiles into one row of the report.
"""

import csv
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import redis

from inference.topology import metric_sums

COUNTERS = (
    "chat_generations_total",
    "chat_streamed_tokens_total",
    "chat_completion_tokens_total",
    "chat_admission_refused_total",
    "chat_turn_store_seconds_sum",
    "chat_turn_store_seconds_count",
    "chat_websocket_connections",
    "chat_frames_paced_total",
    "chat_busy_stream_interval_total",
    "web_event_loop_lag_seconds",
)


@dataclass(frozen=True)
class Sample:
    at: float
    cpu_seconds: float
    rss_bytes: int
    redis_usec: int
    redis_calls: int
    counters: dict[str, float]


def _counters(base: str) -> dict[str, float]:
    return metric_sums(httpx.get(base + "/metrics", timeout=30).text, COUNTERS)


def _processes(pids: list[int]) -> list[psutil.Process]:
    return [psutil.Process(pid) for pid in pids]


def take(base: str, pids: list[int], redis_url: str) -> Sample:
    cpu = rss = 0
    for process in _processes(pids):
        times = process.cpu_times()
        cpu += times.user + times.system
        rss += process.memory_info().rss
    stats = redis.Redis.from_url(redis_url).info("commandstats")
    return Sample(
        at=time.monotonic(),
        cpu_seconds=cpu,
        rss_bytes=rss,
        redis_usec=sum(int(s["usec"]) for s in stats.values()),
        redis_calls=sum(int(s["calls"]) for s in stats.values()),
        counters=_counters(base),
    )


@dataclass
class Peaks:
    """The most memory and open sockets seen while a step ran, sampled every `every` seconds."""

    base: str
    pids: list[int]
    engine_url: str
    every: float = 5.0
    rss_bytes: int = 0
    sockets: float = 0
    engine_running: float = 0
    loop_lag: float = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> "Peaks":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.rss_bytes = max(self.rss_bytes, sum(p.memory_info().rss for p in _processes(self.pids)))
                counters = _counters(self.base)
                self.sockets = max(self.sockets, counters["chat_websocket_connections"])
                self.loop_lag = max(self.loop_lag, counters["web_event_loop_lag_seconds"])
                self.engine_running = max(self.engine_running, _engine_running(self.engine_url))
            except (httpx.HTTPError, psutil.Error):
                continue


def _engine_running(engine_url: str) -> float:
    text = httpx.get(engine_url + "/metrics", timeout=30).text
    return metric_sums(text, ["vllm:num_requests_running"])["vllm:num_requests_running"]


def _percentiles(stats: Path) -> dict[str, dict[str, float]]:
    """locust's p50 and p99 (ms) of each (surface, name), and each request's count."""
    rows = {}
    if stats.exists():
        for row in csv.DictReader(stats.open()):
            rows[f"{row['Type']} {row['Name']}"] = {
                "count": int(row["Request Count"]),
                "p50": float(row["50%"] or 0),
                "p99": float(row["99%"] or 0),
            }
    return rows


def figures(
    users: int, before: Sample, after: Sample, peaks: Peaks, idle_rss: int, stats: Path, engine_gap_ms: float
) -> dict:
    """One row of the ramp's table; `engine_gap_ms`: the engine's own time between tokens at the
    largest batch the step ran (the fast engine's pace for that batch)."""
    seconds = after.at - before.at
    delta = {name: after.counters[name] - before.counters[name] for name in COUNTERS}
    # Tokens as the engine counted them: a frame carries several when the web process falls behind.
    answers, tokens = delta["chat_generations_total"], delta["chat_completion_tokens_total"]
    frames = delta["chat_streamed_tokens_total"]
    cpu = after.cpu_seconds - before.cpu_seconds
    latency = _percentiles(stats)
    refusals = sum(row["count"] for name, row in latency.items() if " refused " in f" {name}")
    return {
        "users": users,
        "sockets_open_peak": peaks.sockets,
        "seconds": round(seconds, 1),
        "answers_per_second": round(answers / seconds, 2),
        "tokens_per_second": round(tokens / seconds, 1),
        "frames_per_second": round(frames / seconds, 1),
        # Frames an answer held back while the process was busy (answers.pacing), and the loop's lag
        # at its most, sampled with the peaks.
        "frames_paced_share": round(delta["chat_frames_paced_total"] / frames, 3) if frames else None,
        "loop_lag_ms_peak": round(peaks.loop_lag * 1000, 1),
        # Answers that asked the engine for several tokens an event, started while the process was busy.
        "busy_stream_interval_share": round(delta["chat_busy_stream_interval_total"] / answers, 3)
        if answers
        else None,
        "ttft_ms": {k: latency[k] for k in latency if k.endswith(" ttft")},
        "gap_ms": {k: latency[k] for k in latency if k.endswith(" gap")},
        "engine_running_peak": peaks.engine_running,
        "engine_gap_ms": round(engine_gap_ms, 1),
        "busy_refusals": refusals,
        "admission_refused": delta["chat_admission_refused_total"],
        "web_cpu_share": round(cpu / seconds, 3),
        "web_cpu_ms_per_token": round(cpu * 1000 / tokens, 3) if tokens else None,
        "web_cpu_ms_per_answer": round(cpu * 1000 / answers, 1) if answers else None,
        "memory_kib_per_connection": round((peaks.rss_bytes - idle_rss) / 1024 / peaks.sockets, 1)
        if peaks.sockets
        else None,
        "redis_ms_per_second": round((after.redis_usec - before.redis_usec) / 1000 / seconds, 1),
        "redis_calls_per_token": round((after.redis_calls - before.redis_calls) / tokens, 2)
        if tokens
        else None,
        "database_ms_per_answer": round(delta["chat_turn_store_seconds_sum"] * 1000 / answers, 2)
        if answers
        else None,
    }


@dataclass
class Profile:
    """py-spy sampling the web process `pid` for `seconds` (a step's length), from outside: the
    product runs as it is. `top()` is where its time went: the functions it was in (self time),
    and the product's own modules and the libraries (inclusive), as shares of the samples."""

    pid: int
    seconds: int
    out: Path

    def __enter__(self) -> "Profile":
        command = [
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "--pid",
            str(self.pid),
            "--duration",
            str(self.seconds),
        ]
        command += ["--rate", "50", "--format", "raw", "--nonblocking", "--output", str(self.out)]
        # py-spy's own account goes beside the samples: a step whose profile is missing says why.
        self._log = self.out.with_suffix(".log").open("w")
        self._process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        return self

    def __exit__(self, *exc) -> None:
        status = self._process.wait(60)
        self._log.write(f"py-spy exit status: {status}\n")
        self._log.close()

    def top(self, most: int = 12) -> dict[str, list[tuple[str, float]]]:
        if not self.out.exists():
            return {}
        leaves, places = Counter(), Counter()
        for line in self.out.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            frames = stack.split(";")
            leaves[frames[-1]] += int(count)
            for place in {_place(frame) for frame in frames}:
                places[place] += int(count)
        total = sum(leaves.values()) or 1
        share = lambda counter: [(name, round(100 * n / total, 1)) for name, n in counter.most_common(most)]  # noqa: E731
        return {"self": share(leaves), "inclusive": share(places)}


FRAME_FILE = re.compile(r"\((?P<file>[^:()]+)(?::\d+)?\)$")


def _place(frame: str) -> str:
    """The package or module a frame runs in, as py-spy names its file (`chat/streams.py`,
    `asyncio/streams.py`, `threading.py`): its first part."""
    found = FRAME_FILE.search(frame)
    path = found.group("file") if found else frame
    return path.split("/", 1)[0].removesuffix(".py")
