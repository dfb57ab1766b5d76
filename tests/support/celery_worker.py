"""A real Celery worker for the bulk-job tests, started as `make run` starts it."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import redis
from django.conf import settings

from harness.processes import ROOT
from harness.waiting import wait_for
from redisconn.keys import BULK_INFLIGHT_PREFIX
from tests.support.product import LOGS, product_env

CELERY_WORKER_ARGS = (
    "--app chatsite worker --queues bulk --hostname jobs-test@%h --concurrency 2 --loglevel INFO "
    "--without-gossip --without-mingle --without-heartbeat"
).split()


BROKER_KEYS = ("celery", "bulk", "unacked", "unacked_index", "unacked_mutex")


def purge_broker() -> None:
    """Drop queued and unacknowledged task messages left in this test Redis database."""
    redis.Redis.from_url(settings.REDIS_URL).delete(*BROKER_KEYS)
    purge_in_flight_counts()


def purge_in_flight_counts() -> None:
    """Drop the in-flight counts bulk runners publish (they expire a few seconds after the last)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(match=BULK_INFLIGHT_PREFIX + "*"):
        client.delete(key)


class CeleryWorker:
    """`celery -A chatsite worker` on the test database, as `make run` starts it, in its own
    process group so a test can SIGKILL all of it at once, the way a lost machine ends it."""

    def __init__(self, engine_url: str, *, beat_schedule: Path | None = None, **env: str) -> None:
        """`beat_schedule`: the worker runs beat too (`--beat`), keeping its schedule in that file."""
        self.env = product_env(engine_url, **env)
        self.args = [
            *CELERY_WORKER_ARGS,
            *(["--beat", "--schedule", str(beat_schedule)] if beat_schedule else []),
        ]
        self.log_path = LOGS / "test-celery.log"
        self.log_path.write_text("")
        self.process: subprocess.Popen | None = None
        self.orphans: set[bytes] = set()  # unacknowledged messages of a killed worker (settles)

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
        client = redis.Redis.from_url(settings.REDIS_URL)

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
        self.orphans |= set(redis.Redis.from_url(settings.REDIS_URL).hkeys("unacked"))

    def restart(self) -> None:
        """Stop, drop every task message in the broker, and start again."""
        self.stop()
        purge_broker()
        self.orphans.clear()
        self.start()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
