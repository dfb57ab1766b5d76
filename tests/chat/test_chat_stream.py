"""`POST /chat/stream`: the exact SSE format, auth, errors; events arrive as the engine makes them."""

import json
import time
from collections.abc import Iterator
from contextlib import aclosing

import httpx
import pytest
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.contrib.auth import get_user_model
from django.test import AsyncClient

from answers import admission
from chat import http_stream
from conversations.models import Conversation, Message
from httpkit.sse import EventStreamResponse
from inference.client import EngineError
from redisconn import client as redis_client
from tests.support.api_keys import bearer
from tests.support.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)


async def token_headers(user, scope: str = "chat") -> dict:
    return await sync_to_async(bearer)(user, scope)


def use_engine(monkeypatch, engine: FakeEngine) -> FakeEngine:
    monkeypatch.setattr(http_stream, "engine_client", lambda: engine)
    return engine


async def post(body, headers: dict | None = None):
    raw = body if isinstance(body, str | bytes) else json.dumps(body)
    # As under daphne, the request's synchronous parts get a thread of their own.
    async with ThreadSensitiveContext():
        return await AsyncClient().post("/chat/stream", raw, content_type="application/json", headers=headers)


async def body_of(response) -> str:
    return b"".join([chunk async for chunk in response.streaming_content]).decode()


async def test_it_streams_one_event_per_delta_then_the_summary_then_done(alice, monkeypatch):
    use_engine(monkeypatch, FakeEngine(["Hel", "lo", ' "you"\n']))
    headers = await token_headers(alice)
    response = await post({"prompt": "Hi"}, headers)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    assert response["X-Accel-Buffering"] == "no"
    text = await body_of(response)
    assert text.endswith("\n\n")
    events = text.split("\n\n")[:-1]
    # One `data:` line each; tokens carry their seq as the event id, for Last-Event-ID.
    assert events[1:4] == [
        'id: 0\ndata: {"token":"Hel"}',
        'id: 1\ndata: {"token":"lo"}',
        'id: 2\ndata: {"token":" \\"you\\"\\n"}',
    ]
    payloads = [e.split("data: ", 1)[1] for e in events]
    assert payloads[-1] == "[DONE]"
    started, done = json.loads(payloads[0]), json.loads(payloads[4])
    message = await Message.objects.aget(pk=done["message"])
    ids = {"conversation": message.conversation_id, "message": message.pk, "user_message": message.parent_id}
    assert started == {"started": True, **ids}
    assert done == {
        "done": True,
        **ids,
        "status": "complete",
        "finish_reason": "stop",
        "usage": {"prompt_tokens": 10, "cached_tokens": 0, "completion_tokens": 3},
        "ttft_ms": done["ttft_ms"],
        "note": "",
        "content": 'Hello "you"\n',
    }
    assert (message.status, message.content) == ("complete", 'Hello "you"\n')
    assert len(payloads) == 6


async def test_it_continues_a_conversation_and_answers_another_users_as_missing(alice, monkeypatch):
    use_engine(monkeypatch, FakeEngine(["ok"]))
    headers = await token_headers(alice)
    first = await body_of(await post({"prompt": "One"}, headers))
    conversation = json.loads(first.split("\n\n")[0].removeprefix("data: "))["conversation"]
    await body_of(await post({"prompt": "Two", "conversation": conversation}, headers))
    assert await Message.objects.filter(conversation_id=conversation).acount() == 4
    bob = await get_user_model().objects.acreate(username="bob")
    theirs = await Conversation.objects.acreate(owner=bob)
    response = await post({"prompt": "let me in", "conversation": theirs.pk}, headers)
    assert (response.status_code, json.loads(response.content)["error"]["code"]) == (404, "not_found")


@pytest.mark.parametrize(
    "body, status, code",
    [
        ("{nope", 400, "invalid_json"),
        ("[" * 20_000, 400, "invalid_json"),  # deeper than the parser goes
        ([1, 2], 400, "invalid_json"),
        ({}, 400, "invalid_field"),
        ({"prompt": "  "}, 400, "invalid_field"),
        ({"prompt": "hi", "conversation": "3"}, 400, "invalid_field"),
        ({"prompt": "x" * 20_000}, 413, "too_large"),
        ("x" * 800_000, 413, "too_large"),
    ],
)
async def test_it_answers_bad_input_with_a_json_error(alice, monkeypatch, body, status, code):
    engine = use_engine(monkeypatch, FakeEngine(["no"]))
    response = await post(body, await token_headers(alice))
    assert response.status_code == status
    assert json.loads(response.content)["error"]["code"] == code
    assert engine.requests == []
    assert await Message.objects.acount() == 0


