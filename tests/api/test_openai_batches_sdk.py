"""The Batch API as the openai SDK drives it, against the running product, the real engine and a real
Celery worker: upload, create, poll, read the output; cancel mid-batch; the worker killed mid-batch;
another user's ids; auto-pagination over batches."""

import io
import json
import time
import uuid

import openai
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db.models import Sum

from apitokens.services import token_issue
from batches.models import Batch
from jobs.models import Document
from usage.models import UsageDay

pytestmark = pytest.mark.django_db(transaction=True)
ENDED = {"completed", "failed", "cancelled", "expired"}


def batch_client(base: str, name: str) -> tuple[openai.OpenAI, object]:
    person = get_user_model().objects.create_user(f"{name}-{uuid.uuid4().hex[:6]}")
    group, _ = Group.objects.get_or_create(name="batch users")
    group.permissions.add(Permission.objects.get(codename="use_batch_api"))
    person.groups.add(group)
    person = get_user_model().objects.get(pk=person.pk)
    _, plain = token_issue(user=person, scopes=["openai", "batch"])
    return openai.OpenAI(base_url=base + "/v1", api_key=plain, max_retries=0, timeout=120), person


def input_file(api: openai.OpenAI, count: int, *, tokens: int) -> str:
    """`count` chat requests of exactly `tokens` tokens each (min_tokens), as a JSONL upload."""
    lines = [
        {
            "custom_id": f"req-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": settings.INFERENCE_MODEL_NAME,
                "messages": [{"role": "user", "content": f"Write about the number {i}."}],
                "max_tokens": tokens,
                "min_tokens": tokens,
                "temperature": 0,
            },
        }
        for i in range(count)
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    return api.files.create(file=("requests.jsonl", io.BytesIO(data)), purpose="batch").id


def started(api: openai.OpenAI, file_id: str):
    return api.batches.create(
        input_file_id=file_id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"suite": "sdk"},
    )


def poll(api: openai.OpenAI, batch_id: str, until, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while True:
        batch = api.batches.retrieve(batch_id)
        if until(batch):
            return batch
        assert time.monotonic() < deadline, batch
        time.sleep(0.3)


def lines(api: openai.OpenAI, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [json.loads(line) for line in api.files.content(file_id).text.splitlines()]


def billed(person) -> tuple[int, int]:
    """The bulk requests and tokens counted for the user today."""
    sums = UsageDay.objects.filter(user=person, source="bulk").aggregate(
        requests=Sum("requests"), tokens=Sum("completion_tokens")
    )
    return sums["requests"] or 0, sums["tokens"] or 0


def test_it_runs_a_batch_from_upload_to_output_file(product_server, celery_worker):
    api, person = batch_client(product_server, "runner")
    batch = started(api, input_file(api, 4, tokens=8))
    assert batch.status == "validating" and batch.metadata == {"suite": "sdk"}
    done = poll(api, batch.id, lambda b: b.status in ENDED)
    assert done.status == "completed" and done.error_file_id is None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (4, 4, 0)
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    output = lines(api, done.output_file_id)
    assert sorted(line["custom_id"] for line in output) == [f"req-{i}" for i in range(4)]
    body = output[0]["response"]["body"]
    assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] == 8
    assert done.usage.output_tokens == 32 == billed(person)[1]
    assert billed(person)[0] == 4

    other, _ = batch_client(product_server, "stranger")
    for call in (
        lambda: other.batches.retrieve(batch.id),
        lambda: other.batches.cancel(batch.id),
        lambda: other.files.content(done.output_file_id),
        lambda: other.files.retrieve(done.input_file_id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()


def test_a_batch_cancelled_midway_keeps_its_finished_lines_and_bills_only_them(product_server, celery_worker):
    api, person = batch_client(product_server, "canceller")
    # 40 lines of 128 tokens by construction: far from done when the first lines are.
    batch = started(api, input_file(api, 40, tokens=128))
    poll(api, batch.id, lambda b: b.request_counts.completed >= 1)
    cancelling = api.batches.cancel(batch.id)
    assert cancelling.status == "cancelling"
    ended = poll(api, batch.id, lambda b: b.status in ENDED, timeout=120)
    assert ended.status == "cancelled" and ended.cancelled_at
    output, errors = lines(api, ended.output_file_id), lines(api, ended.error_file_id)
    assert 1 <= len(output) < 40 and len(output) + len(errors) == 40
    assert {line["error"]["code"] for line in errors} == {"batch_cancelled"}
    assert ended.request_counts.completed == len(output) and ended.request_counts.failed == len(errors)
    assert billed(person) == (len(output), 128 * len(output)) and ended.usage.output_tokens == 128 * len(
        output
    )


def test_every_line_runs_and_is_billed_once_when_the_worker_is_killed_midway(product_server, celery_worker):
    api, person = batch_client(product_server, "survivor")
    batch = started(api, input_file(api, 12, tokens=48))
    job_id = Batch.objects.get(batch_id=batch.id).job_id
    poll(
        api,
        batch.id,
        lambda b: (
            b.request_counts.completed >= 2
            and Document.objects.filter(job_id=job_id, status="running").exists()
        ),
    )
    celery_worker.kill()
    assert Document.objects.filter(job_id=job_id, status="running").exists()
    celery_worker.start()
    done = poll(api, batch.id, lambda b: b.status in ENDED)
    assert done.status == "completed"
    every = [line["custom_id"] for line in lines(api, done.output_file_id) + lines(api, done.error_file_id)]
    assert sorted(every) == sorted(f"req-{i}" for i in range(12))
    assert billed(person) == (12, 12 * 48)


def test_the_sdk_pages_through_batches_newest_first(product_server, celery_worker):
    api, _ = batch_client(product_server, "pager")
    file_id = input_file(api, 1, tokens=2)
    made = [started(api, file_id).id for _ in range(3)]
    first = api.batches.list(limit=2)
    assert len(first.data) == 2 and first.has_more
    assert [b.id for b in api.batches.list(limit=2)] == made[::-1]
    for batch_id in made:
        poll(api, batch_id, lambda b: b.status in ENDED)
    assert [f.id for f in api.files.list(purpose="batch")] == [file_id]


def test_it_runs_a_batch_of_embeddings(product_server, embedding_engine, celery_worker):
    api, person = batch_client(product_server, "embedder")
    requests = [
        {
            "custom_id": f"text-{i}",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": settings.EMBEDDING_MODEL_NAME, "input": [f"A sentence about {i}.", "Another."]},
        }
        for i in range(3)
    ]
    data = "".join(json.dumps(line) + "\n" for line in requests).encode()
    file_id = api.files.create(file=("texts.jsonl", io.BytesIO(data)), purpose="batch").id
    batch = api.batches.create(input_file_id=file_id, endpoint="/v1/embeddings", completion_window="24h")
    done = poll(api, batch.id, lambda b: b.status in ENDED)
    assert done.status == "completed" and done.request_counts.completed == 3
    output = {line["custom_id"]: line["response"]["body"] for line in lines(api, done.output_file_id)}
    assert set(output) == {"text-0", "text-1", "text-2"}
    vectors = output["text-0"]["data"]
    assert len(vectors) == 2 and len(vectors[0]["embedding"]) == settings.EMBEDDING_DIMENSIONS
    assert billed(person)[0] == 3 and done.usage.input_tokens == sum(
        b["usage"]["prompt_tokens"] for b in output.values()
    )
