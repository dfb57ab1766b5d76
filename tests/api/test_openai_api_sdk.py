"""The OpenAI-compatible API driven by the openai Python SDK against the running product and the
real engine: models, completions streamed and not, errors as the SDK's exceptions, the store,
the cache salt, and a client that goes away."""

import time
import uuid

import httpx
import openai
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from answers.run import cache_salt_for
from apitokens.services import token_issue
from conversations.models import Conversation, Message
from tests.support.product import engine_gauge

pytestmark = pytest.mark.django_db(transaction=True)


def user(name: str):
    return get_user_model().objects.create_user(f"{name}-{uuid.uuid4().hex[:6]}", password="pw-api-123456")


def client(base: str, who, scopes=("openai",)) -> openai.OpenAI:
    _, plain = token_issue(user=who, scopes=list(scopes))
    # No retries: a refused request must reach the test as it came.
    return openai.OpenAI(base_url=base + "/v1", api_key=plain, max_retries=0, timeout=120)


def question(text: str = "Name three colours.") -> list[dict]:
    return [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": text}]


def test_it_lists_its_model_and_answers_with_and_without_streaming(product_server):
    api = client(product_server, user("ada"))
    model = settings.INFERENCE_MODEL_NAME
    assert [m.id for m in api.models.list()] == [model]
    assert api.models.retrieve(model).id == model

    answer = api.chat.completions.create(model=model, messages=question(), max_tokens=12, temperature=0)
    assert answer.object == "chat.completion" and answer.model == model
    assert answer.choices[0].message.role == "assistant" and answer.choices[0].message.content
    assert answer.choices[0].finish_reason in {"stop", "length"}
    assert answer.usage.prompt_tokens > 10 and 0 < answer.usage.completion_tokens <= 12

    arrivals, texts, usage = [], [], None
    stream = api.chat.completions.create(
        model=model,
        messages=question("Count from one to twenty in words."),
        # 300 tokens by construction: a client slow to start reading still finds the answer running.
        max_tokens=300,
        extra_body={"min_tokens": 300},
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                arrivals.append(time.monotonic())
                texts.append(choice.delta.content)
    # Streamed in many chunks; how many depends on the host's load (the engine sends the tokens made
    # since its last chunk together), so the count is bounded below loosely, never by the token count.
    assert len(texts) >= 10
    assert usage.completion_tokens == 300
    # Incremental: the first and last tokens did not arrive together.
    assert arrivals[-1] - arrivals[0] > 0.2


def test_it_refuses_as_the_sdk_expects(product_server):
    owner = user("bea")
    api = client(product_server, owner)
    model = settings.INFERENCE_MODEL_NAME
    with pytest.raises(openai.NotFoundError) as missing:
        api.chat.completions.create(model="gpt-4o", messages=question())
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        api.chat.completions.create(model=model, messages=question(), temperature=5)
    assert bad.value.param == "temperature"
    # The engine's own refusal (longer than the context window) is a 400 too.
    with pytest.raises(openai.BadRequestError):
        api.chat.completions.create(model=model, messages=question("word " * 5000), max_tokens=8)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=product_server + "/v1", api_key="chat_no_key", max_retries=0).models.list()
    with pytest.raises(openai.PermissionDeniedError):
        client(product_server, owner, scopes=("chat", "store.read")).models.list()


def test_it_stores_only_when_asked_and_only_for_the_keys_owner(product_server):
    owner, other = user("cy"), user("dan")
    api = client(product_server, owner)
    model = settings.INFERENCE_MODEL_NAME
    api.chat.completions.create(model=model, messages=question("Not kept."), max_tokens=4)
    assert not Conversation.objects.filter(owner=owner).exists()
    api.chat.completions.create(model=model, messages=question("Kept, please."), max_tokens=4, store=True)
    [conversation] = Conversation.objects.filter(owner=owner)
    assert conversation.title == "Kept, please." and conversation.system_prompt == "Answer briefly."
    answer = Message.objects.get(conversation=conversation, role="assistant")
    assert answer.status == "complete" and answer.content and answer.prompt_tokens
    # The store API answers the owner, and another user's key as if it did not exist.
    _, mine = token_issue(user=owner, scopes=["store.read"])
    _, theirs = token_issue(user=other, scopes=["store.read"])
    url = f"{product_server}/api/conversations/{conversation.pk}/"
    assert httpx.get(url, headers={"Authorization": f"Bearer {mine}"}).status_code == 200
    assert httpx.get(url, headers={"Authorization": f"Bearer {theirs}"}).status_code == 404


def test_it_serves_a_keys_prefix_cache_to_its_owner_only(product_server):
    alice, bob = user("alice"), user("bob")
    model = settings.INFERENCE_MODEL_NAME
    prefix = f"Reference {uuid.uuid4().hex}. " + " ".join(
        f"Clause {i}: the tenant keeps the garden tidy and reports leaks within {i} days." for i in range(25)
    )

    def cached(api: openai.OpenAI, **extra) -> tuple[int, int]:
        usage = api.chat.completions.create(
            model=model, messages=question(prefix), max_tokens=2, temperature=0, **extra
        ).usage
        return usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens

    theirs = client(product_server, alice)
    prompt_tokens, first = cached(theirs)
    assert prompt_tokens > 300 and first == 0
    assert cached(theirs)[1] >= prompt_tokens - 64
    assert cached(client(product_server, bob))[1] == 0
    # No client picks the salt: the field is refused, not quietly used.
    with pytest.raises(openai.BadRequestError):
        cached(client(product_server, bob), extra_body={"cache_salt": cache_salt_for(alice.pk)})


def test_it_aborts_the_engine_request_when_the_client_goes_away(product_server, engine_url):
    owner = user("eve")
    api = client(product_server, owner)
    # 400 tokens by construction: the answer is still running when the client leaves.
    stream = api.chat.completions.create(
        model=settings.INFERENCE_MODEL_NAME,
        messages=question("Write a very long essay about the history of bread."),
        max_tokens=400,
        extra_body={"min_tokens": 400},
        stream=True,
        store=True,
    )
    received = 0
    for chunk in stream:
        received += bool(chunk.choices and chunk.choices[0].delta.content)
        if received == 3:
            break
    stream.close()
    deadline = time.monotonic() + 30
    while not Conversation.objects.filter(owner=owner).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    answer = Message.objects.get(conversation__owner=owner, role="assistant")
    assert (answer.status, answer.finish_reason) == ("stopped", "abort")
    assert answer.content
    while engine_gauge(engine_url, "vllm:num_requests_running") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert engine_gauge(engine_url, "vllm:num_requests_running") == 0
