"""The Batch API's files and batches through Django's client, their lines run by the bulk runner on a
fault-injecting engine: who may use them, uploads and their limits, a malformed file failing in
`validating`, refused lines and a spent quota in the error file, cancelling, and the output's shape.
The openai SDK against the real engine and a real Celery worker: test_openai_batches_sdk.py."""

import json
import uuid
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from apitokens.services import InvalidScope, token_issue
from batches import services
from batches.models import Batch, File
from batches.tasks import batch_finalize_when_stopped
from jobs.models import Job
from jobs.runner import run_job
from tests.support.api_keys import bearer
from tests.support.fake_engine import FakeEngine
from usage.models import DailyQuota, UsageDay

pytestmark = pytest.mark.django_db(transaction=True)
MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(autouse=True)
def served_model(settings, tmp_path):
    settings.INFERENCE_MODEL_NAME = MODEL
    settings.BATCH_FILES_DIR = tmp_path
    settings.BULK_CONCURRENCY = 1


def batch_user(name: str = "batcher"):
    """A member of a group that staff granted batches to."""
    person = get_user_model().objects.create_user(f"{name}-{uuid.uuid4().hex[:6]}")
    group, _ = Group.objects.get_or_create(name="batch users")
    group.permissions.add(Permission.objects.get(codename="use_batch_api"))
    person.groups.add(group)
    return get_user_model().objects.get(pk=person.pk)


