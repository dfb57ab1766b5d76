"""/healthz: the state of everything a chat needs, for load balancers and people."""

import httpx
import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse

import redisconn
from inference.engine import engine_client


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure is reported, not raised
        return f"error: {exc}"
    return "ok"


def _redis() -> str:
    try:
        redisconn.sync_client().ping()
    except redis.RedisError as exc:
        return f"error: {exc}"
    return "ok"


def _engine() -> str:
    try:
        response = httpx.get(settings.INFERENCE_URL.rstrip("/") + "/health", timeout=2)
    except httpx.HTTPError as exc:
        return f"error: {exc.__class__.__name__}"
    return "ok" if response.status_code == 200 else f"error: status {response.status_code}"


def healthz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database(), "redis": _redis(), "engine": _engine()}
    healthy = all(state == "ok" for state in checks.values())
    return JsonResponse(
        {
            "status": "ok" if healthy else "degraded",
            **checks,
            # This process's view of the engine (docs/resilience.md); informative, not a check.
            "engine_circuit": engine_client().breaker.state,
        },
        status=200 if healthy else 503,
    )
