"""Usage and quotas: every chat, API and bulk answer counted per user per day, daily quotas per user or
group refused with the reset time, the usage page, the admin and the dashboard's top users."""

import asyncio
import json
from contextlib import aclosing

import pytest
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import AsyncClient, AsyncRequestFactory, Client

from apitokens.services import token_issue
from chat import consumers
from harness.waiting import until
from jobs import claims
from jobs.models import Document, Job
from jobs.summarize import Summary
from openai_api import views as openai_views
from tests.support.consumer_client import connected, until_closed
from tests.support.fake_engine import FakeEngine
from usage import selectors
from usage.models import DailyQuota, UsageDay
from usage.services import usage_record

pytestmark = pytest.mark.django_db(transaction=True)
MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture
def engine(monkeypatch, settings):
    settings.INFERENCE_MODEL_NAME = MODEL
    # Each answer: 10 prompt tokens and 2 completion tokens (tests/support/fake_engine.py).
    fake = FakeEngine(["Hel", "lo"])
    monkeypatch.setattr(consumers, "engine_client", lambda: fake)
    monkeypatch.setattr(openai_views, "engine_client", lambda: fake)
    return fake


def rows(user) -> dict[str, tuple]:
    return {
        r.source: (r.requests, r.prompt_tokens, r.cached_tokens, r.completion_tokens)
        for r in UsageDay.objects.filter(user=user, day=selectors.today())
    }


async def chat(user, content="Hi") -> dict:
    communicator = await connected(user)
    try:
        await communicator.send_json_to({"type": "chat.send", "conversation": None, "content": content})
        return (await until_closed(communicator))[-1]
    finally:
        await communicator.disconnect()


async def api(user, **fields):
    _, plain = await sync_to_async(token_issue)(user=user, scopes=["openai"])
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], **fields}
    async with ThreadSensitiveContext():
        response = await AsyncClient().post(
            "/v1/chat/completions",
            json.dumps(body),
            "application/json",
            headers={"Authorization": f"Bearer {plain}"},
        )
        if response.streaming:
            # Read to its end, as a client does: the answer is recorded before its last event is sent.
            async for _ in response.streaming_content:
                pass
        return response


def test_it_adds_to_one_row_per_user_day_and_source(alice):
    usage_record(user_id=alice.pk, source="chat", prompt_tokens=10, cached_tokens=4, completion_tokens=3)
    usage_record(user_id=alice.pk, source="chat", prompt_tokens=5, cached_tokens=None, completion_tokens=None)
    usage_record(
        user_id=alice.pk, source="bulk", prompt_tokens=7, cached_tokens=0, completion_tokens=1, requests=3
    )
    assert rows(alice) == {"chat": (2, 15, 4, 3), "bulk": (3, 7, 0, 1)}
    assert selectors.tokens_used(user_id=alice.pk, day=selectors.today()) == 26


async def test_it_counts_chat_and_api_answers_stored_or_not(alice, engine):
    assert (await chat(alice))["type"] == "chat.done"
    assert (await api(alice)).status_code == 200
    assert (await api(alice, stream=True, store=True)).status_code == 200
    assert await sync_to_async(rows)(alice) == {"chat": (1, 10, 0, 2), "api": (2, 20, 0, 4)}


def test_it_counts_a_bulk_document_for_the_jobs_owner(alice):
    job = Job.objects.create(owner=alice, name="j", instruction="Summarize.", max_summary_tokens=64)
    document = Document.objects.create(job=job, external_id="d.txt", text="words")
    summary = Summary(
        text="s",
        finish_reason="stop",
        engine_calls=3,
        prompt_tokens=300,
        cached_tokens=120,
        completion_tokens=40,
    )
    assert claims.documents_record(worker="w", outcomes=[claims.Done(document.pk, summary, 1.0)]) == 1
    # A duplicate delivery of the same result is not counted twice.
    assert claims.documents_record(worker="w", outcomes=[claims.Done(document.pk, summary, 1.0)]) == 0
    assert rows(alice) == {"bulk": (3, 300, 120, 40)}


async def test_it_refuses_a_spent_quota_with_the_reset_time_in_the_chat_and_the_api(alice, engine):
    await DailyQuota.objects.acreate(user=alice, tokens=20)
    assert (await chat(alice))["type"] == "chat.done"  # 12 of 20
    assert (await api(alice)).status_code == 200  # 24: over, and the next one is refused
    refused = await chat(alice)
    reset = selectors.next_reset()
    assert refused["code"] == "quota_exceeded" and refused["reset_at"] == reset.isoformat()
    assert "20 tokens" in refused["detail"] and f"{reset:%H:%M} UTC" in refused["detail"]
    assert 0 < refused["retry_after"] <= 86_400
    response = await api(alice)
    assert response.status_code == 429 and 0 < int(response["Retry-After"]) <= 86_400
    error = json.loads(response.content)["error"]
    assert (error["code"], error["type"]) == ("quota_exceeded", "rate_limit_error")
    assert len(engine.requests) == 2
    # Nothing of the refused chat turn was stored.
    assert await sync_to_async(lambda: alice.conversations.count())() == 1


