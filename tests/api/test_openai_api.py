"""The OpenAI-compatible API's HTTP contract, with the fake engine: shapes, checks, errors and the
guards it shares with the chat (admission, breaker, deadlines, store). tests/api/test_openai_api_sdk.py
drives the running product with the openai SDK and the real engine."""

import asyncio
import json
from contextlib import aclosing

import pytest
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.test import AsyncClient, AsyncRequestFactory

from apitokens.services import token_issue, token_revoke
from conversations.models import Conversation, Message
from inference.client import EngineError
from openai_api import views
from tests.support.api_keys import bearer
from tests.support.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)
MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(autouse=True)
def served_model(settings):
    settings.INFERENCE_MODEL_NAME = MODEL


def use_engine(monkeypatch, engine: FakeEngine) -> FakeEngine:
    monkeypatch.setattr(views, "engine_client", lambda: engine)
    return engine


def ask(content="Hi", **fields) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **fields}


async def post(body, headers: dict | None):
    raw = body if isinstance(body, str | bytes) else json.dumps(body)
    async with ThreadSensitiveContext():
        return await AsyncClient().post("/v1/chat/completions", raw, "application/json", headers=headers)


async def sse(response) -> list:
    text = b"".join([chunk async for chunk in response.streaming_content]).decode()
    events = text.split("\n\n")
    assert events[-1] == "" and all(e.startswith("data: ") for e in events[:-1])
    return [e.removeprefix("data: ") for e in events[:-1]]


async def test_it_answers_a_completion_in_openais_shape(alice, monkeypatch):
    engine = use_engine(monkeypatch, FakeEngine(["Hel", "lo"]))
    headers = await sync_to_async(bearer)(alice, "openai")
    body = ask(
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
        ],
        max_tokens=20,
        temperature=0,
        top_p=0.5,
        stop="END",
        seed=7,
    )
    response = await post(body, headers)
    assert response.status_code == 200, response.content
    answer = json.loads(response.content)
    assert answer["id"].startswith("chatcmpl-") and answer["object"] == "chat.completion"
    assert answer["model"] == MODEL
    assert answer["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello"},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ]
    assert answer["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    [request] = engine.requests
    assert request.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there"},
    ]
    assert (request.max_tokens, request.temperature) == (20, 0)
    assert request.sampling == {"top_p": 0.5, "stop": ["END"], "seed": 7}
    assert request.cache_salt and request.request_id == answer["id"]
    # Not stored unless asked.
    assert await Conversation.objects.acount() == 0


async def test_it_streams_chunks_then_usage_then_done(alice, monkeypatch):
    use_engine(monkeypatch, FakeEngine(["Hel", "lo"]))
    headers = await sync_to_async(bearer)(alice, "openai")
    response = await post(ask(stream=True, stream_options={"include_usage": True}), headers)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response["X-Accel-Buffering"] == "no"
    payloads = await sse(response)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert [c["choices"][0]["delta"] for c in chunks[:4]] == [
        {"role": "assistant", "content": ""},
        {"content": "Hel"},
        {"content": "lo"},
        {},
    ]
    assert chunks[3]["choices"][0]["finish_reason"] == "stop"
    assert all(c["usage"] is None for c in chunks[:4])
    assert chunks[4]["choices"] == [] and chunks[4]["usage"]["completion_tokens"] == 2
    assert len(chunks) == 5


async def test_it_stores_the_exchange_when_asked(alice, monkeypatch):
    use_engine(monkeypatch, FakeEngine(["Fine", "."]))
    headers = await sync_to_async(bearer)(alice, "openai")
    messages = [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "How are you?"},
        {"role": "assistant", "content": "Well."},
        {"role": "user", "content": "Sure?"},
    ]
    for stream in (False, True):
        response = await post(ask(messages=messages, store=True, stream=stream), headers)
        if stream:
            await sse(response)
    conversations = [c async for c in Conversation.objects.filter(owner=alice)]
    assert len(conversations) == 2
    for conversation in conversations:
        assert (conversation.title, conversation.system_prompt) == ("How are you?", "Be kind.")
        path = [m async for m in Message.objects.filter(conversation=conversation).order_by("pk")]
        assert [(m.role, m.content) for m in path] == [
            ("user", "How are you?"),
            ("assistant", "Well."),
            ("user", "Sure?"),
            ("assistant", "Fine."),
        ]
        assert [m.parent_id for m in path] == [None, path[0].pk, path[1].pk, path[2].pk]
        assert conversation.current_leaf_id == path[3].pk
        assert (path[3].status, path[3].model_name, path[3].completion_tokens) == ("complete", MODEL, 2)


