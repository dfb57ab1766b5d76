"""The bulk-job tests' Celery worker (harness.celery_worker) on the test database, and its broker's purge."""

from pathlib import Path

import redis
from django.conf import settings

from harness import celery_worker
from redisconn.keys import BULK_INFLIGHT_PREFIX
from tests.support.product import LOGS, product_env

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


class CeleryWorker(celery_worker.CeleryWorker):
    """The worker against the suite's engine, database and Redis (`env` overrides them)."""

    def __init__(self, engine_url: str, *, beat_schedule: Path | None = None, **env: str) -> None:
        super().__init__(
            product_env(engine_url, **env), LOGS / "test-celery.log", beat_schedule=beat_schedule
        )

    def restart(self) -> None:
        """Stop, drop every task message in the broker, and start again."""
        self.stop()
        purge_broker()
        self.orphans.clear()
        self.start()
