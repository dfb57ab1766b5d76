"""The engine boundary: every part of the product reaches the engine through here.

- `engine_client()`: the web process's client, behind its circuit breakers (chat answers); it
  sends each request to the engine that serves the request's model (`served_models()`).
- `new_engine_client()`: a client of its own, behind a breaker of its own, for work on an
  event loop of its own (a bulk job's run); the caller closes it.
- `engine_health()` and `engine_metrics()`: the synchronous probes behind /healthz and
  the staff dashboard; the metrics come from each engine behind INFERENCE_URL (the router's
  replicas, or the one engine), since the router's own /metrics answers for one of them only.

This is the one place that learns about several engines and the router in front of them.
"""

import functools
from dataclasses import dataclass

import httpx
from django.conf import settings

from inference import metrics
from inference.breaker import CircuitBreaker, GuardedEngineClient
from inference.client import ChatRequest, OpenAIEngineClient
from inference.router import router_workers

# Probes answer at once or report the engine unreachable: a health check must not hang.
PROBE_TIMEOUT = 2.0


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
    engine's own circuit breaker; what names no model (token counts, probes) goes to the default's."""

    def __init__(self, clients: dict[str, GuardedEngineClient]) -> None:
        self.clients = clients
        self.default = next(iter(clients.values()))
        self.breaker = self.default.breaker

    def stream_chat(self, request: ChatRequest):
        return self.clients.get(request.model or "", self.default).stream_chat(request)

    async def count_prompt_tokens(self, messages):
        return await self.default.count_prompt_tokens(messages)

    async def tokenize(self, text: str):
        return await self.default.tokenize(text)

    async def detokenize(self, token_ids):
        return await self.default.detokenize(token_ids)

    async def is_healthy(self) -> bool:
        return await self.default.is_healthy()

    async def load(self):
        return await self.default.load()

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()


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


def _probe(path: str, base: str | None = None) -> httpx.Response:
    """GET `path` of the engine (or router) at `base`, INFERENCE_URL by default."""
    response = httpx.get((base or settings.INFERENCE_URL).rstrip("/") + path, timeout=PROBE_TIMEOUT)
    response.raise_for_status()
    return response


def engine_health() -> str:
    """ "ok", or "error: ..." saying why the engine does not answer its health probe."""
    try:
        _probe("/health")
    except httpx.HTTPStatusError as exc:
        return f"error: status {exc.response.status_code}"
    except httpx.HTTPError as exc:
        return f"error: {exc.__class__.__name__}"
    return "ok"


def engine_replicas() -> list[tuple[str, bool | None]]:
    """The engines behind INFERENCE_URL, each with the router's view of its health: the router's
    workers, or INFERENCE_URL itself (None: no router to ask) where it is an engine, which has no
    /workers, or where nothing answers."""
    try:
        return router_workers(_probe("/workers").json())
    except (httpx.HTTPError, ValueError):
        return [(settings.INFERENCE_URL, None)]


@dataclass(frozen=True)
class ReplicaMetrics:
    url: str
    # As the router last saw it; None without a router.
    healthy: bool | None
    # The engine's Prometheus text, or None and the reason it could not be read.
    text: str | None
    error: str | None


def engine_metrics() -> list[ReplicaMetrics]:
    """Each engine's metrics, read from the engine itself."""
    replicas = []
    for url, healthy in engine_replicas():
        try:
            replicas.append(ReplicaMetrics(url, healthy, _probe("/metrics", url).text, None))
        except httpx.HTTPError as exc:
            replicas.append(ReplicaMetrics(url, healthy, None, f"{exc.__class__.__name__}: {exc}"))
    return replicas
