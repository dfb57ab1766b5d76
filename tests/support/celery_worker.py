"""A real Celery worker for the bulk-job tests, started as `make run` starts it."""

import os
import signal
import subprocess
import sys

import redis
from django.conf import settings

from harness.processes import ROOT
from harness.waiting import wait_for
from tests.support.product import LOGS, product_env

CELERY_WORKER_ARGS = (
    "--app chatsite worker --queues bulk --hostname jobs-test@%h --concurrency 2 --loglevel INFO "
    "--without-gossip --without-mingle --without-heartbeat"
).split()


def purge_broker() -> None:
    """Drop queued and unacknowledged task messages left in this test Redis database."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete("celery", "bulk", "unacked", "unacked_index", "unacked_mutex")
    for key in client.scan_iter(match="jobs:bulk:inflight:*"):
        client.delete(key)


class CeleryWorker:
    """`celery -A chatsite worker` on the test database, as `make run` starts it, in its own
    process group so a test can SIGKILL all of it at once, the way a lost machine ends it."""

    def __init__(self, engine_url: str, **env: str) -> None:
        self.env = product_env(engine_url, **env)
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
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
