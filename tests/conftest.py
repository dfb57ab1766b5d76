"""Session-wide real services: the vLLM engine, Redis, and daphne serving the product.

The engine starts once per test session (about 40 s on CPU). Tests that need it
ask for the `engine_url` or `product_server` fixture.
"""

import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import redis
from django.conf import settings
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from chatsite.processes import ROOT, daphne_running, free_port, wait_for
from inference.engine import engine_client
from inference.launcher import EngineConfig, EngineProcess

LOGS = Path(settings.DATA_DIR) / "test-logs"
LOGS.mkdir(parents=True, exist_ok=True)


def wait_redis(client: redis.Redis, timeout: float) -> None:
    def up() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    wait_for(up, timeout, "Redis")


def engine_gauge(engine_url: str, name: str) -> float:
    """The current value of one of the engine's Prometheus gauges, summed over labels."""
    text = httpx.get(engine_url + "/metrics", timeout=5).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


@pytest.fixture(scope="session", autouse=True)
def redis_server():
    """Use REDIS_URL's Redis; without REDIS_URL, run the bundled one like `make run` does."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    process = None
    if "REDIS_URL" not in os.environ:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runredis"], cwd=ROOT, stdout=subprocess.DEVNULL
        )

    wait_redis(client, 30)
    yield settings.REDIS_URL
    if process is not None:
        process.terminate()
        process.wait(10)


@pytest.fixture(scope="session")
def engine_url():
    """A real vLLM server for the whole session, started through the product's launcher."""
    url = f"http://127.0.0.1:{free_port()}"
    config = replace(EngineConfig.from_settings(settings), url=url, kv_cache_space_gb=1, max_num_seqs=8)
    log = open(LOGS / "test-engine.log", "w")  # noqa: SIM115 - closed below
    engine = EngineProcess(config, output=log)
    engine.start()
    try:
        engine.wait_healthy(timeout=600)
        previous = settings.INFERENCE_URL
        settings.INFERENCE_URL = url
        engine_client.cache_clear()
        yield url
        settings.INFERENCE_URL = previous
        engine_client.cache_clear()
    finally:
        engine.stop()
        log.close()


def _database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    credentials = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{credentials}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@dataclass(frozen=True)
class DaphneServer:
    url: str
    process: subprocess.Popen


@contextmanager
def running_daphne(engine_url: str, *daphne_args: str, **env_overrides: str):
    """daphne serving the product, as `make run` starts it, on the test database."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "INFERENCE_URL": engine_url,
        "REDIS_URL": settings.REDIS_URL,
        "DATA_DIR": str(settings.DATA_DIR),
        **env_overrides,
    }
    with daphne_running(env, LOGS / f"test-daphne-{port}.log", *daphne_args, port=port) as (base, process):
        yield DaphneServer(base, process)


@pytest.fixture(scope="session")
def product_server(django_db_setup, django_db_blocker, engine_url):
    with running_daphne(engine_url) as server:
        yield server.url


@pytest.fixture
def ws_url(product_server) -> str:
    return product_server.replace("http://", "ws://") + "/ws/chat/"


@pytest.fixture
def origin(product_server) -> str:
    address = urlsplit(product_server)
    return f"http://{address.hostname}:{address.port}"


BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by Playwright; missing Chromium fails in CI and skips elsewhere.

    Module-scoped: Playwright's sync API runs an event loop in this thread for as
    long as it is open, which would break every asyncio test that runs after it."""
    import shutil

    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs Debian's package)")
        pytest.skip("chromium is not installed: apt-get install chromium")
    # Playwright's sync API keeps an event loop in this thread; the ORM calls the
    # tests make around it are still plain synchronous calls.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=BROWSER_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    yield page
    context.close()


# Bulk summarization jobs (jobs/): a real Celery worker.


def _purge_broker() -> None:
    """Drop queued and unacknowledged task messages left in this test Redis database."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete("celery", "bulk", "unacked", "unacked_index", "unacked_mutex")
    for key in client.scan_iter(match="jobs:bulk:inflight:*"):
        client.delete(key)


CELERY_WORKER_ARGS = (
    "--app chatsite worker --queues bulk --hostname jobs-test@%h --concurrency 2 --loglevel INFO "
    "--without-gossip --without-mingle --without-heartbeat"
).split()


class CeleryWorker:
    """`celery -A chatsite worker` on the test database, as `make run` starts it, in its own
    process group so a test can SIGKILL all of it at once, the way a lost machine ends it."""

    def __init__(self, engine_url: str, **env: str) -> None:
        self.env = dict(
            os.environ,
            DATABASE_URL=_database_url(),
            INFERENCE_URL=engine_url,
            REDIS_URL=settings.REDIS_URL,
            DATA_DIR=str(settings.DATA_DIR),
            **env,
        )
        self.log_path = LOGS / "test-celery.log"
        self.log_path.write_text("")
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        offset = self.log_path.stat().st_size
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "celery", *CELERY_WORKER_ARGS],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Celery worker exited; see {self.log_path}")
            with open(self.log_path) as log:
                log.seek(offset)
                return " ready." in log.read()

        wait_for(ready, 90, "Celery worker")

    def kill(self) -> None:
        """SIGKILL the worker and its pool processes together: nothing gets to clean up."""
        import signal

        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        import signal

        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()


@pytest.fixture
def celery_worker(django_db_setup, engine_url):
    """A real Celery worker on the test database and the session's engine."""
    _purge_broker()
    worker = CeleryWorker(engine_url, BULK_RETRY_DELAY="1")
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        _purge_broker()


# END jobs/
