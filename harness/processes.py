"""The product's processes started as children, the way the Procfile and `make run` start them.

The test suite and the benchmarks serve the product through this, so both measure
and exercise the daphne and the Redis that `make run` runs.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import redis

from harness.waiting import wait_for

ROOT = Path(__file__).resolve().parent.parent
# As in the Procfile's web process (WEB_WS_MAX_MESSAGE_BYTES, WEB_WS_CONNECT_TIMEOUT).
WS_MAX_MESSAGE_BYTES = 262144
WS_CONNECT_TIMEOUT = 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def daphne_running(
    env: dict[str, str], log: Path, *daphne_args: str, port: int | None = None
) -> Iterator[tuple[str, subprocess.Popen]]:
    """daphne serving the product with `env`, its output in `log`: (base URL, process)."""
    port = port or free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as output:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "chatsite.daphne", "-b", "127.0.0.1", "-p", str(port)),
                *("--websocket-max-message-size", str(WS_MAX_MESSAGE_BYTES)),
                *("--websocket_connect_timeout", str(WS_CONNECT_TIMEOUT)),
                *daphne_args,
                "chatsite.asgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=output,
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
            yield base, process
        finally:
            if process.poll() is None:
                # SIGTERM drains: answers still running get WEB_DRAIN_SECONDS to finish (answers.drain).
                process.terminate()
                try:
                    process.wait(float(env.get("WEB_DRAIN_SECONDS", 30)) + 15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(15)
                    raise


def redis_answers(url: str) -> bool:
    """Whether a Redis at `url` answers a ping."""
    try:
        with redis.Redis.from_url(url, socket_timeout=2) as client:
            return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError):
        return False


def redis_data(url: str) -> Path:
    """Where the bundled Redis on `url`'s port keeps its data (manage.py runredis: a folder a port)."""
    return Path(os.environ.get("DATA_DIR") or ROOT / "var") / f"redis-{urlsplit(url).port}"


def redis_started(url: str) -> subprocess.Popen:
    """The bundled Redis on `url`, as `make run` starts it, once it answers: in a process group of its
    own, so a test or a benchmark can SIGKILL it (stop_group) the way a lost machine ends it."""
    process = subprocess.Popen(
        [sys.executable, "manage.py", "runredis"],
        cwd=ROOT,
        env={**os.environ, "REDIS_URL": url},
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for(lambda: redis_answers(url), 30, f"Redis at {url}")
    return process


@contextmanager
def redis_serving(url: str, *, bundled: bool) -> Iterator[None]:
    """The Redis at `url`, once it answers. With `bundled`, it is first started the way `make run`
    starts it (`manage.py runredis`, on `url`'s port) and stopped on the way out."""
    process = None
    if bundled:
        env = {**os.environ, "REDIS_URL": url}
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runredis"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL
        )

    def exited() -> bool:
        return process is not None and process.poll() is not None

    try:
        wait_for(lambda: redis_answers(url) or exited(), 30, f"Redis at {url}")
        # The bundled server, not whatever else answers at that address (where it could not bind).
        if exited():
            raise RuntimeError(f"The bundled Redis exited ({process.returncode}): another server has {url}?")
        yield
    finally:
        if process is not None and process.poll() is None:
            process.terminate()
            process.wait(10)
        if process is not None:
            # Its data folder goes with it: nothing in it outlives the run.
            shutil.rmtree(redis_data(url), ignore_errors=True)


def stop_group(process: subprocess.Popen, how: signal.Signals, seconds: float) -> None:
    """Signal a process started with start_new_session, and its whole group, with `how`; SIGKILL the
    group if it has not exited within `seconds`."""
    if process.poll() is None:
        os.killpg(process.pid, how)
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def ports_in_a_row(count: int) -> int:
    """A port with the `count - 1` ports above it free too: nginx's and each web process's."""
    for _ in range(100):
        first = free_port()
        try:
            for port in range(first, first + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
    raise RuntimeError("no free ports in a row")
