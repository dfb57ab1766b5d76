"""The staff-token API: POST /api/jobs/, GET /api/jobs/ID/, GET /api/jobs/ID/results."""

import io
import json
import zipfile

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile

from apitokens.services import token_issue, token_revoke
from jobs import claims, services
from jobs.models import Document, Job
from jobs.summarize import Summary
from tests.support.api_keys import bearer
from tests.support.jobs_helpers import staff_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff():
    return staff_user()


def test_it_creates_a_job_from_uploaded_files(client, staff):
    files = [SimpleUploadedFile("a.txt", b"First document."), SimpleUploadedFile("b.md", b"Second.")]
    response = client.post(
        "/api/jobs/",
        {"files": files, "preset": "bullets", "max_summary_tokens": "64"},
        headers=bearer(staff, "jobs.submit"),
    )
    assert response.status_code == 201, response.content
    body = response.json()
    job = Job.objects.get(pk=body["id"])
    assert job.owner == staff and job.preset == "bullets" and job.max_summary_tokens == 64
    assert body["status"] == "queued" and body["progress"]["total"] == 2
    assert sorted(job.documents.values_list("external_id", flat=True)) == ["a.txt", "b.md"]


def test_it_creates_a_job_from_json_documents_with_a_custom_instruction(client, staff):
    payload = {
        "documents": [{"id": "x", "text": "One."}, {"id": "y", "text": "Two."}],
        "preset": "custom",
        "instruction": "List the people named.",
    }
    response = client.post(
        "/api/jobs/",
        json.dumps(payload),
        content_type="application/json",
        headers=bearer(staff, "jobs.submit"),
    )
    assert response.status_code == 201
    assert Job.objects.get(pk=response.json()["id"]).instruction == "List the people named."


def test_it_answers_json_nested_deeper_than_the_parser_goes_with_a_clear_error(client, staff):
    response = client.post(
        "/api/jobs/", "[" * 20_000, content_type="application/json", headers=bearer(staff, "jobs.submit")
    )
    assert response.status_code == 400
    assert "nested too deeply" in response.json()["error"]["detail"]
    assert not Job.objects.exists()


@pytest.mark.parametrize("case", ["none", "malformed", "wrong_scope", "revoked", "session_only"])
def test_it_refuses_requests_without_a_live_jobs_token(client, staff, case):
    headers = {}
    if case == "malformed":
        headers = {"Authorization": "Bearer nope"}
    elif case == "wrong_scope":
        headers = bearer(staff, "chat")
    elif case == "revoked":
        token, plain = token_issue(user=staff, scopes=["jobs.submit"])
        token_revoke(prefix=token.prefix)
        headers = {"Authorization": f"Bearer {plain}"}
    elif case == "session_only":
        client.force_login(staff)
    response = client.post("/api/jobs/", {"files": [SimpleUploadedFile("a.txt", b"x")]}, headers=headers)
    assert response.status_code == 401
    assert client.get("/api/jobs/1/", headers=headers).status_code == 401
    assert not Job.objects.exists()


def test_it_lets_only_staff_submit(client):
    user = get_user_model().objects.create_user("plain", is_staff=True)
    headers = bearer(user, "jobs.submit")  # issued while staff: only staff may hold the scope
    user.is_staff = False
    user.save()
    response = client.post("/api/jobs/", {"files": [SimpleUploadedFile("a.txt", b"x")]}, headers=headers)
    assert response.status_code == 403


def test_it_refuses_an_oversized_body_before_reading_it(client, staff, settings):
    settings.BULK_MAX_UPLOAD_BYTES = 1000
    response = client.post(
        "/api/jobs/",
        {"files": [SimpleUploadedFile("a.txt", b"a" * 2000)]},
        headers=bearer(staff, "jobs.submit"),
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_large"


def test_it_explains_a_refused_upload(client, staff, settings):
    settings.BULK_MAX_UNCOMPRESSED_BYTES = 10_000
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("bomb.txt", b"0" * 1_000_000)
    response = client.post(
        "/api/jobs/",
        {"files": [SimpleUploadedFile("bomb.zip", buffer.getvalue())]},
        headers=bearer(staff, "jobs.submit"),
    )
    assert response.status_code == 400 and "expands to" in response.json()["error"]["detail"]
    response = client.post(
        "/api/jobs/", {"files": [], "preset": "custom"}, headers=bearer(staff, "jobs.submit")
    )
    assert response.status_code == 400


def test_it_hides_other_users_jobs(client, staff):
    other = get_user_model().objects.create_user("other", is_staff=True)
    job = services.job_create(owner=staff, documents=_inputs(1), start=False)
    assert client.get(f"/api/jobs/{job.pk}/", headers=bearer(other, "jobs.submit")).status_code == 404
    assert client.get(f"/api/jobs/{job.pk}/results", headers=bearer(other, "jobs.submit")).status_code == 404
    assert client.get(f"/api/jobs/{job.pk}/", headers=bearer(staff, "jobs.submit")).json()["id"] == job.pk


def test_it_streams_results_in_the_openai_batch_shape(client, staff):
    job = services.job_create(owner=staff, documents=_inputs(3), start=False)
    first, second, third = job.documents.order_by("id")
    figures = {"engine_calls": 1, "prompt_tokens": 90, "cached_tokens": 64, "completion_tokens": 5}
    summary = Summary(text="A <b>summary</b>.", finish_reason="stop", **figures)
    claims.documents_record(worker="w", outcomes=[claims.Done(first.pk, summary, 10)])
    Document.objects.filter(pk=second.pk).update(status="failed", error="engine_error: boom")
    response = client.get(f"/api/jobs/{job.pk}/results", headers=bearer(staff, "jobs.submit"))
    assert response["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert [line["custom_id"] for line in lines] == ["doc-0", "doc-1"]
    ok, failed = lines
    assert ok["error"] is None and ok["response"]["status_code"] == 200
    assert ok["response"]["body"]["choices"][0]["message"]["content"] == "A <b>summary</b>."
    assert ok["response"]["body"]["usage"]["prompt_tokens_details"]["cached_tokens"] == 64
    assert failed["response"] is None and failed["error"] == {
        "code": "failed",
        "message": "engine_error: boom",
    }
    detail = client.get(f"/api/jobs/{job.pk}/", headers=bearer(staff, "jobs.submit")).json()
    assert detail["progress"]["done"] == 1 and detail["progress"]["cache_hit_ratio"] == round(64 / 90, 4)


def _inputs(n: int):
    from documents.uploads import DocumentInput

    return [DocumentInput(f"doc-{i}", text=f"Text {i}.") for i in range(n)]
