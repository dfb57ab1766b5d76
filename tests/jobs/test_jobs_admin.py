"""Jobs in the admin: submit with files, live progress and fields, actions, no Save buttons, downloads,
escaped text."""

import csv
import io
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile

from documents.uploads import DocumentInput
from jobs import claims, services
from jobs.models import Document, Job
from jobs.summarize import Summary

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def admin_client(client):
    user = get_user_model().objects.create_superuser("boss", password="pw")
    client.force_login(user)
    client.user = user
    return client


def finished_job(owner) -> Job:
    job = services.job_create(
        owner=owner,
        documents=[DocumentInput(HOSTILE, text="Body."), DocumentInput("=cmd|calc", text="Other.")],
        name=HOSTILE,
        start=False,
    )
    first, second = job.documents.order_by("id")
    summary = Summary(text=HOSTILE, finish_reason="stop", engine_calls=1, prompt_tokens=50, cached_tokens=32)
    claims.documents_record(worker="w", outcomes=[claims.Done(first.pk, summary, 5)])
    Document.objects.filter(pk=second.pk).update(status="failed", error=HOSTILE)
    return job


def test_it_creates_a_job_from_uploaded_files(admin_client):
    page = admin_client.get("/admin/jobs/job/add/")
    assert page.status_code == 200 and b'type="file"' in page.content and b"multiple" in page.content
    response = admin_client.post(
        "/admin/jobs/job/add/",
        {
            "name": "Reports",
            "files": [SimpleUploadedFile("a.txt", b"One."), SimpleUploadedFile("empty.txt", b"")],
            "preset": "paragraph",
            "max_summary_tokens": "100",
        },
    )
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/admin/jobs/job/{job.pk}/change/")
    assert job.status == Job.Status.DRAFT
    assert dict(job.documents.values_list("external_id", "status")) == {
        "a.txt": "pending",
        "empty.txt": "failed",
    }


def test_it_shows_upload_problems_on_the_form(admin_client, settings):
    settings.BULK_MAX_FILE_BYTES = 10
    response = admin_client.post(
        "/admin/jobs/job/add/",
        {
            "files": [SimpleUploadedFile("big.txt", b"x" * 11)],
            "preset": "custom",
            "max_summary_tokens": "100",
        },
    )
    assert response.status_code == 200
    assert b"file limit" in response.content and b"A custom preset needs an instruction." in response.content
    assert not Job.objects.exists()


def test_it_escapes_document_names_summaries_and_errors(admin_client):
    job = finished_job(admin_client.user)
    for url in ["/admin/jobs/job/", f"/admin/jobs/job/{job.pk}/change/"]:
        content = admin_client.get(url).content.decode()
        assert HOSTILE not in content and "<img src=x" not in content
    change = admin_client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in change
    assert 'src="/static/jobs/admin_progress.js"' in change


def test_it_serves_live_progress_as_json(admin_client):
    job = finished_job(admin_client.user)
    listing = admin_client.get("/admin/jobs/job/").content.decode()
    assert f'data-job-progress="{job.pk}"' in listing and "<progress" in listing
    assert f'<span data-job="{job.pk}" data-field="status">Draft</span>' in listing
    body = admin_client.get(f"/admin/jobs/job/progress.json?ids={job.pk},999").json()
    progress = body["jobs"][str(job.pk)]
    assert (progress["total"], progress["done"], progress["failed"]) == (2, 1, 1)
    assert progress["cache_hit_ratio"] == 0.64
    assert progress["fields"] == {
        "status": "Draft",
        "started_at": "–",
        "finished_at": "–",
        "cache": "64.0% of 50 prompt tokens served from the prefix cache",
    }
    assert progress["actions"] == {"start": True, "cancel": True, "retry": True}
    assert "documents" not in progress, "documents only for the job a page asks them for"


