"""Redis, engines and the product, started the way `make run` starts them, and benchmark users."""

import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError
from django.test import Client

from deploy.supervisor import Topology, write
from enginehost.launcher import EngineConfig, EngineProcess
from harness.processes import ROOT, daphne_running, free_port, ports_in_a_row, redis_answers, redis_serving
from harness.supervision import BIN, Supervisord, answers, supervisord_running
from harness.waiting import wait_for

# The web processes run in production mode, as deployed: development mode (DEBUG, which `make`
# sets) records every SQL query and serves static files through Django. They read the sessions made
# here: their key is this process's, from the environment they inherit (bench.setup).
PRODUCTION = {
    "DEBUG": "false",
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    # Plain HTTP on the loopback, as behind a TLS-terminating proxy.
    "SECURE_COOKIES": "false",
    "SECURE_SSL_REDIRECT": "false",
    "SECURE_HSTS_SECONDS": "0",
}


def logs() -> Path:
    """The folder of the processes' output, made if missing."""
    folder = Path(settings.DATA_DIR) / "bench-logs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def log_file(name: str):
    return open(logs() / f"{name}.log", "w")  # noqa: SIM115 - the caller closes it


@contextlib.contextmanager
def redis_running() -> Iterator[None]:
    """REDIS_URL's Redis, or the bundled one on its default address, as `make run` does: one that
    already answers there (a running `make run`'s) is used, not started again."""
    if "REDIS_URL" in os.environ and not redis_answers(settings.REDIS_URL):
        raise RuntimeError(f"REDIS_URL={settings.REDIS_URL} does not answer")
    with redis_serving(settings.REDIS_URL, bundled=not redis_answers(settings.REDIS_URL)):
        yield


def engine_config(**overrides) -> EngineConfig:
    """The product's engine settings, on a free port, with `overrides`."""
    return replace(EngineConfig.from_settings(settings), url=f"http://127.0.0.1:{free_port()}", **overrides)


@contextlib.contextmanager
def engine_process(config: EngineConfig, name: str = "engine") -> Iterator[tuple[str, int]]:
    """vLLM started by the product's launcher: (URL, pid of its API server process)."""
    log = log_file(name)
    engine = EngineProcess(config, output=log)
    engine.start()
    try:
        engine.wait_healthy(timeout=settings.INFERENCE_STARTUP_TIMEOUT)
        yield config.url, engine.process.pid
    finally:
        engine.stop()
        # Not closed: the launcher's output thread may still be writing the engine's last lines.
        log.flush()


@contextlib.contextmanager
def engine_running(config: EngineConfig, name: str = "engine") -> Iterator[str]:
    with engine_process(config, name) as (url, _):
        yield url


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process (not its children), from /proc."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds so far of a process and its descendants, the ended ones it waited for included."""
    total = 0.0
    root = psutil.Process(pid)
    for each in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = each.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def children_cpu_seconds(pid: int) -> float:
    """User + system CPU time of the live descendants of one process."""
    total = 0.0
    for child in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += cpu_seconds(child.pid)
    return total


