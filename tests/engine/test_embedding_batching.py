"""The embedding server's own batch limits (enginehost.embedqueue): a query overtakes an ingestion
batch, and a full lane refuses more of its kind, never the other's.

The server here runs one text per forward pass and holds 128 texts a lane: an ingestion batch of
128 texts is 128 passes long by construction, so what happens while it runs never depends on how
fast this host is."""

import asyncio

import httpx
import pytest

from harness.waiting import until, wait_for
from inference.breaker import CLOSED, CircuitBreaker
from inference.client import EngineError
from inference.embeddings import EmbeddingClient
from tests.engine.embedding_servers import AUTH, KEY, embedding_metric, embedding_server

MODEL = "all-minilm-l6-v2"
LANE = 128
BULK = ["a paragraph of a long document " * 16 for _ in range(LANE)]


@pytest.fixture(scope="module")
def narrow_url():
    with embedding_server("embeddings-narrow", runner="transformers", max_batch=1, max_queue=LANE) as url:
        yield url


@pytest.fixture
def idle_url(narrow_url):
    """The narrow server, once the previous test's bulk work is done."""
    wait_for(
        lambda: embedding_metric(narrow_url, "embedding_queue_texts", lane="bulk") == 0,
        300,
        "the bulk lane empty",
    )
    return narrow_url


async def embed(client: httpx.AsyncClient, texts: list[str], **extra) -> httpx.Response:
    return await client.post("/v1/embeddings", json={"model": MODEL, "input": texts, **extra}, timeout=600)


async def bulk_started(url: str, before: float) -> None:
    assert await until(
        lambda: embedding_metric(url, "embedding_forward_passes_total", lane="bulk") > before, 120
    )


async def test_a_query_overtakes_an_ingestion_batch_under_way(idle_url):
    before = embedding_metric(idle_url, "embedding_forward_passes_total", lane="bulk")
    async with httpx.AsyncClient(base_url=idle_url, headers=AUTH) as client:
        bulk = asyncio.create_task(embed(client, BULK))
        await bulk_started(idle_url, before)
        query = await embed(client, ["What does the document say?"])
        bulk_passes = embedding_metric(idle_url, "embedding_forward_passes_total", lane="bulk") - before
        assert query.status_code == 200
        assert not bulk.done()
        assert bulk_passes < LANE
        # An explicit priority (vLLM's field) makes a larger request a query too.
        urgent = await embed(client, ["one", "two", "three", "four", "five", "six"], priority=0)
        assert urgent.status_code == 200 and not bulk.done()
        assert (await bulk).status_code == 200


async def test_a_full_lane_refuses_more_of_its_kind_but_not_a_query(idle_url):
    before = embedding_metric(idle_url, "embedding_forward_passes_total", lane="bulk")
    async with httpx.AsyncClient(base_url=idle_url, headers=AUTH) as client:
        bulk = asyncio.create_task(embed(client, BULK))
        await bulk_started(idle_url, before)
        refused = await embed(client, BULK)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert (await embed(client, ["a question"])).status_code == 200
        # The client says so with the one error type, and a refusal is no failure for its breaker.
        breaker = CircuitBreaker(failure_threshold=1, cool_down=60)
        engine = EmbeddingClient(idle_url, MODEL, breaker=breaker, timeout=60, connect_timeout=5, api_key=KEY)
        with pytest.raises(EngineError) as refusal:
            await engine.aembed(BULK, priority="bulk")
        await engine.aclose()
        assert refusal.value.code == "busy" and refusal.value.extra["retry_after"] >= 1
        assert breaker.state == CLOSED
        assert not bulk.done()
        assert (await bulk).status_code == 200


async def test_an_ingestion_batch_whose_client_went_away_is_embedded_no_further(idle_url):
    before = embedding_metric(idle_url, "embedding_forward_passes_total", lane="bulk")
    async with httpx.AsyncClient(base_url=idle_url, headers=AUTH) as client:
        bulk = asyncio.create_task(embed(client, BULK))
        await bulk_started(idle_url, before)
        bulk.cancel()
    assert await until(lambda: embedding_metric(idle_url, "embedding_queue_texts", lane="bulk") == 0, 120)
    passes = embedding_metric(idle_url, "embedding_forward_passes_total", lane="bulk") - before
    assert passes < LANE
    assert embedding_metric(idle_url, "embedding_requests_total", lane="bulk", outcome="gone") == 1
