"""The admin's job progress updates live in a real browser (Debian's Chromium)."""

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from jobs import claims, services
from jobs.ingest import DocumentInput
from jobs.models import Document, Job
from jobs.summarize import Summary
from tests.conftest import log_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_updates_progress_on_the_job_list_without_a_reload(page, live_server):
    boss = get_user_model().objects.create_superuser("boss", password="boss-password")
    job = services.job_create(
        owner=boss, documents=[DocumentInput(f"d{i}", text="Text.") for i in range(4)], start=False
    )
    Job.objects.filter(pk=job.pk).update(status=Job.Status.RUNNING)
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(page, live_server.url, "boss", "boss-password", "/admin/login/?next=/admin/jobs/job/")
    counts = page.locator(f'[data-job-progress="{job.pk}"] [data-field="counts"]')
    expect(counts).to_have_text("0 done, 0 failed of 4")
    first, second, *_ = job.documents.order_by("id")
    claims.document_complete(document_id=first.pk, summary=Summary(text="S.", engine_calls=1), duration_ms=1)
    Document.objects.filter(pk=second.pk).update(status="failed", error="x")
    expect(counts).to_have_text("1 done, 1 failed of 4", timeout=10_000)
    assert page.locator(f'[data-job-progress="{job.pk}"] progress').get_attribute("value") == "2"
    assert errors == []
