"""Health for load balancers, orchestrators and people.

- `/healthz`: the state of everything a chat needs; 200 only when all of it is up.
- `/healthz/live`: the web process answers (liveness: restart it when this fails).
- `/healthz/ready`: the web process can serve pages, history and the store API: its database
  and Redis answer (readiness). The engine is reported, not required: with the engine down the
  site still serves everything but new answers, which are refused with a time to retry.
"""

import redis
from django.db import connection
from django.http import HttpRequest, JsonResponse

import redisconn
from inference.engine import engine_client, engine_health


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


def healthz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database(), "redis": _redis(), "engine": engine_health()}
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


def live(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def ready(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database(), "redis": _redis()}
    serving = all(state == "ok" for state in checks.values())
    return JsonResponse(
        {"status": "ok" if serving else "unavailable", **checks, "engine": engine_health()},
        status=200 if serving else 503,
    )