def chat_line(custom_id: str, content: str = "Hi", **body) -> dict:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 4, **body}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def jsonl(lines: list) -> bytes:
    return b"".join(
        (line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines
    )


def upload(headers: dict, data: bytes, **fields) -> dict:
    form = {"purpose": "batch", "file": SimpleUploadedFile("in.jsonl", data), **fields}
    return Client().post("/v1/files", form, headers=headers)


def created(headers: dict, data: bytes) -> tuple[str, Batch]:
    file_id = upload(headers, data).json()["id"]
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    response = Client().post("/v1/batches", body, content_type="application/json", headers=headers)
    assert response.status_code == 200 and response.json()["status"] == "validating"
    batch = Batch.objects.get(batch_id=response.json()["id"])
    services.batch_validate(batch_pk=batch.pk)
    return batch.batch_id, Batch.objects.get(pk=batch.pk)


def run(batch: Batch, engine: FakeEngine) -> None:
    async_to_sync(run_job)(job_id=batch.job_id, worker="test/1", seconds=30, engine=engine, probe=engine)


def content(headers: dict, file_id: str) -> list[dict]:
    response = Client().get(f"/v1/files/{file_id}/content", headers=headers)
    assert response.status_code == 200
    return [json.loads(line) for line in async_to_sync(joined)(response.streaming_content).splitlines()]


async def joined(chunks) -> bytes:
    return b"".join([chunk async for chunk in chunks])


def test_only_the_groups_staff_grant_it_may_hold_the_batch_scope(alice):
    with pytest.raises(InvalidScope):
        token_issue(user=alice, scopes=["batch"])
    response = Client().get("/v1/batches", headers=bearer(batch_user(), "openai"))
    assert response.status_code == 403 and "'batch' scope" in response.json()["error"]["message"]
    assert Client().get("/v1/batches", headers=bearer(batch_user(), "batch")).status_code == 200


def test_it_keeps_lists_serves_and_deletes_files_for_their_owner_only(settings, bob):
    headers, other = bearer(batch_user(), "batch"), bearer(batch_user("other"), "batch")
    data = jsonl([chat_line("a"), chat_line("b")])
    refused = upload(headers, data, purpose="assistants").json()["error"]
    assert (refused["param"], refused["code"]) == ("purpose", "invalid_field")
    kept = upload(headers, data, **{"expires_after[anchor]": "created_at", "expires_after[seconds]": "3600"})
    file = kept.json()
    assert (file["object"], file["bytes"], file["purpose"], file["filename"]) == (
        "file",
        len(data),
        "batch",
        "in.jsonl",
    )
    assert file["expires_at"] == file["created_at"] + 3600
    served = Client().get(f"/v1/files/{file['id']}/content", headers=headers)
    assert async_to_sync(joined)(served.streaming_content) == data
    assert served["Content-Disposition"] == 'attachment; filename="in.jsonl"'
    assert [f["id"] for f in Client().get("/v1/files", headers=headers).json()["data"]] == [file["id"]]
    for path in (f"/v1/files/{file['id']}", f"/v1/files/{file['id']}/content"):
        assert Client().get(path, headers=other).status_code == 404
    assert Client().delete(f"/v1/files/{file['id']}", headers=other).status_code == 404
    assert Client().delete(f"/v1/files/{file['id']}", headers=headers).json()["deleted"] is True
    assert Client().get(f"/v1/files/{file['id']}", headers=headers).status_code == 404
    assert not list(settings.BATCH_FILES_DIR.rglob("file-*"))
    settings.BATCH_FILE_MAX_BYTES = 10
    assert upload(headers, data).status_code == 413


def test_a_malformed_file_fails_the_batch_in_validating_with_openais_errors():
    headers = bearer(batch_user(), "batch")
    other_url = {**chat_line("c"), "url": "/v1/embeddings"}
    _, batch = created(headers, jsonl([chat_line("a"), b"{not json", chat_line("a"), other_url]))
    shown = Client().get(f"/v1/batches/{batch.batch_id}", headers=headers).json()
    assert shown["status"] == "failed" and shown["failed_at"]
    assert [(e["code"], e["line"]) for e in shown["errors"]["data"]] == [
        ("invalid_json_line", 2),
        ("duplicate_custom_id", 3),
        ("mismatched_endpoint", 4),
    ]
    assert shown["request_counts"] == {"total": 0, "completed": 0, "failed": 0}


def test_it_runs_the_lines_and_sends_refused_ones_and_those_past_the_quota_to_the_error_file():
    owner = batch_user()
    headers = bearer(owner, "batch")
    lines = [chat_line(f"ok-{i}") for i in range(3)] + [
        chat_line("hot", temperature=5),
        chat_line("nope", model="gpt-4o"),
    ]
    batch_id, batch = created(headers, jsonl(lines))
    assert batch.status == "in_progress" and batch.job.kind == "batch"
    # Two lines' tokens (14 each on the fake engine) spend the quota: the third is refused.
    DailyQuota.objects.create(user=owner, tokens=20)
    run(batch, FakeEngine())
    shown = Client().get(f"/v1/batches/{batch_id}", headers=headers).json()
    assert shown["status"] == "completed" and shown["completed_at"] and shown["finalizing_at"]
    assert shown["request_counts"] == {"total": 5, "completed": 2, "failed": 3}
    output = content(headers, shown["output_file_id"])
    assert [line["custom_id"] for line in output] == ["ok-0", "ok-1"]
    assert output[0]["response"]["status_code"] == 200 and output[0]["error"] is None
    assert output[0]["response"]["body"]["object"] == "chat.completion"
    errors = {line["custom_id"]: line for line in content(headers, shown["error_file_id"])}
    assert {k: v["error"]["code"] for k, v in errors.items()} == {
        "ok-2": "quota_exceeded",
        "hot": "invalid_field",
        "nope": "model_not_found",
    }
    assert errors["nope"]["response"]["status_code"] == 404
    assert errors["ok-2"]["response"]["body"]["error"]["type"] == "rate_limit_error"
    used = UsageDay.objects.get(user=owner)
    assert shown["usage"]["total_tokens"] == used.prompt_tokens + used.completion_tokens > 0
    assert File.objects.filter(owner=owner, purpose="batch_output").count() == 2


def test_a_cancelled_batch_keeps_what_ran_and_lists_the_rest_as_cancelled():
    headers = bearer(batch_user(), "batch")
    batch_id, batch = created(headers, jsonl([chat_line(f"l-{i}") for i in range(4)]))
    Job.objects.filter(pk=batch.job_id).update(status=Job.Status.RUNNING)
    cancelling = Client().post(f"/v1/batches/{batch_id}/cancel", headers=headers).json()
    assert cancelling["status"] == "cancelling" and cancelling["cancelling_at"]
    services.batch_finalize(batch.job_id)
    shown = Client().get(f"/v1/batches/{batch_id}", headers=headers).json()
    assert shown["status"] == "cancelled" and shown["output_file_id"] is None
    assert {line["error"]["code"] for line in content(headers, shown["error_file_id"])} == {"batch_cancelled"}
    assert shown["request_counts"] == {"total": 4, "completed": 0, "failed": 4}


def test_a_cancelled_batch_deleted_before_it_is_finalized_ends_the_finalizing_task_quietly():
    headers = bearer(batch_user(), "batch")
    _, batch = created(headers, jsonl([chat_line("gone")]))
    Batch.objects.filter(pk=batch.pk).delete()
    assert batch_finalize_when_stopped.apply(args=[batch.pk]).successful()


def test_batches_list_newest_first_a_page_at_a_time_and_another_users_read_as_missing():
    headers = bearer(batch_user(), "batch")
    ids = [created(headers, jsonl([chat_line("a")]))[0] for _ in range(3)]
    first = Client().get("/v1/batches?limit=2", headers=headers).json()
    assert [b["id"] for b in first["data"]] == ids[:0:-1] and first["has_more"]
    rest = Client().get(f"/v1/batches?limit=2&after={first['last_id']}", headers=headers).json()
    assert [b["id"] for b in rest["data"]] == ids[:1] and not rest["has_more"]
    other = bearer(batch_user("other"), "batch")
    assert Client().get(f"/v1/batches/{ids[0]}", headers=other).status_code == 404
    assert Client().post(f"/v1/batches/{ids[0]}/cancel", headers=other).status_code == 404
    body = {"input_file_id": "file-nope", "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    response = Client().post("/v1/batches", body, content_type="application/json", headers=headers)
    assert (response.status_code, response.json()["error"]["param"]) == (404, "input_file_id")
    body = {**body, "completion_window": "1h"}
    response = Client().post("/v1/batches", body, content_type="application/json", headers=headers)
    assert (response.status_code, response.json()["error"]["param"]) == (400, "completion_window")


def test_a_batch_past_its_window_expires_keeping_what_ran():
    headers = bearer(batch_user(), "batch")
    batch_id, batch = created(headers, jsonl([chat_line(f"l-{i}") for i in range(3)]))
    Batch.objects.filter(pk=batch.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    services.batches_sweep()  # cancels the job; no runner holds it, so the same sweep ends it
    shown = Client().get(f"/v1/batches/{batch_id}", headers=headers).json()
    assert shown["status"] == "expired" and shown["expired_at"]
    assert {line["error"]["code"] for line in content(headers, shown["error_file_id"])} == {"batch_expired"}


def test_a_batch_shows_in_the_admin_beside_the_jobs(client):
    headers = bearer(batch_user(), "batch")
    batch_id, batch = created(headers, jsonl([chat_line("a")]))
    staff = get_user_model().objects.create_superuser(
        f"admin-{uuid.uuid4().hex[:6]}", password="pw-admin-123456"
    )
    client.force_login(staff)
    jobs = client.get("/admin/jobs/job/?kind=batch").content.decode()
    assert batch_id in jobs
    listed = client.get("/admin/batches/batch/").content.decode()
    assert batch_id in listed and f"/admin/jobs/job/{batch.job_id}/change/" in listed