async def test_it_needs_a_session_with_csrf_or_a_token_with_the_chat_scope(alice, monkeypatch):
    use_engine(monkeypatch, FakeEngine(["no"]))
    response = await post({"prompt": "hi"})
    assert (response.status_code, json.loads(response.content)["error"]["code"]) == (401, "unauthenticated")
    store_only = await token_headers(alice, "store.read")
    assert (await post({"prompt": "hi"}, store_only)).status_code == 401
    client = AsyncClient(enforce_csrf_checks=True)
    await client.aforce_login(alice)
    response = await client.post("/chat/stream", {"prompt": "hi"}, content_type="application/json")
    assert (response.status_code, json.loads(response.content)["error"]["code"]) == (403, "csrf_failed")
    # A bearer header that authenticates no one is not replaced by the session, nor skips CSRF.
    junk = {"Authorization": "Bearer junk"}
    response = await client.post("/chat/stream", {"prompt": "hi"}, "application/json", headers=junk)
    assert response.status_code == 401
    assert (await client.put("/chat/stream")).status_code == 405
    assert (await client.get("/chat/stream")).status_code == 400  # a resume names its answer


async def test_it_answers_409_while_the_conversation_is_still_answering(alice, monkeypatch):
    engine = use_engine(monkeypatch, FakeEngine(["no"]))
    conversation = await Conversation.objects.acreate(owner=alice)
    await Message.objects.acreate(conversation=conversation, role="assistant", status="generating")
    response = await post({"prompt": "hi", "conversation": conversation.pk}, await token_headers(alice))
    assert (response.status_code, json.loads(response.content)["error"]["code"]) == (409, "conversation_busy")
    assert engine.requests == []


async def test_it_answers_503_when_the_engine_is_unreachable_before_the_first_token(alice, monkeypatch):
    use_engine(monkeypatch, FakeEngine([], fail_with=EngineError("down", code="engine_unavailable")))
    response = await post({"prompt": "hi"}, await token_headers(alice))
    assert response.status_code == 503
    assert json.loads(response.content)["error"]["code"] == "engine_unavailable"
    assert await Message.objects.filter(error_code="engine_unavailable").acount() == 1


async def test_it_ends_with_an_error_event_when_the_engine_fails_mid_answer(alice, monkeypatch):
    use_engine(monkeypatch, FakeEngine(["par", "tial"], fail_with=EngineError("gone", code="engine_error")))
    text = await body_of(await post({"prompt": "hi"}, await token_headers(alice)))
    payloads = [e.split("data: ", 1)[1] for e in text.split("\n\n")[1:-1]]
    assert [json.loads(p) for p in payloads[:2]] == [{"token": "par"}, {"token": "tial"}]
    assert json.loads(payloads[2])["error"] == {"code": "engine_error", "detail": "gone"}
    assert payloads[3] == "[DONE]"


