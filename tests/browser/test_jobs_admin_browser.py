"""The admin's job list and job page update live in a real browser (Debian's Chromium)."""

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from documents.uploads import DocumentInput
from jobs import claims, services
from jobs.models import Document, Job
from jobs.summarize import Summary
from tests.support.browser import log_in

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
    claims.documents_record(
        worker="w", outcomes=[claims.Done(first.pk, Summary(text="S.", engine_calls=1), 1)]
    )
    Document.objects.filter(pk=second.pk).update(status="failed", error="x")
    expect(counts).to_have_text("1 done, 1 failed of 4", timeout=10_000)
    assert page.locator(f'[data-job-progress="{job.pk}"] progress').get_attribute("value") == "2"
    assert errors == []


def test_it_updates_a_job_page_live_status_times_documents_and_actions(page, live_server):
    boss = get_user_model().objects.create_superuser("boss", password="boss-password")
    job = services.job_create(
        owner=boss, documents=[DocumentInput(f"d{i}", text="Text.") for i in range(3)], start=False
    )
    Job.objects.filter(pk=job.pk).update(status=Job.Status.QUEUED)
    first, second, third = job.documents.order_by("id")
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(
        page, live_server.url, "boss", "boss-password", f"/admin/login/?next=/admin/jobs/job/{job.pk}/change/"
    )

    def job_field(name: str):
        return page.locator(f'[data-job="{job.pk}"][data-field="{name}"]')

    def cell(document: Document, name: str):
        return page.locator(f'[data-document="{document.pk}"][data-field="{name}"]')

    def action(name: str):
        return page.locator(f'[data-job-action="{name}"]')

    assert page.locator("input[type=submit][name^=_]").count() == 0, "no Save buttons"
    expect(job_field("status")).to_have_text("Queued")
    expect(job_field("started_at")).to_have_text("–")
    expect(action("start")).to_be_disabled()
    expect(action("cancel")).to_be_enabled()
    expect(action("retry")).to_be_disabled()

    claims.job_mark_running(job_id=job.pk)
    claims.documents_claim(job_id=job.pk, worker="w", count=1)
    expect(job_field("status")).to_have_text("Running", timeout=10_000)
    expect(job_field("started_at")).not_to_have_text("–")
    expect(cell(first, "status")).to_have_text("Running", timeout=10_000)
    expect(cell(first, "attempts")).to_have_text("1")

    claims.documents_record(
        worker="w",
        outcomes=[
            claims.Done(
                first.pk,
                Summary(text="First summary.", engine_calls=1, prompt_tokens=40, cached_tokens=32),
                1,
            )
        ],
    )
    claims.documents_claim(job_id=job.pk, worker="w", count=1)
    claims.document_fail(document_id=second.pk, worker="w", error="Unreadable.", retryable=False)
    expect(cell(first, "status")).to_have_text("Done", timeout=10_000)
    expect(cell(first, "summary")).to_have_text("First summary.")
    expect(cell(first, "tokens")).to_have_text("0 / 40 / 32 / 0")
    expect(cell(second, "status")).to_have_text("Failed", timeout=10_000)
    expect(cell(second, "error")).to_have_text("Unreadable.")
    expect(action("retry")).to_be_enabled()
    expect(job_field("cache")).to_have_text("80.0% of 40 prompt tokens served from the prefix cache")

    claims.documents_claim(job_id=job.pk, worker="w", count=1)
    claims.documents_record(
        worker="w", outcomes=[claims.Done(third.pk, Summary(text="Third.", engine_calls=1), 1)]
    )
    assert claims.job_finish(job_id=job.pk) == Job.Status.PARTIAL
    expect(job_field("status")).to_have_text("Partial", timeout=10_000)
    expect(job_field("finished_at")).not_to_have_text("–")
    expect(cell(third, "status")).to_have_text("Done")
    expect(action("cancel")).to_be_disabled()
    expect(action("start")).to_be_disabled()
    expect(action("retry")).to_be_enabled()
    assert errors == []
