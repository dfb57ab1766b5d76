"""The suite's fixtures and hooks: the real services (the vLLM engine, Redis, daphne serving the
product and Chromium, once per session; a Celery worker per module), the users alice and bob, and
the marks of the slow kinds.

The engine starts once per test session (about 40 s on CPU). Tests that need it
ask for the `engine_url` or `product_server` fixture. The helpers these fixtures build on,
and that tests import, are in tests/support/.
"""

import functools
import gc
import inspect
import time
import warnings
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
from asgiref.sync import SyncToAsync
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, connections
from limits.storage import RedisStorage

import redisconn
from enginehost.embedlaunch import EmbeddingConfig
from enginehost.embedmodel import prepare_embedding_model
from enginehost.launcher import EngineConfig, EngineProcess
from harness.processes import ROOT, free_port, redis_serving
from inference.engine import embedding_client, engine_client
from tests.support.celery_worker import CeleryWorker, purge_broker, purge_in_flight_counts
from tests.support.chromium import SharedChromium
from tests.support.product import ASYNC_UNSAFE, LOGS, DaphneServer, running_daphne

# The slow kinds, marked by what a test uses: `pytest -m "not engine and not browser"` (make test-fast)
# is the quick loop; the full suite is what CI runs.
ENGINE_FIXTURES = {"engine_url"}
BROWSER_FIXTURES = {"chromium"}  # under `browser` and `page`


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & ENGINE_FIXTURES:
            item.add_marker(pytest.mark.engine)
        if used & BROWSER_FIXTURES:
            item.add_marker(pytest.mark.browser)
        if "topology" in item.path.parts:
            item.add_marker(pytest.mark.topology)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Refuse an async test inside the test-wide transaction.

    Such a test reaches the ORM from asgiref's worker thread, through a connection of its
    own, while the test's transaction holds the main thread's. On SQLite that transaction
    (BEGIN IMMEDIATE, the product's transaction mode) holds the write lock until the test
    ends, so the test's own writes wait out the busy timeout and fail "database is locked"."""
    marker = item.get_closest_marker("django_db")
    function = getattr(item, "function", None)
    if marker is None or not inspect.iscoroutinefunction(function):
        return
    if not (marker.kwargs.get("transaction") or marker.kwargs.get("serialized_rollback")):
        pytest.fail(f"{item.nodeid}: an async test needs @pytest.mark.django_db(transaction=True)", False)


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Close the connection an async test's ORM calls opened in asgiref's worker thread.

    Django's `a*` methods and `sync_to_async` run there and never close what they open;
    left open, the connection outlives the test and, on PostgreSQL, keeps the test
    database from being dropped at the end of the session."""
    if inspect.iscoroutinefunction(getattr(item, "function", None)):
        SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=60)


# The users most tests need: alice, who asks, and bob, whom her data must never reach.


@pytest.fixture
def alice():
    return get_user_model().objects.create_user("alice", password="pw-alice-123")


@pytest.fixture
def bob():
    return get_user_model().objects.create_user("bob", password="pw-bob-12345")


@pytest.fixture(scope="session", autouse=True)
def redis_server():
    """Use REDIS_URL's Redis; without REDIS_URL, run the bundled one like `make run` does.

    Either way the suite works in a database of its own (tests/settings.py), emptied first."""
    with redis_serving(settings.REDIS_URL, bundled=settings.TEST_BUNDLED_REDIS):
        redis.Redis.from_url(settings.REDIS_URL).flushdb()
        yield settings.REDIS_URL


@pytest.fixture(autouse=True)
def fresh_rate_windows(redis_server):
    """Empty every rate-limit window before each test: they are keyed by user id, and a test
    database on SQLite hands the same ids out again, test after test, within the windows' minute."""
    _limits_storage(redisconn.limits_storage_uri(asynchronous=False)).reset()


@functools.cache
def _limits_storage(uri: str) -> RedisStorage:
    return RedisStorage(uri)


@pytest.fixture(scope="session", autouse=True)
def flush_outlasts_a_late_write():
    """Retry the database flush that ends a transactional test when PostgreSQL breaks a deadlock.

    The flush's TRUNCATE locks every table; a product process finishing an answer (its message
    and usage row, one transaction) can hold one of those tables while it waits for another,
    and PostgreSQL then aborts the flush. Tests wait for the answers they start to be stored,
    which is the fix; this keeps a late write that slips past one from failing the run, and
    says so in the run's warnings, where it is seen and traced to its test."""
    from django.core.management.base import CommandError
    from django.core.management.commands.flush import Command

    handle = Command.handle

    def retried(self, **options):
        for attempt in range(3):
            try:
                return handle(self, **options)
            except CommandError as exc:
                if attempt == 2 or "deadlock detected" not in str(exc.__cause__):
                    raise
                warnings.warn(
                    f"the database flush after a test met a late write: {exc.__cause__}", stacklevel=1
                )
                time.sleep(1)

    Command.handle = retried
    yield
    Command.handle = handle


@pytest.fixture(scope="session", autouse=True)
def no_connection_left(django_db_setup, django_db_blocker):
    """On PostgreSQL, fail the session that leaves a connection to the test database open:
    it keeps the database from being dropped. Checked after every process the suite
    started is gone, just before the database is dropped."""
    yield
    if connection.vendor != "postgresql":
        return

    def others() -> list:
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid, client_port, backend_start, left(query, 200) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return cursor.fetchall()

    # The server ends a dead process's session when it reads the closed socket, which on a
    # busy machine may be a moment after the process is gone: a session still there after
    # 10 s is one that a live process holds.
    # A connection of a thread that has ended (a test's ThreadSensitiveContext) is closed when the
    # thread's locals are collected, which a reference cycle may leave to the collector.
    gc.collect()
    deadline = time.monotonic() + 10
    while (left := others()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"connections to the test database left open: {left}"


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


@pytest.fixture(scope="session")
def embedding_engine():
    """The real embedding engine (the product's transformers server) at EMBEDDING_URL for the whole
    session, started through the product's launcher; the processes the suite starts reach it there."""
    prepare_embedding_model(Path(settings.EMBEDDING_MODEL), report=lambda line: None)
    with open(LOGS / "test-embeddings.log", "w") as log:
        server = EngineProcess(EmbeddingConfig.from_settings(settings), output=log)
        server.start()
        try:
            server.wait_healthy(timeout=300)
            embedding_client.cache_clear()
            yield settings.EMBEDDING_URL
        finally:
            server.stop()
            embedding_client.cache_clear()


@pytest.fixture(scope="session")
def product_daphne(django_db_setup, django_db_blocker, engine_url) -> DaphneServer:
    with running_daphne(engine_url) as server:
        yield server


@pytest.fixture(scope="session")
def product_server(product_daphne) -> str:
    return product_daphne.url


@pytest.fixture
def ws_url(product_server) -> str:
    return product_server.replace("http://", "ws://") + "/ws/chat/"


@pytest.fixture
def origin(product_server) -> str:
    address = urlsplit(product_server)
    return f"http://{address.hostname}:{address.port}"


@pytest.fixture(scope="session")
def chromium() -> SharedChromium:
    """Debian's Chromium, launched once for the session (tests/support/chromium.py); a missing
    Chromium fails the test, with the command."""
    import shutil

    executable = shutil.which("chromium")
    if executable is None:
        # Never skipped: `make test` installs it where it may (as root).
        pytest.fail("chromium is not installed: apt-get install chromium (make test does, as root)")
    shared = SharedChromium(executable, free_port(), ROOT, LOGS / "test-chromium.log")
    yield shared
    shared.stop()


@pytest.fixture(scope="module")
def browser(chromium):
    """The session's Chromium, driven by Playwright.

    Module-scoped: Playwright's sync API runs an event loop in this thread for as
    long as it is open, which would break every asyncio test that runs after it.
    Closing it closes the contexts it made and leaves the browser to the next module.

    For as long as it is open, DJANGO_ALLOW_ASYNC_UNSAFE is set: that loop is marked
    running in the test's thread, so Django takes the tests' plain synchronous ORM calls
    (and the test database's own flushes) for calls from async code and refuses them. No
    product code runs in the test process, and the product processes never inherit the
    flag (product_env)."""
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv(ASYNC_UNSAFE, "true")
        browser = playwright.chromium.connect_over_cdp(chromium.running())
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    yield page
    context.close()


# Bulk summarization jobs (jobs/): a real Celery worker.


@pytest.fixture(scope="module")
def module_celery_worker(django_db_setup, engine_url):
    """A real Celery worker on the test database and the session's engine, for one test module.

    Not for the session: a worker left running between the modules that ask for it would take
    the jobs other tests queue on the suite's Redis and expect to stay queued (tests/jobs'
    API and admin tests)."""
    purge_broker()
    worker = CeleryWorker(engine_url, BULK_RETRY_DELAY="1")
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        purge_broker()


@pytest.fixture
def celery_worker(module_celery_worker):
    """The module's Celery worker, as each test leaves it to the next.

    Sharing it is safe because a worker keeps nothing of a test between tasks: its tasks take a
    job's id and read the job from the database, every test's jobs are its own, and every setting
    the worker reads (its environment) is the same for the whole module. What a test could leave
    behind is a task still queued or running, or its runner's in-flight count: after each test,
    the worker must have no message left in the broker, or it is stopped, the broker purged and
    the worker started again, so a test that failed mid-job never hands its tasks to the next."""
    yield module_celery_worker
    if not module_celery_worker.settles():
        module_celery_worker.restart()
    purge_in_flight_counts()
