"""A Celery worker of the bulk queue, started as `make run` starts it (the Procfile's `bulk`), in its own
process group, so a test or a benchmark can SIGKILL all of it at once, the way a lost machine ends it."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import redis

from harness.processes import ROOT
from harness.waiting import wait_for

WORKER_ARGS = (
    "--app chatsite worker --queues bulk --concurrency 2 --loglevel INFO "
    "--without-gossip --without-mingle --without-heartbeat"
).split()


class CeleryWorker:
    """`celery -A chatsite worker` with `env` (its REDIS_URL is the broker), its output in `log_path`."""

    def __init__(
        self, env: dict[str, str], log_path: Path, *, hostname: str = "jobs-test@%h",
        beat_schedule: Path | None = None,
    ) -> None:  # fmt: skip
        """`beat_schedule`: the worker runs beat too (`--beat`), keeping its schedule in that file."""
        self.env = env
        self.args = [
            *WORKER_ARGS,
            *("--hostname", hostname),
            *(["--beat", "--schedule", str(beat_schedule)] if beat_schedule else []),
        ]
        self.log_path = log_path
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text("")
        self.process: subprocess.Popen | None = None
        self.orphans: set[bytes] = set()  # unacknowledged messages of a killed worker (settles)

    def _broker(self) -> redis.Redis:
        return redis.Redis.from_url(self.env["REDIS_URL"])

    def start(self) -> None:
        offset = self.log_path.stat().st_size
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "celery", *self.args],
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

    def settles(self, timeout: float = 10) -> bool:
        """Whether the worker is alive with no task queued, reserved or running within `timeout`.

        Its tasks are acknowledged late, so a running task's message is still unacknowledged;
        those a killed worker held stay so until the visibility timeout (an hour) puts them
        back, and are not this worker's."""
        client = self._broker()

        def idle() -> bool:
            return not client.llen("bulk") and set(client.hkeys("unacked")) <= self.orphans

        try:
            wait_for(idle, timeout, "Celery worker idle")
        except TimeoutError:
            return False
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker and its pool processes together: nothing gets to clean up."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self.orphans |= set(self._broker().hkeys("unacked"))

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
