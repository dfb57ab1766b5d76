"""A worker killed with SIGKILL mid-job: after a restart the job completes with exactly
one result per document, none missing."""

import time

import pytest
from django.db.models import Count

from documents.uploads import DocumentInput
from jobs import services
from jobs.models import Document, Job, Result
from tests.support.jobs_corpus import report
from tests.support.jobs_helpers import staff_user, wait_finished

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_completes_with_one_result_per_document_after_the_worker_is_killed(celery_worker):
    documents = [DocumentInput(f"doc-{i}", text=report(300 + i)) for i in range(16)]
    job = services.job_create(owner=staff_user(), documents=documents, max_summary_tokens=64)
    deadline = time.monotonic() + 300
    while Result.objects.filter(job=job).count() < 3 or not job.documents.filter(status="running").exists():
        assert time.monotonic() < deadline, "the job did not get going"
        time.sleep(0.1)
    celery_worker.kill()
    in_flight = set(job.documents.filter(status="running").values_list("external_id", flat=True))
    done_before = Result.objects.filter(job=job).count()
    job.refresh_from_db()
    assert in_flight and done_before < 16 and job.status == Job.Status.RUNNING

    celery_worker.start()
    job = wait_finished(job, timeout=300)
    assert job.status == Job.Status.COMPLETED
    per_document = Result.objects.filter(job=job).values("document").annotate(n=Count("id"))
    assert len(per_document) == 16 and {row["n"] for row in per_document} == {1}
    assert set(Document.objects.filter(job=job).values_list("status", flat=True)) == {"done"}
    retried = Document.objects.filter(job=job, external_id__in=in_flight)
    assert all(d.attempts == 2 for d in retried), [(d.external_id, d.attempts) for d in retried]