@contextlib.contextmanager
def product_process(engine_url: str, **environment: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """daphne serving the product against `engine_url`, with extra settings from `environment`:
    (base URL, process)."""
    env = dict(os.environ, **PRODUCTION, INFERENCE_URL=engine_url, **environment)
    with daphne_running(env, logs() / "daphne.log") as served:
        yield served


@contextlib.contextmanager
def cluster_process(
    engine_url: str, web_processes: int, *, nginx: bool = True, **environment: str
) -> Iterator[tuple[str, list[int]]]:
    """`web_processes` daphne processes under supervisord against `engine_url`, as `make run` starts
    them: behind nginx (TOPOLOGY=cluster), or without it on the one listening socket supervisord
    holds (`make run`'s default): (the site's base URL, the web processes' pids)."""
    run_dir = cluster_dir()
    # Metrics in multiprocess mode, as `make run` keeps them: /metrics through nginx sums them all.
    metrics = run_dir / "metrics"
    shutil.rmtree(metrics, ignore_errors=True)
    metrics.mkdir(parents=True)
    port = ports_in_a_row(web_processes + 1)
    topology = Topology(["web", "nginx"] if nginx else ["web"], web_port=port, web_processes=web_processes)
    write(run_dir, topology)
    env = dict(
        os.environ,
        **PRODUCTION,
        INFERENCE_URL=engine_url,
        RUN_DIR=str(run_dir),
        PROMETHEUS_MULTIPROC_DIR=str(metrics),
        **environment,
    )
    with supervisord_running(run_dir / "supervisord.conf", env, logs() / "cluster.log") as supervisor:
        base = f"http://127.0.0.1:{port}"
        backends = [f"http://127.0.0.1:{backend}/healthz/live" for _, backend in topology.web_backends()]
        wait_for(
            lambda: all(answers(url) for url in [base + "/healthz/ready", *(backends if nginx else ())]),
            90,
            "the cluster",
        )
        yield base, [supervisor.pid(name) for name in web_programs(web_processes, nginx=nginx)]


def cluster_dir() -> Path:
    return logs() / "cluster"


def web_programs(web_processes: int, *, nginx: bool) -> list[str]:
    """The web processes' names in supervisord: one program each behind nginx, one fcgi group on
    the shared socket."""
    return [f"web-{i}" if nginx else f"web:web-{i}" for i in range(web_processes)]


def restart_web(program: str) -> int:
    """`make restart` for one web process of cluster_process's site: SIGTERM (it drains), then
    started again; its new pid."""
    conf = cluster_dir() / "supervisord.conf"
    subprocess.run([BIN / "supervisorctl", "-c", conf, "restart", program], check=True, capture_output=True)
    return Supervisord(conf, None).pid(program)


@contextlib.contextmanager
def product_running(engine_url: str, **environment: str) -> Iterator[str]:
    with product_process(engine_url, **environment) as (base, _):
        yield base


def product_environment(*, system_prompt: str, max_tokens: int) -> dict[str, str]:
    """Settings that make the product send what the raw client sends, without its own limits in the way."""
    return {
        "CHAT_SYSTEM_PROMPT": system_prompt,
        "CHAT_MAX_TOKENS": str(max_tokens),
        "CHAT_TEMPERATURE": "0",
        "CHAT_MAX_ACTIVE_PER_USER": "1000",
        "CHAT_MAX_ACTIVE_TOTAL": "1000",
        "CHAT_MESSAGES_PER_MINUTE": "100000",
        "CHAT_SOCKET_FRAMES_PER_MINUTE": "100000",
        "CHAT_MAX_SOCKETS_PER_USER": "100000",
        "LOG_LEVEL": "WARNING",
    }


@contextlib.contextmanager
def bench_users(count: int) -> Iterator[list[str]]:
    """Session cookies of `count` fresh users (fresh users have their own prefix-cache salts);
    the users and their conversations are deleted afterwards."""
    users = [get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:12]}") for _ in range(count)]
    try:
        yield [session_cookie(user) for user in users]
    finally:
        delete_users([user.pk for user in users])


def session_cookie(user) -> str:
    """A session for `user` in the session store, as a login makes it (no form, so the login
    throttle is not what a benchmark measures): its cookie's value."""
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def delete_users(pks: list[int], tries: int = 10) -> None:
    """A benchmark's users and what they stored. An answer outlives its reader (the server finishes
    it when the benchmark has stopped reading), and its end records the user's usage: a row written
    while the users are deleted fails the deletion's foreign keys, so it collects again until none is."""
    for attempt in range(tries):
        try:
            get_user_model().objects.filter(pk__in=pks).delete()
            return
        except IntegrityError:
            if attempt == tries - 1:
                raise
            time.sleep(3)


@contextlib.contextmanager
def celery_worker(engine_url: str, **environment: str) -> Iterator[subprocess.Popen]:
    """A Celery worker of the bulk queue against `engine_url`, with extra settings from `environment`:
    its main process (the pool's child, which runs the tasks, is its child)."""
    log = log_file("bulk-celery")
    env = dict(os.environ, **PRODUCTION, INFERENCE_URL=engine_url, LOG_LEVEL="WARNING", **environment)
    worker_args = (
        f"--app chatsite worker --queues bulk --hostname bench-{os.getpid()}@%h --concurrency 1 "
        "--loglevel INFO --without-gossip --without-mingle --without-heartbeat"
    ).split()
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", *worker_args],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while " ready." not in (logs() / "bulk-celery.log").read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the Celery worker did not start; see var/bench-logs/bulk-celery.log")
            time.sleep(0.2)
        yield process
    finally:
        process.terminate()
        process.wait(30)
        log.close()
