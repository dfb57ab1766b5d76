"""A job through the real Celery worker and the real vLLM engine."""

import time

import pytest
import redis
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile

from documents.uploads import documents_from_files
from jobs import selectors, services
from jobs.models import Document, Job, Result
from redisconn.keys import CHAT_ACTIVE
from tests.support.jobs_corpus import long_report, report
from tests.support.jobs_helpers import staff_user, wait_finished
from tests.support.jobs_pdf import pdf_with_text
from tests.support.product import engine_gauge

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_summarizes_twenty_documents_one_longer_than_the_context_window(celery_worker):
    uploads = [SimpleUploadedFile(f"report-{i:02}.txt", report(i).encode()) for i in range(18)]
    uploads.append(SimpleUploadedFile("scan.pdf", pdf_with_text(report(99), report(98))))
    uploads.append(SimpleUploadedFile("annual.md", long_report().encode()))
    job = services.job_create(
        owner=staff_user(), documents=documents_from_files(uploads), preset="bullets", max_summary_tokens=48
    )
    job = wait_finished(job, timeout=480)
    progress = selectors.job_progress(job=job)
    assert job.status == Job.Status.COMPLETED, progress
    assert progress.total == progress.done == 20
    results = {r.document.external_id: r for r in Result.objects.filter(job=job).select_related("document")}
    assert len(results) == 20 and all(r.summary.strip() for r in results.values())
    long = results["annual.md"]
    assert long.document_tokens > settings.INFERENCE_MAX_MODEL_LEN
    assert long.chunks >= 2 and long.engine_calls == long.chunks + 1
    assert "thousand dollars" in Document.objects.get(job=job, external_id="scan.pdf").text
    assert progress.cache_hit_ratio and progress.cache_hit_ratio > 0
    assert progress.docs_per_minute and progress.docs_per_minute > 0


def test_it_keeps_one_bulk_request_in_the_engine_while_chat_is_active(celery_worker, engine_url):
    client = redis.Redis.from_url(settings.REDIS_URL)
    # A lease as an answer's admission holds it (answers.admission): the set the web processes
    # write too, so an answer admitted meanwhile adds to it instead of failing on another type.
    client.zadd(CHAT_ACTIVE, {"test-chat-lease": time.time() + 3600})
    client.expire(CHAT_ACTIVE, 3600)  # the set's expiry follows the last admission's lease
    peak = [0.0]

    def sample():
        peak[0] = max(peak[0], engine_gauge(engine_url, "vllm:num_requests_running"))

    try:
        job = services.job_create(
            owner=staff_user(), documents=documents_from_files(
                [SimpleUploadedFile(f"r{i}.txt", report(200 + i).encode()) for i in range(6)]
            ), max_summary_tokens=32,
        )  # fmt: skip
        job = wait_finished(job, timeout=300, on_tick=sample)
    finally:
        client.zrem(CHAT_ACTIVE, "test-chat-lease")
    assert job.status == Job.Status.COMPLETED
    assert peak[0] == 1, f"at most one bulk request while chat is active, saw {peak[0]}"