@pytest.mark.parametrize(
    "body, status, param",
    [
        ("{nope", 400, None),
        ("[" * 20_000, 400, None),
        ({"messages": [{"role": "user", "content": "hi"}]}, 400, "model"),
        (ask(messages=[]), 400, "messages"),
        (ask(messages=[{"role": "system", "content": "only"}]), 400, "messages"),
        (ask(messages=[{"role": "tool", "content": "x"}]), 400, "messages[0].role"),
        (ask(messages=[{"role": "user", "content": [{"type": "image_url"}]}]), 400, "messages[0].content"),
        (ask(max_tokens=0), 400, "max_tokens"),
        (ask(max_completion_tokens=10**6), 400, "max_completion_tokens"),
        (ask(temperature=3), 400, "temperature"),
        (ask(top_p=0), 400, "top_p"),
        (ask(stop=["a", "b", "c", "d", "e"]), 400, "stop"),
        (ask(stream="yes"), 400, "stream"),
        (ask(stream_options={"include_usage": True}), 400, "stream_options"),
        (ask(tools=[{"type": "function", "function": {"name": "f"}}]), 400, "tools"),
        (ask(response_format={"type": "json_object"}), 400, "response_format"),
        (ask(n=2), 400, "n"),
        (ask(temprature=0.1), 400, "temprature"),
        (ask(model="gpt-4o"), 404, "model"),
        ("x" * 2_000_000, 413, None),
    ],
)
async def test_it_refuses_bad_requests_in_openais_error_shape(alice, monkeypatch, body, status, param):
    engine = use_engine(monkeypatch, FakeEngine(["no"]))
    response = await post(body, await sync_to_async(bearer)(alice, "openai"))
    assert response.status_code == status
    error = json.loads(response.content)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["message"]
    assert error["type"] == "invalid_request_error"
    assert engine.requests == []


async def test_it_accepts_the_off_values_of_what_it_does_not_support(alice, monkeypatch):
    use_engine(monkeypatch, FakeEngine(["ok"]))
    body = ask(tools=[], tool_choice="auto", logprobs=False, response_format={"type": "text"}, n=1, user="u1")
    assert (await post(body, await sync_to_async(bearer)(alice, "openai"))).status_code == 200


async def test_it_needs_a_live_key_with_the_openai_scope(alice, monkeypatch):
    engine = use_engine(monkeypatch, FakeEngine(["no"]))
    session = AsyncClient()
    await session.aforce_login(alice)  # a session is not an API key
    response = await session.post("/v1/chat/completions", ask(), "application/json")
    assert (response.status_code, json.loads(response.content)["error"]["code"]) == (401, "invalid_api_key")
    assert json.loads(response.content)["error"]["type"] == "authentication_error"
    response = await post(ask(), {"Authorization": "Bearer chat_nope_nope"})
    assert (response.status_code, json.loads(response.content)["error"]["code"]) == (401, "invalid_api_key")
    response = await post(ask(), await sync_to_async(bearer)(alice, "chat"))
    assert (response.status_code, json.loads(response.content)["error"]["type"]) == (403, "permission_error")
    token, plain = await sync_to_async(token_issue)(user=alice, scopes=["openai"])
    await sync_to_async(token_revoke)(prefix=token.prefix)
    assert (await post(ask(), {"Authorization": f"Bearer {plain}"})).status_code == 401
    assert engine.requests == []
    # A GET lists the stored completions, by key too.
    assert (await session.get("/v1/chat/completions")).status_code == 401
    assert (await session.put("/v1/chat/completions")).status_code == 405


async def test_it_lists_the_served_models(alice, monkeypatch):
    headers = await sync_to_async(bearer)(alice, "openai")
    client = AsyncClient()
    listing = json.loads((await client.get("/v1/models", headers=headers)).content)
    assert listing == {
        "object": "list",
        "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "chatsite"}],
    }
    assert json.loads((await client.get(f"/v1/models/{MODEL}", headers=headers)).content)["id"] == MODEL
    missing = await client.get("/v1/models/gpt-4o", headers=headers)
    assert (missing.status_code, json.loads(missing.content)["error"]["code"]) == (404, "model_not_found")
    assert (await client.get("/v1/models")).status_code == 401


