"""A batch outlives Redis killed (SIGKILL) mid-batch and started again from its append-only file, as
the bundled one is: the running product (daphne and a real Celery worker) on a Redis of this test's own,
the real engine. Every line ends once, in the output or the error file, and is billed once."""

import time

import pytest

from batches.models import Batch
from harness.processes import free_port
from harness.waiting import wait_for
from jobs.models import Document
from jobs.runner import RunnerLock
from tests.api.test_openai_batches_sdk import ENDED, batch_client, billed, input_file, lines, poll, started
from tests.support.celery_worker import CeleryWorker
from tests.support.product import redis_with_its_file, running_daphne

pytestmark = pytest.mark.django_db(transaction=True)

LINES = 16
TOKENS = 64
# What the worker logs when its runner and its broker connection find Redis gone.
GONE = ("Redis unreachable", "Connection to broker lost")


def log_since(worker: CeleryWorker, offset: int) -> str:
    with open(worker.log_path) as log:
        log.seek(offset)
        return log.read()


def test_every_line_runs_and_is_billed_once_when_redis_is_killed_midway(engine_url, tmp_path):
    port = free_port()
    own = {"REDIS_URL": f"redis://127.0.0.1:{port}/0", "BULK_RETRY_DELAY": "1", "BATCH_CONCURRENCY": "4"}
    worker = CeleryWorker(engine_url, **own)
    with redis_with_its_file(port, tmp_path) as first, running_daphne(engine_url, **own) as web:
        api, person = batch_client(web.url, "redis-kill")
        # 16 lines of 64 tokens, 4 in flight (BATCH_CONCURRENCY): far from done when the first lines
        # are, and at most those 4 finish while Redis is away, since none is claimed then.
        batch = started(api, input_file(api, LINES, tokens=TOKENS))
        job_id = Batch.objects.get(batch_id=batch.id).job_id
        finished = Document.objects.filter(job_id=job_id, status=Document.Status.DONE).count
        try:
            worker.start()
            wait_for(lambda: finished() >= 2, 300, "two lines answered")
            seen = worker.log_path.stat().st_size
            first.kill()
            first.wait()
            # Redis stays down until the runner and the worker's broker connection have found it gone,
            # and past the runner's lock's expiry: it comes back without the lock.
            wait_for(lambda: all(line in log_since(worker, seen) for line in GONE), 60, "Redis found gone")
            time.sleep(RunnerLock.TTL + 1)
            done_while_away = finished()
            assert 2 <= done_while_away < LINES, "the kill did not land mid-batch"
            with redis_with_its_file(port, tmp_path):
                exited = lambda: worker.process.poll() is not None  # noqa: E731
                done = poll(api, batch.id, lambda b: b.status in ENDED or exited())
                output, errors = lines(api, done.output_file_id), lines(api, done.error_file_id)
                # And the worker takes new work: it did not stop with its broker connection.
                after = poll(
                    api,
                    started(api, input_file(api, 1, tokens=2)).id,
                    lambda b: b.status in ENDED or exited(),
                )
                assert not exited(), f"the worker exited with Redis; see {worker.log_path}"
        finally:
            worker.stop()
    assert done.status == "completed" == after.status, (done, after)
    every = [line["custom_id"] for line in output + errors]
    assert sorted(every) == sorted(f"req-{i}" for i in range(LINES))
    assert not errors, errors
    # Lines answered after Redis came back, and none billed twice (nor a request of one run twice).
    assert done.request_counts.completed == LINES > done_while_away
    assert done.usage.output_tokens == LINES * TOKENS
    assert billed(person) == (LINES + 1, LINES * TOKENS + 2)
