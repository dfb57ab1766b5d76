"""The process-wide engine client, built from settings on first use."""

import functools

from django.conf import settings

from inference.client import EngineClient, OpenAIEngineClient


@functools.cache
def engine_client() -> EngineClient:
    return OpenAIEngineClient(
        settings.INFERENCE_URL,
        settings.INFERENCE_MODEL_NAME,
        connect_timeout=settings.INFERENCE_CONNECT_TIMEOUT,
        token_timeout=settings.INFERENCE_TOKEN_TIMEOUT,
    )