async def test_it_answers_429_with_retry_after_past_the_users_concurrency(alice, monkeypatch, settings):
    settings.CHAT_MAX_ACTIVE_PER_USER = 1
    release = asyncio.Event()
    engine = use_engine(monkeypatch, FakeEngine(["a", release, "b"]))
    headers = await sync_to_async(bearer)(alice, "openai")
    first = await post(ask(stream=True), headers)  # holds the user's one slot until released
    busy = await post(ask(), headers)
    assert busy.status_code == 429
    assert int(busy["Retry-After"]) >= 1
    assert json.loads(busy.content)["error"] == {
        "message": "Too many answers at once; try again shortly.",
        "type": "rate_limit_error",
        "param": None,
        "code": "busy",
    }
    release.set()
    assert (await sse(first))[-1] == "[DONE]"
    assert len(engine.requests) == 1
    # The slot came back with the answer's end.
    assert (await post(ask(), headers)).status_code == 200


async def test_it_answers_503_with_retry_after_while_the_engine_is_unavailable(alice, monkeypatch):
    down = EngineError("The engine is not reachable.", code="engine_unavailable", extra={"retry_after": 4.2})
    use_engine(monkeypatch, FakeEngine([], fail_with=down))
    headers = await sync_to_async(bearer)(alice, "openai")
    for stream in (False, True):
        response = await post(ask(stream=stream, store=True), headers)
        assert response.status_code == 503
        assert response["Retry-After"] == "4"
        error = json.loads(response.content)["error"]
        assert (error["code"], error["type"]) == ("engine_unavailable", "service_unavailable_error")
    failed = [m async for m in Message.objects.filter(role="assistant")]
    assert [(m.status, m.error_code) for m in failed] == [("interrupted", "engine_unavailable")] * 2


async def test_it_ends_the_stream_with_an_error_event_when_the_engine_fails_mid_answer(alice, monkeypatch):
    use_engine(monkeypatch, FakeEngine(["par", "tial"], fail_with=EngineError("gone", code="engine_error")))
    payloads = await sse(await post(ask(stream=True), await sync_to_async(bearer)(alice, "openai")))
    assert [json.loads(p)["choices"][0]["delta"] for p in payloads[1:3]] == [
        {"content": "par"},
        {"content": "tial"},
    ]
    assert json.loads(payloads[3]) == {
        "error": {
            "message": "gone",
            "type": "service_unavailable_error",
            "param": None,
            "code": "engine_error",
        }
    }
    assert payloads[4:] == ["[DONE]"]


async def test_it_times_out_an_engine_that_goes_silent(alice, monkeypatch, settings):
    settings.CHAT_TOKEN_TIMEOUT = 0.3
    engine = use_engine(monkeypatch, FakeEngine(["a"], hang=True))
    payloads = await sse(await post(ask(stream=True), await sync_to_async(bearer)(alice, "openai")))
    assert json.loads(payloads[-2])["error"]["code"] == "timeout_between_tokens"
    assert engine.aborted == 1


async def test_it_aborts_the_engine_request_when_the_client_goes_away(alice, monkeypatch):
    engine = use_engine(monkeypatch, FakeEngine(["a", "b"], hang=True))
    headers = await sync_to_async(bearer)(alice, "openai")
    # The view's own response: the test client would wrap its iterator in one that does not close it.
    request = AsyncRequestFactory().post(
        "/v1/chat/completions", ask(stream=True, store=True), "application/json", headers=headers
    )
    async with ThreadSensitiveContext():
        response = await views.chat_completions(request)
        # As Django's ASGI handler consumes the response, cut short by a disconnect after two tokens.
        async with aclosing(aiter(response)) as chunks:
            assert json.loads((await anext(chunks)).decode().removeprefix("data: "))["choices"][0]["delta"][
                "role"
            ]
            await anext(chunks)
            await anext(chunks)
    assert engine.aborted == 1
    answer = await Message.objects.aget(role="assistant")
    assert (answer.status, answer.finish_reason, answer.content) == ("stopped", "abort", "ab")
