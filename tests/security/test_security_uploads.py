"""Bulk-job uploads: only staff submit, and count limits hold before anything is stored.
(Sizes and zip expansion: tests/jobs/test_jobs_ingest.py and tests/jobs/test_jobs_api.py.)"""

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile

from jobs.models import Job
from tests.support.api_keys import bearer

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff():
    return get_user_model().objects.create_user("ops", password="pw-ops-123456", is_staff=True)


def test_it_refuses_more_files_than_documents_allowed_before_storing_any(client, staff, settings):
    settings.BULK_MAX_DOCUMENTS = settings.DATA_UPLOAD_MAX_NUMBER_FILES = 3
    files = [SimpleUploadedFile(f"{i}.txt", b"Some text.") for i in range(4)]
    response = client.post("/api/jobs/", {"files": files}, headers=bearer(staff, "jobs.submit"))
    assert response.status_code == 400
    assert Job.objects.count() == 0


def test_it_refuses_more_json_records_than_documents_allowed(client, staff, settings):
    settings.BULK_MAX_DOCUMENTS = 3
    documents = [{"id": str(i), "text": "Some text."} for i in range(4)]
    response = client.post(
        "/api/jobs/",
        json.dumps({"documents": documents}),
        content_type="application/json",
        headers=bearer(staff, "jobs.submit"),
    )
    assert response.status_code == 400
    assert Job.objects.count() == 0


def test_it_lets_only_staff_with_the_add_permission_submit_in_the_admin(client, staff):
    upload = {"files": [SimpleUploadedFile("a.txt", b"Some text.")], "preset": "paragraph"}
    plain = get_user_model().objects.create_user("plain", password="pw-plain-12345")
    client.force_login(plain)
    response = client.post("/admin/jobs/job/add/", {**upload, "max_summary_tokens": "64"})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    client.force_login(staff)  # staff, but without the jobs permissions
    upload["files"] = [SimpleUploadedFile("a.txt", b"Some text.")]
    assert client.post("/admin/jobs/job/add/", {**upload, "max_summary_tokens": "64"}).status_code == 403
    assert Job.objects.count() == 0


def zip_of(name: str, text: bytes) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(name, text)
    return buffer.getvalue()


def test_many_small_archives_in_one_upload_cannot_add_up_past_the_expansion_limit(client, staff, settings):
    import tracemalloc

    # Each archive alone expands to a fifth of the limit; forty of them to eight times it.
    settings.BULK_MAX_UNCOMPRESSED_BYTES = 5 * 1024 * 1024
    member = b"word " * (1024 * 1024 // 5)
    archives = [zip_of(f"doc-{i}.txt", member) for i in range(40)]
    assert sum(len(a) for a in archives) < 200_000, "small on the wire"
    files = [SimpleUploadedFile(f"part-{i}.zip", data) for i, data in enumerate(archives)]
    tracemalloc.start()
    try:
        response = client.post("/api/jobs/", {"files": files}, headers=bearer(staff, "jobs.submit"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status_code == 400
    assert "expands to" in response.json()["error"]["detail"]
    assert Job.objects.count() == 0
    # Refused from the archives' directories: nothing was expanded in memory.
    assert peak < 5 * 1024 * 1024, f"peak {peak} bytes"


def test_an_accepted_upload_is_stored_as_it_is_read_never_held_whole(staff, settings):
    import tracemalloc

    from documents.uploads import documents_from_files
    from jobs import services
    from jobs.models import Document

    # Forty archives of 1 MiB of text each: a 40 MiB expansion, accepted.
    settings.BULK_MAX_UNCOMPRESSED_BYTES = 64 * 1024 * 1024
    settings.BULK_MAX_FILE_BYTES = 2 * 1024 * 1024
    member = b"word " * (1024 * 1024 // 5)
    files = [SimpleUploadedFile(f"part-{i}.zip", zip_of(f"doc-{i}.txt", member)) for i in range(40)]
    tracemalloc.start()
    try:
        job = services.job_create(owner=staff, documents=documents_from_files(files), start=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert Document.objects.filter(job=job).count() == 40
    assert len(Document.objects.filter(job=job).first().text) == len(member)
    # A few documents' worth at a time (the store's batches, and the database driver's copies of
    # them), far from the 40 MiB expansion that holding it whole took (45 MiB traced).
    assert peak < 20 * 1024 * 1024, f"peak {peak} bytes"