def test_it_serves_each_documents_live_fields_for_the_job_page(admin_client):
    job = finished_job(admin_client.user)
    body = admin_client.get(f"/admin/jobs/job/progress.json?ids={job.pk}&documents={job.pk}").json()
    first, second = job.documents.order_by("id")
    assert body["jobs"][str(job.pk)]["documents"] == [
        {
            "id": first.pk,
            "fields": {
                "status": "Done",
                "attempts": "0",
                "summary": HOSTILE,
                "tokens": "0 / 50 / 32 / 0",
                "error": "",
            },
        },
        {
            "id": second.pk,
            "fields": {"status": "Failed", "attempts": "0", "summary": "", "tokens": "", "error": HOSTILE},
        },
    ]
    # The page draws the same text in the cells its script updates.
    change = admin_client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert f'<span data-document="{first.pk}" data-field="status">Done</span>' in change
    assert f'<span data-document="{second.pk}" data-field="status">Failed</span>' in change
    assert f'<span data-job="{job.pk}" data-field="finished_at">–</span>' in change


def test_it_offers_no_save_buttons_on_a_job_page_and_refuses_a_posted_form(admin_client):
    job = finished_job(admin_client.user)
    change = admin_client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert 'name="_save"' not in change and 'name="_continue"' not in change
    assert 'name="_addanother"' not in change and 'type="submit" value="Save' not in change
    assert 'class="deletelink"' in change and 'class="closelink"' in change
    response = admin_client.post(f"/admin/jobs/job/{job.pk}/change/", {"name": "Renamed", "_save": "Save"})
    assert response.status_code == 405
    job.refresh_from_db()
    assert job.name == HOSTILE


def test_it_enables_only_the_actions_that_apply_to_the_jobs_state(admin_client):
    job = finished_job(admin_client.user)

    def buttons() -> dict[str, bool]:
        change = admin_client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
        found = re.findall(r'data-job-action="(\w+)"( disabled)?>', change)
        return {action: not disabled for action, disabled in found}

    assert buttons() == {"start": True, "cancel": True, "retry": True}
    Job.objects.filter(pk=job.pk).update(status=Job.Status.RUNNING)
    assert buttons() == {"start": False, "cancel": True, "retry": True}
    Document.objects.filter(job=job, status="failed").update(status="done")
    Job.objects.filter(pk=job.pk).update(status=Job.Status.COMPLETED)
    assert buttons() == {"start": False, "cancel": False, "retry": False}
    Job.objects.filter(pk=job.pk).update(status=Job.Status.CANCELLED)
    assert buttons() == {"start": True, "cancel": False, "retry": False}


def test_it_downloads_results_as_jsonl_and_csv(admin_client):
    job = finished_job(admin_client.user)
    jsonl = admin_client.get(f"/admin/jobs/job/{job.pk}/results.jsonl")
    assert jsonl["Content-Disposition"] == f'attachment; filename="job-{job.pk}-results.jsonl"'
    lines = [json.loads(line) for line in b"".join(jsonl.streaming_content).decode().splitlines()]
    assert [line["custom_id"] for line in lines] == [HOSTILE, "=cmd|calc"]
    response = admin_client.get(f"/admin/jobs/job/{job.pk}/results.csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0]["summary"] == HOSTILE and rows[0]["cached_tokens"] == "32"
    assert rows[1]["id"] == "'=cmd|calc", "a formula in a cell is defused"


def test_it_starts_cancels_and_retries_from_the_change_page(admin_client, django_capture_on_commit_callbacks):
    job = finished_job(admin_client.user)
    with django_capture_on_commit_callbacks() as callbacks:
        response = admin_client.post(f"/admin/jobs/job/{job.pk}/do/retry/")
    assert response.status_code == 302 and len(callbacks) == 1
    job.refresh_from_db()
    assert job.status == Job.Status.QUEUED
    assert job.documents.filter(status="pending").count() == 1
    admin_client.post(f"/admin/jobs/job/{job.pk}/do/cancel/")
    job.refresh_from_db()
    assert job.status == Job.Status.CANCELLED and job.documents.filter(status="cancelled").count() == 1
    with django_capture_on_commit_callbacks() as callbacks:
        admin_client.post("/admin/jobs/job/", {"action": "start_jobs", "_selected_action": [job.pk]})
    job.refresh_from_db()
    assert job.status == Job.Status.QUEUED and len(callbacks) == 1
    assert admin_client.get(f"/admin/jobs/job/{job.pk}/do/cancel/").status_code == 405