def test_it_streams_the_real_engines_tokens_as_they_are_made(product_server, django_user_model):
    user = django_user_model.objects.create_user("erin", password="pw-erin-12345")
    # 200 tokens by construction: a client slow to start reading still finds the answer running.
    conversation = Conversation.objects.create(owner=user, max_tokens=200, min_tokens=200, temperature=0)
    headers = bearer(user, "chat")
    arrivals = []
    events = []
    with httpx.stream(
        "POST",
        product_server + "/chat/stream",
        json={"prompt": "Count from one to twenty in words.", "conversation": conversation.pk},
        headers=headers,
        timeout=120,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                arrivals.append(time.monotonic())
                events.append(line.removeprefix("data: "))
    assert events[-1] == "[DONE]" and json.loads(events[0])["started"] is True
    tokens = [json.loads(e)["token"] for e in events[1:-2]]
    done = json.loads(events[-2])
    assert len(tokens) >= 5
    assert done["status"] == "complete" and done["usage"]["completion_tokens"] >= len(tokens) - 1
    # Incremental: the first and last tokens did not arrive together.
    assert arrivals[len(tokens)] - arrivals[1] > 0.2
    assert Message.objects.get(pk=done["message"]).content == "".join(tokens)


def sse_events(response) -> Iterator[tuple[int | None, dict | str]]:
    """(id, data) of each event of an SSE response, as they arrive."""
    event_id = None
    for line in response.iter_lines():
        if line.startswith("id: "):
            event_id = int(line.removeprefix("id: "))
        elif line.startswith("data: "):
            data = line.removeprefix("data: ")
            yield event_id, data if data == "[DONE]" else json.loads(data)
            event_id = None


def long_answer(base: str, user):
    """An answer streamed over HTTP that runs 400 tokens by construction, in a new conversation."""
    conversation = Conversation.objects.create(owner=user, max_tokens=400, min_tokens=400, temperature=0)
    return httpx.stream(
        "POST",
        base + "/chat/stream",
        json={
            "prompt": "Write a very long essay about the history of bread.",
            "conversation": conversation.pk,
        },
        headers=bearer(user, "chat"),
        timeout=120,
    )


def test_it_keeps_the_answer_when_the_client_goes_away_and_resumes_it_from_the_last_event(
    product_server, django_user_model
):
    user = django_user_model.objects.create_user("fred", password="pw-fred-12345")
    seen: list[tuple[int, str]] = []
    with long_answer(product_server, user) as response:
        for event_id, data in sse_events(response):
            if "started" in data:
                message = data["message"]
            elif "token" in data:
                seen.append((event_id, data["token"]))
            if len(seen) == 3:
                break
    assert [seq for seq, _ in seen] == [0, 1, 2]
    # Gone, not stopped: it resumes after the last event seen, as EventSource would ask.
    rest, done = [], None
    with httpx.stream(
        "GET",
        f"{product_server}/chat/stream?message={message}",
        headers={**bearer(user, "chat"), "Last-Event-ID": "2"},
        timeout=120,
    ) as response:
        assert response.status_code == 200
        for event_id, data in sse_events(response):
            if data == "[DONE]":
                break
            if "token" in data:
                rest.append((event_id, data["token"]))
            else:
                done = data
    assert rest[0][0] == 3 and [seq for seq, _ in rest] == list(range(3, 3 + len(rest)))
    assert done["status"] == "complete" and done["usage"]["completion_tokens"] == 400
    assert done["content"] == "".join(text for _, text in seen + rest)
    assert Message.objects.get(pk=message).content == done["content"]


def test_it_stops_an_answer_only_when_asked(product_server, django_user_model):
    user = django_user_model.objects.create_user("gus", password="pw-gus-123456")
    with long_answer(product_server, user) as response:
        events = sse_events(response)
        message = next(events)[1]["message"]
        _, first = next(events)
        assert "token" in first, first  # a first token: it runs
        stop = httpx.post(
            f"{product_server}/chat/stop", json={"message": message}, headers=bearer(user, "chat")
        )
        assert stop.status_code == 202, (stop.text, Message.objects.get(pk=message).status)
        *_, (_, closing), (_, last) = list(events)
    assert last == "[DONE]" and closing["status"] == "stopped" and closing["finish_reason"] == "abort"
    answer = Message.objects.get(pk=message)
    assert (answer.status, answer.content) == ("stopped", closing["content"])
    again = httpx.post(f"{product_server}/chat/stop", json={"message": message}, headers=bearer(user, "chat"))
    assert (again.status_code, again.json()["error"]["code"]) == (409, "not_running")


async def test_it_answers_429_with_retry_after_past_the_users_concurrent_answers(
    alice, monkeypatch, settings
):
    settings.CHAT_MAX_ACTIVE_PER_USER = 1
    engine = use_engine(monkeypatch, FakeEngine(["no"]))
    r = redis_client()
    lease = await admission.admit(r, user_id=alice.pk)
    try:
        response = await post({"prompt": "two"}, await token_headers(alice))
    finally:
        await admission.release_slot(r, lease)
    assert response.status_code == 429
    assert json.loads(response.content)["error"]["code"] == "busy"
    assert float(response["Retry-After"]) >= 1
    assert engine.requests == []
    assert await Message.objects.acount() == 0


async def test_it_closes_the_event_iterator_as_soon_as_the_response_is_closed():
    closed = []

    async def events():
        try:
            yield b"data: 1\n\n"
            yield b"data: 2\n\n"
        finally:
            closed.append(True)

    response = EventStreamResponse(events(), content_type="text/event-stream")
    # As Django's ASGI handler consumes a streaming response, here cut short by a disconnect.
    async with aclosing(aiter(response)) as content:
        async for _ in content:
            break
    assert closed == [True], "the answer's events were left to the garbage collector"


async def test_it_takes_a_whole_message_list_with_sampling_settings_as_a_new_conversation(alice, monkeypatch):
    engine = use_engine(monkeypatch, FakeEngine(["ok"]))
    body = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "How are you?"},
        ],
        "temperature": 0.2,
        "max_tokens": 64,
    }
    text = await body_of(await post(body, await token_headers(alice)))
    started = json.loads(text.split("\n\n")[0].removeprefix("data: "))
    conversation = await Conversation.objects.aget(pk=started["conversation"])
    assert (conversation.system_prompt, conversation.temperature, conversation.max_tokens) == (
        "Be brief.",
        0.2,
        64,
    )
    [request] = engine.requests
    assert [m["content"] for m in request.messages] == ["Be brief.", "Hi", "Hello.", "How are you?"]
    assert (request.temperature, request.max_tokens) == (0.2, 64)
    bad = await post(
        {"messages": [{"role": "assistant", "content": "no question"}]}, await token_headers(alice)
    )
    assert (bad.status_code, json.loads(bad.content)["error"]["code"]) == (400, "invalid_field")
    hot = await post(
        {"messages": [{"role": "user", "content": "x"}], "temperature": 9}, await token_headers(alice)
    )
    assert hot.status_code == 400


