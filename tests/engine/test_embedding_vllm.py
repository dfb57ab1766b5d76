"""vLLM's pooling runner (EMBEDDING_RUNNER=vllm, the GPU hosts' runner) started by the same
launcher on the same model: the same API, the same vectors as the product's transformers server with
the float model, and the engine's key on every route but /health. About a minute to start on CPU."""

import math

import httpx
import pytest
from openai import OpenAI

from inference.breaker import CircuitBreaker
from inference.embeddings import EmbeddingClient
from tests.engine.embedding_servers import AUTH, KEY, embedding_server

pytestmark = pytest.mark.engine

MODEL = "all-minilm-l6-v2"
TEXTS = ["How do I reset my password?", "The recipe needs two cups of flour.", "Hello"]


@pytest.fixture(scope="module")
def vllm_url():
    with embedding_server("embeddings-vllm", timeout=600, runner="vllm") as url:
        yield url


def client(url: str) -> EmbeddingClient:
    breaker = CircuitBreaker(failure_threshold=5, cool_down=10)
    return EmbeddingClient(url, MODEL, breaker=breaker, timeout=120, connect_timeout=5, api_key=KEY)


def test_it_makes_the_transformers_servers_vectors_through_the_same_client(vllm_url, float_embedding_url):
    from_vllm, from_transformers = client(vllm_url), client(float_embedding_url)
    ours, theirs = from_transformers.embed(TEXTS), from_vllm.embed(TEXTS, priority="bulk")
    assert [len(vector) for vector in theirs] == [384] * len(TEXTS)
    for mine, other in zip(ours, theirs, strict=True):
        assert math.isclose(math.sqrt(sum(x * x for x in other)), 1.0, abs_tol=1e-3)
        assert sum(x * y for x, y in zip(mine, other, strict=True)) > 0.999
    assert from_vllm.tokens("Hello world") == from_transformers.tokens("Hello world")
    from_vllm.close()
    from_transformers.close()


def test_it_answers_in_the_same_shape(vllm_url):
    response = httpx.post(f"{vllm_url}/v1/embeddings", json={"model": MODEL, "input": TEXTS}, headers=AUTH)
    body = response.json()
    assert body["object"] == "list" and body["model"] == MODEL
    assert [item["index"] for item in body["data"]] == [0, 1, 2]
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
    sdk = OpenAI(base_url=f"{vllm_url}/v1", api_key=KEY)
    assert len(sdk.embeddings.create(model=MODEL, input="one text").data[0].embedding) == 384


def test_every_route_but_health_asks_for_the_engines_key(vllm_url):
    for path in ("/v1/embeddings", "/metrics", "/v1/models", "/tokenize"):
        assert httpx.post(f"{vllm_url}{path}", json={"input": "a"}).status_code == 401, path
    assert httpx.get(f"{vllm_url}/health").status_code == 200
