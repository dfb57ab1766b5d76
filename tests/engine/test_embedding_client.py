"""The embedding engine's client (inference.embeddings): the server's vectors, blocking or awaited,
and its circuit breaker; every failure is an EngineError with a code."""

import httpx
import pytest
from django.test import override_settings

from harness.processes import free_port
from inference.breaker import CLOSED, OPEN, CircuitBreaker
from inference.client import EngineError
from inference.embeddings import EmbeddingClient
from inference.engine import new_embedding_client
from tests.engine.embedding_servers import AUTH, KEY

MODEL = "all-minilm-l6-v2"
TEXTS = ["The first text.", "A second, longer text about something else entirely.", "Third"]


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def client(url: str, breaker: CircuitBreaker | None = None, key: str = KEY) -> EmbeddingClient:
    breaker = breaker or CircuitBreaker(failure_threshold=5, cool_down=10)
    return EmbeddingClient(url, MODEL, breaker=breaker, timeout=60, connect_timeout=2, api_key=key)


def served(url: str) -> list[list[float]]:
    response = httpx.post(f"{url}/v1/embeddings", json={"model": MODEL, "input": TEXTS}, headers=AUTH)
    return [item["embedding"] for item in response.json()["data"]]


def same(a: list[list[float]], b: list[list[float]]) -> bool:
    return len(a) == len(b) and all(x == pytest.approx(y, abs=1e-7) for x, y in zip(a, b, strict=True))


def test_it_gives_the_servers_vectors_in_the_texts_order(embedding_url):
    engine = client(embedding_url)
    vectors = engine.embed(TEXTS)
    engine.close()
    assert same(vectors, served(embedding_url))
    assert [len(vector) for vector in vectors] == [384, 384, 384]


async def test_it_gives_the_same_vectors_awaited(embedding_url):
    engine = client(embedding_url)
    vectors = await engine.aembed(TEXTS)
    await engine.aclose()
    assert same(vectors, served(embedding_url))


def test_it_counts_a_texts_tokens(embedding_url):
    engine = client(embedding_url)
    assert engine.tokens("Hello world") == 4
    engine.close()


def test_it_is_made_from_the_settings(embedding_url):
    with override_settings(EMBEDDING_URL=embedding_url, INFERENCE_API_KEY=KEY):
        engine = new_embedding_client()
        assert len(engine.embed(["configured"], priority="query")[0]) == 384
        engine.close()


def test_an_unreachable_engine_opens_the_breaker_and_one_probe_closes_it(embedding_url):
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=2, cool_down=10, clock=clock)
    down, up = client(f"http://127.0.0.1:{free_port()}", breaker), client(embedding_url, breaker)
    for _ in range(2):
        with pytest.raises(EngineError) as failure:
            down.embed(["a"])
        assert failure.value.code == "engine_unavailable" and failure.value.extra["retry_after"] >= 1
    assert breaker.state == OPEN
    # Open: refused at once, the engine not asked.
    with pytest.raises(EngineError) as refused:
        up.embed(["a"])
    assert refused.value.code == "engine_unavailable"
    clock.now += 10
    assert len(up.embed(["a"])) == 1
    assert breaker.state == CLOSED
    down.close()
    up.close()


async def test_an_engine_refusing_the_key_is_an_engine_error(embedding_url):
    engine = client(embedding_url, key="wrong")
    with pytest.raises(EngineError) as failure:
        await engine.aembed(["a"])
    await engine.aclose()
    assert failure.value.code == "engine_error" and "401" in failure.value.detail