async def test_it_regenerates_and_edits_and_resumes_a_finished_answer_from_the_store(alice, monkeypatch):
    use_engine(monkeypatch, FakeEngine(["v", "2"]))
    headers = await token_headers(alice)
    first = await body_of(await post({"prompt": "Hi"}, headers))
    started = json.loads(first.split("\n\n")[0].removeprefix("data: "))
    again = await body_of(await post({"regenerate": started["message"]}, headers))
    edited = await body_of(await post({"edit": started["user_message"], "prompt": "Hello"}, headers))
    assert await Message.objects.filter(conversation_id=started["conversation"]).acount() == 5
    assert all('"done":true' in body for body in (again, edited))
    async with ThreadSensitiveContext():
        resumed = await AsyncClient().get(f"/chat/stream?message={started['message']}", headers=headers)
    payloads = [e.split("data: ", 1)[1] for e in (await body_of(resumed)).split("\n\n")[:-1]]
    # Its frames again while its stream lasts (then the stored answer alone), closing as it closed.
    assert payloads[-1] == "[DONE]"
    assert json.loads(payloads[-2])["content"] == "v2" and json.loads(payloads[-2])["status"] == "complete"
    bob = await get_user_model().objects.acreate(username="bob")
    async with ThreadSensitiveContext():
        theirs = await AsyncClient().get(
            f"/chat/stream?message={started['message']}", headers=await token_headers(bob)
        )
    assert theirs.status_code == 404


async def test_it_continues_an_answer_cut_off_at_its_length_limit_in_place(alice, monkeypatch):
    use_engine(monkeypatch, FakeEngine(["Once ", "upon "], finish_reason="length"))
    headers = await token_headers(alice)
    cut = await body_of(await post({"prompt": "A tale"}, headers))
    started = json.loads(cut.split("\n\n")[0].removeprefix("data: "))
    engine = use_engine(monkeypatch, FakeEngine(["a ", "time."]))
    more = await body_of(await post({"continue": started["message"]}, headers))
    payloads = [json.loads(e.split("data: ", 1)[1]) for e in more.split("\n\n")[:-2]]
    assert payloads[0]["message"] == started["message"]
    assert [p["token"] for p in payloads if "token" in p] == ["a ", "time."]
    assert (payloads[-1]["content"], payloads[-1]["finish_reason"]) == ("Once upon a time.", "stop")
    assert engine.requests[0].messages[-1] == {"role": "assistant", "content": "Once upon "}
    again = await post({"continue": started["message"]}, headers)
    assert (again.status_code, json.loads(again.content)["error"]["code"]) == (409, "not_continuable")
