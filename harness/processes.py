"""The web process started as a child, the way the Procfile starts it.

The test suite and the benchmarks serve the product through this, so both measure
and exercise the daphne that `make run` runs.
"""

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
# As in the Procfile's web process (WEB_WS_MAX_MESSAGE_BYTES, WEB_WS_CONNECT_TIMEOUT).
WS_MAX_MESSAGE_BYTES = 262144
WS_CONNECT_TIMEOUT = 30


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
