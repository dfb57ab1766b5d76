"""The engine's failures: `EngineError`, whose `code` callers and clients rely on, and how a
transport failure or an error reply (OpenAI's shape, vLLM's older one, or plain text) becomes one."""

from dataclasses import dataclass, field

import aiohttp
import httpx
import orjson


@dataclass
class EngineError(Exception):
    """Any failure reaching or using the engine; `code` is stable and client-facing."""

    detail: str
    code: str = "engine_error"
    extra: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


def engine_error(exc: Exception) -> EngineError:
    if isinstance(exc, httpx.HTTPStatusError):
        return status_error(exc.response.status_code, exc.response.content)
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return EngineError("The engine did not answer in time.", code="engine_timeout")
    if isinstance(exc, httpx.TransportError | aiohttp.ClientError):
        return EngineError("The engine is not reachable.", code="engine_unavailable")
    return EngineError(f"The engine failed: {exc}")


def error_message(body: bytes) -> str:
    """The message of an error reply: OpenAI's `{"error": {"message"}}`, or vLLM's older
    `{"message"}`, or the text itself."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode(errors="replace").strip()[:500]
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if data.get("message"):
            return str(data["message"])
    return str(data)[:500]


def status_error(status: int, body: bytes) -> EngineError:
    message = error_message(body)
    if status == 400:
        return EngineError(f"The engine refused the request: {message}", code="engine_rejected")
    if status in (502, 503, 504):  # a router or proxy with no engine behind it, for now
        return EngineError(f"The engine is not reachable ({status}): {message}", code="engine_unavailable")
    return EngineError(f"The engine failed ({status}): {message}")
