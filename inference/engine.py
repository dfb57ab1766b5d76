"""The engine boundary: every part of the product reaches the engine through here.

- `engine_client()`: the web process's client, behind its circuit breaker (chat answers).
- `new_engine_client()`: a client of its own, behind a breaker of its own, for work on an
  event loop of its own (a bulk job's run); the caller closes it.
- `engine_health()` and `engine_metrics()`: the synchronous probes behind /healthz and
  the staff dashboard.

This is the one place that learns about several engines and the router in front of them.
"""

import functools

import httpx
from django.conf import settings

from inference import metrics
from inference.breaker import CircuitBreaker, GuardedEngineClient
from inference.client import OpenAIEngineClient

# Probes answer at once or report the engine unreachable: a health check must not hang.
PROBE_TIMEOUT = 2.0


def new_engine_client(*, on_circuit_change=None) -> GuardedEngineClient:
    """A client from settings, behind a circuit breaker of its own."""
    return GuardedEngineClient(
        OpenAIEngineClient(
            settings.INFERENCE_URL,
            settings.INFERENCE_MODEL_NAME,
            connect_timeout=settings.INFERENCE_CONNECT_TIMEOUT,
            token_timeout=settings.INFERENCE_TOKEN_TIMEOUT,
        ),
        CircuitBreaker(
            failure_threshold=settings.INFERENCE_BREAKER_FAILURES,
            cool_down=settings.INFERENCE_BREAKER_COOL_DOWN,
            on_change=on_circuit_change,
        ),
    )


@functools.cache
def engine_client() -> GuardedEngineClient:
    """The client every chat answer of this process shares; its breaker's state is a metric."""
    return new_engine_client(on_circuit_change=metrics.circuit_state)


def _probe(path: str) -> httpx.Response:
    response = httpx.get(settings.INFERENCE_URL.rstrip("/") + path, timeout=PROBE_TIMEOUT)
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


def engine_metrics() -> tuple[str | None, str | None]:
    """The engine's Prometheus text, or None and the reason it could not be read."""
    try:
        return _probe("/metrics").text, None
    except httpx.HTTPError as exc:
        return None, f"{exc.__class__.__name__}: {exc}"