def test_it_takes_the_users_own_quota_else_the_largest_groups_else_the_default(alice, bob, settings):
    assert selectors.quota_for(user=alice) is None
    settings.USAGE_DAILY_TOKENS = 1000
    assert selectors.quota_for(user=alice) == 1000
    small, large = Group.objects.create(name="small"), Group.objects.create(name="large")
    alice.groups.add(small, large)
    DailyQuota.objects.create(group=small, tokens=50)
    DailyQuota.objects.create(group=large, tokens=5000)
    assert selectors.quota_for(user=alice) == 5000
    DailyQuota.objects.create(user=alice, tokens=10)
    assert selectors.quota_for(user=alice) == 10
    assert selectors.quota_for(user=bob) == 1000


def test_it_shows_users_their_own_usage_only(alice, bob):
    usage_record(user_id=alice.pk, source="api", prompt_tokens=1234, cached_tokens=0, completion_tokens=1)
    usage_record(user_id=bob.pk, source="chat", prompt_tokens=98765, cached_tokens=0, completion_tokens=1)
    DailyQuota.objects.create(user=alice, tokens=5000)
    client = Client()
    assert client.get("/usage/").status_code == 302  # to the login page
    client.force_login(alice)
    page = client.get("/usage/").content.decode()
    assert "1235" in page and "98766" not in page
    assert "1235 tokens used of your 5000 a day" in page and "3765 left" in page


def test_it_lists_the_top_users_on_the_dashboard_and_their_days_in_the_admin(alice, bob):
    staff = get_user_model().objects.create_superuser("root", password="pw-root-12345")
    usage_record(user_id=alice.pk, source="chat", prompt_tokens=100, cached_tokens=0, completion_tokens=10)
    usage_record(user_id=bob.pk, source="api", prompt_tokens=900, cached_tokens=0, completion_tokens=90)
    assert [r["username"] for r in selectors.top_users(day=selectors.today())] == ["bob", "alice"]
    client = Client()
    client.force_login(staff)
    page = client.get("/monitoring/").content.decode()
    assert page.index(">bob<") < page.index(">alice<") and "990" in page
    listing = client.get("/admin/usage/usageday/")
    assert listing.status_code == 200 and "alice" in listing.content.decode()
    added = client.post("/admin/usage/dailyquota/add/", {"user": alice.pk, "tokens": 777})
    assert added.status_code == 302 and DailyQuota.objects.get(user=alice).tokens == 777
    # A quota is for one user or one group: neither is refused with the form's error.
    neither = client.post("/admin/usage/dailyquota/add/", {"tokens": 1})
    assert neither.status_code == 200 and DailyQuota.objects.count() == 1


async def test_a_stopped_answers_prompt_counts_in_the_chat_and_the_api(alice, monkeypatch, settings):
    """Stopping every answer after its first token once made a long document's prompt free."""
    settings.INFERENCE_MODEL_NAME = MODEL
    fake = FakeEngine(["first "], hang=True)
    monkeypatch.setattr(consumers, "engine_client", lambda: fake)
    monkeypatch.setattr(openai_views, "engine_client", lambda: fake)
    communicator = await connected(alice)
    await communicator.send_json_to({"type": "chat.send", "conversation": None, "content": "Hi"})
    started = await communicator.receive_json_from(timeout=5)
    assert (await communicator.receive_json_from(timeout=5))["type"] == "chat.token"
    await communicator.send_json_to({"type": "chat.stop", "message": started["message"]})
    stopped = (await until_closed(communicator))[-1]
    await communicator.disconnect()
    assert (stopped["status"], stopped["usage"]["prompt_tokens"]) == ("stopped", FakeEngine.PROMPT_TOKENS)
    # An API client that hangs up after the first chunk (the view's own response: the test client
    # would wrap its iterator in one that does not close it).
    _, plain = await sync_to_async(token_issue)(user=alice, scopes=["openai"])
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    request = AsyncRequestFactory().post(
        "/v1/chat/completions", body, "application/json", headers={"Authorization": f"Bearer {plain}"}
    )
    async with ThreadSensitiveContext():
        response = await openai_views.chat_completions(request)
        async with aclosing(aiter(response)) as chunks:
            await anext(chunks), await anext(chunks)  # the role, the first token
    assert await until(lambda: fake.aborted == 2, 10)
    for _ in range(500):  # the API answer is recorded as its task ends, just after the abort
        if "api" in await sync_to_async(rows)(alice):
            break
        await asyncio.sleep(0.02)
    assert await sync_to_async(rows)(alice) == {
        "chat": (1, FakeEngine.PROMPT_TOKENS, 0, 1),
        "api": (1, FakeEngine.PROMPT_TOKENS, 0, 1),
    }
