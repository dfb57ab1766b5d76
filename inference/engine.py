"""The process-wide engine client, built from settings on first use."""

import functools

from django.conf import settings

from inference import metrics
from inference.breaker import CircuitBreaker, GuardedEngineClient
from inference.client import EngineClient, OpenAIEngineClient


@functools.cache
def engine_client() -> EngineClient:
    """The engine client every caller shares, behind this process's circuit breaker."""
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
            on_change=metrics.circuit_state,
        ),
    )
