"""`POST /v1/embeddings` driven by the openai SDK against the running product and the real embedding
engine: vectors in OpenAI's shape (floats or base64), usage counted, quotas, keys and bad requests
refused as OpenAI's errors."""

import base64
import uuid

import numpy as np
import openai
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from apitokens.services import token_issue
from usage.models import DailyQuota, UsageDay

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedding_engine")]


def person():
    return get_user_model().objects.create_user(f"emb-{uuid.uuid4().hex[:6]}", password="pw-emb-123456")


def client(base: str, who, scopes=("openai",)) -> openai.OpenAI:
    _, plain = token_issue(user=who, scopes=list(scopes))
    return openai.OpenAI(base_url=base + "/v1", api_key=plain, max_retries=0, timeout=120)


def test_it_embeds_texts_as_unit_vectors_and_counts_their_tokens(product_server):
    who = person()
    api = client(product_server, who)
    model = settings.EMBEDDING_MODEL_NAME
    texts = [
        "A cat sleeps on the warm windowsill.",
        "A kitten naps in the sun.",
        "Interest rates rose again.",
    ]
    # Unasked, the SDK asks for base64 and decodes it; floats, and base64 read here, are asked for too.
    for encoding in (openai.NOT_GIVEN, "float", "base64"):
        result = api.embeddings.create(model=model, input=texts, encoding_format=encoding)
        assert result.object == "list" and result.model == model
        assert [item.index for item in result.data] == [0, 1, 2]
        vectors = np.array(
            [
                np.frombuffer(base64.b64decode(item.embedding), dtype="<f4")
                if encoding == "base64"
                else item.embedding
                for item in result.data
            ]
        )
        assert vectors.shape == (3, settings.EMBEDDING_DIMENSIONS)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
        assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
        assert result.usage.prompt_tokens == result.usage.total_tokens > 3 * 5
    one = api.embeddings.create(model=model, input="A cat sleeps on the warm windowsill.")
    assert np.allclose(one.data[0].embedding, vectors[0], atol=1e-4)
    day = UsageDay.objects.get(user=who, source=UsageDay.Source.API)
    assert day.requests == 4 and day.prompt_tokens == 3 * result.usage.prompt_tokens + one.usage.prompt_tokens
    assert day.completion_tokens == 0


def test_it_refuses_what_it_cannot_do_as_openai_errors(product_server):
    who = person()
    api = client(product_server, who)
    model = settings.EMBEDDING_MODEL_NAME
    with pytest.raises(openai.NotFoundError):
        api.embeddings.create(model="text-embedding-3-small", input="x")
    with pytest.raises(openai.BadRequestError) as refused:
        api.embeddings.create(model=model, input="x", dimensions=settings.EMBEDDING_DIMENSIONS // 2)
    assert refused.value.body["param"] == "dimensions"
    for bad in ([], [""], [[1, 2, 3]]):
        with pytest.raises(openai.BadRequestError) as refused:
            api.embeddings.create(model=model, input=bad)
        assert refused.value.body["param"] == "input"
    with pytest.raises(openai.PermissionDeniedError):
        client(product_server, who, scopes=("chat",)).embeddings.create(model=model, input="x")
    assert not UsageDay.objects.filter(user=who).exists()


def test_a_spent_daily_quota_refuses_embeddings_too(product_server):
    who = person()
    DailyQuota.objects.create(user=who, tokens=1)
    api = client(product_server, who)
    api.embeddings.create(model=settings.EMBEDDING_MODEL_NAME, input="The first request spends the quota.")
    with pytest.raises(openai.RateLimitError) as refused:
        api.embeddings.create(model=settings.EMBEDDING_MODEL_NAME, input="The second is refused.")
    assert refused.value.body["code"] == "quota_exceeded"
