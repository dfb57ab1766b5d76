"""The engine boundary: every part of the product reaches the engine through here.

- `engine_client()`: the web process's client, behind its circuit breakers (chat answers); it
  sends each request to the engine that serves the request's model (`served_models()`).
- `new_engine_client()`: a client of its own, behind a breaker of its own, for work on an
  event loop of its own (a bulk job's run); the caller closes it.
- `embedding_client()`: the embedding engine's client (texts to vectors), behind a breaker of its
  own, for Celery tasks (`embed`) and the web process (`aembed`); `embedding_health()` probes it.
- `engine_probe()`: what the engines behind INFERENCE_URL (the router's replicas, or the one
  engine) are doing, read by inference.topology: the bulk shaper's load, and through
  `engine_health()`, `engine_replicas()` and `engine_metrics()`, /healthz and the staff dashboard.
"""

import functools
from collections.abc import AsyncIterator, Sequence

from django.conf import settings

from inference import metrics
from inference.breaker import CircuitBreaker, GuardedEngineClient
from inference.client import (
    ChatRequest,
    Completion,
    EngineProbe,
    OpenAIEngineClient,
    ReplicaMetrics,
    TextDelta,
)
from inference.embeddings import EmbeddingClient
from inference.topology import EngineTopology


def served_models() -> dict[str, str]:
    """The models the chat offers, each with the address of the engine (or router) that serves it,
    the default first: INFERENCE_MODELS (`name=url,...`), else INFERENCE_MODEL_NAME at INFERENCE_URL."""
    if not settings.INFERENCE_MODELS:
        return {settings.INFERENCE_MODEL_NAME: settings.INFERENCE_URL}
    pairs = (entry.split("=", 1) for entry in settings.INFERENCE_MODELS.split(",") if entry.strip())
    return {name.strip(): url.strip() for name, url in pairs}


def default_model() -> str:
    return next(iter(served_models()))


class ModelEngines:
    """The engine client for several models: each request goes to its model's engine, behind that
    engine's own circuit breaker; what names no model (token counts) goes to the default's."""

    def __init__(self, clients: dict[str, GuardedEngineClient]) -> None:
        self.clients = clients
        self.default = next(iter(clients.values()))
        self.breaker = self.default.breaker

    def stream_chat(self, request: ChatRequest) -> AsyncIterator[TextDelta | Completion]:
        return self.clients.get(request.model or "", self.default).stream_chat(request)

    async def count_prompt_tokens(self, messages: Sequence[dict[str, str]]) -> int:
        return await self.default.count_prompt_tokens(messages)

    async def tokenize(self, text: str) -> list[int]:
        return await self.default.tokenize(text)

    async def detokenize(self, token_ids: Sequence[int]) -> str:
        return await self.default.detokenize(token_ids)


def new_engine_client(
    *, on_circuit_change=None, model: str | None = None, url: str | None = None
) -> GuardedEngineClient:
    """A client from settings (the default model, or `model` at `url`), behind a breaker of its own."""
    return GuardedEngineClient(
        OpenAIEngineClient(
            url or settings.INFERENCE_URL,
            model or settings.INFERENCE_MODEL_NAME,
            connect_timeout=settings.INFERENCE_CONNECT_TIMEOUT,
            token_timeout=settings.INFERENCE_TOKEN_TIMEOUT,
            api_key=settings.INFERENCE_API_KEY,
        ),
        CircuitBreaker(
            failure_threshold=settings.INFERENCE_BREAKER_FAILURES,
            cool_down=settings.INFERENCE_BREAKER_COOL_DOWN,
            on_change=on_circuit_change,
        ),
    )


@functools.cache
def engine_client() -> ModelEngines:
    """The client every chat answer of this process shares; the default engine's breaker state is a metric."""
    models = served_models()
    return ModelEngines(
        {
            name: new_engine_client(
                on_circuit_change=metrics.circuit_state if index == 0 else None, model=name, url=url
            )
            for index, (name, url) in enumerate(models.items())
        }
    )


def engine_probe() -> EngineProbe:
    """The engines behind INFERENCE_URL, as settings say now."""
    return EngineTopology(settings.INFERENCE_URL, api_key=settings.INFERENCE_API_KEY)


def engine_health() -> str:
    return engine_probe().health()


def engine_replicas() -> list[tuple[str, bool | None]]:
    return engine_probe().replicas()


def engine_metrics() -> list[ReplicaMetrics]:
    return engine_probe().metrics()


def new_embedding_client(*, url: str | None = None) -> EmbeddingClient:
    """A client of the embedding engine (EMBEDDING_URL, or `url`), behind a breaker of its own."""
    return EmbeddingClient(
        url or settings.EMBEDDING_URL,
        settings.EMBEDDING_MODEL_NAME,
        breaker=CircuitBreaker(
            failure_threshold=settings.INFERENCE_BREAKER_FAILURES,
            cool_down=settings.INFERENCE_BREAKER_COOL_DOWN,
        ),
        timeout=settings.EMBEDDING_TIMEOUT,
        connect_timeout=settings.INFERENCE_CONNECT_TIMEOUT,
        api_key=settings.INFERENCE_API_KEY,
    )


@functools.cache
def embedding_client() -> EmbeddingClient:
    """The client every caller of this process shares (ingestion's tasks, the chat's questions)."""
    return new_embedding_client()


def embedding_health() -> str:
    """ "ok", or "error: ..." saying why the embedding engine does not answer its health probe (blocks)."""
    return EngineTopology(settings.EMBEDDING_URL, api_key=settings.INFERENCE_API_KEY).health()
