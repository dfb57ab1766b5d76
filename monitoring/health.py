"""Health for load balancers, orchestrators and people.

- `/healthz`: the state of everything a chat needs, the embedding engine that questions of
  collections are embedded by included; 200 only when all of it is up.
- `/healthz/live`: the web process answers (liveness: restart it when this fails).
- `/healthz/ready`: the web process can serve pages, history and the store API: its database
  and Redis answer (readiness). The engines are reported, not required: with the engine down the
  site still serves everything but new answers, which are refused with a time to retry; with the
  embedding engine down, questions are answered without passages, and say so.

Anyone gets the status and its HTTP code; the state of each part only a caller who may read
monitoring details (monitoring.access): a failure is named by its kind, never by its message
(which can hold host names and the database user), and logged in full. The checks run at most
once a second per process, however often they are asked.
"""

import logging
import time

import redis
from django.db import connection
from django.http import HttpRequest, JsonResponse

import redisconn
from answers.drain import draining
from inference import state as engine_state
from inference.engine import embedding_health, engine_client, engine_health
from monitoring.access import may_read_health_details

log = logging.getLogger(__name__)
CACHE_SECONDS = 1.0
_cache: dict[str, tuple[float, str]] = {}


def _failed(part: str, exc: Exception) -> str:
    log.warning("health check: %s: %s", part, exc)
    return f"error: {exc.__class__.__name__}"


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure is reported, not raised
        return _failed("database", exc)
    return "ok"


def _redis() -> str:
    try:
        redisconn.sync_client().ping()
    except redis.RedisError as exc:
        return _failed("redis", exc)
    return "ok"


def _engine() -> str:
    """ "ok"; or, while the engine is unreachable, what its supervisor says it is doing
    ("starting: loading the model's weights"), else the kind of failure."""
    health = engine_health()
    if health == "ok":
        return health
    return engine_state.waiting_detail(engine_state.read()) or health


CHECKS = {"database": _database, "redis": _redis, "engine": _engine, "embedding_engine": embedding_health}


def _checked(part: str) -> str:
    """A part's state, from a check at most CACHE_SECONDS old."""
    now = time.monotonic()
    cached = _cache.get(part)
    if cached is None or now - cached[0] >= CACHE_SECONDS:
        cached = _cache[part] = (now, CHECKS[part]())
    return cached[1]


def _answer(request: HttpRequest, status: str, code: int, details: dict) -> JsonResponse:
    body = {"status": status, **details} if may_read_health_details(request) else {"status": status}
    return JsonResponse(body, status=code)


def healthz(request: HttpRequest) -> JsonResponse:
    checks = {part: _checked(part) for part in CHECKS}
    healthy = all(state == "ok" for state in checks.values())
    status = "ok" if healthy else "degraded"
    if checks["engine"].startswith("starting") or checks["engine"].startswith("restarting"):
        others_ok = all(state == "ok" for part, state in checks.items() if part != "engine")
        status = "starting" if others_ok else status
    # The circuit is this process's view of the engine (docs/resilience.md); informative, not a check.
    details = {**checks, "engine_circuit": engine_client().breaker.state}
    return _answer(request, status, 200 if healthy else 503, details)


def live(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def ready(request: HttpRequest) -> JsonResponse:
    if draining():  # stopping: new traffic goes to the other processes (answers.drain)
        return _answer(request, "draining", 503, {})
    checks = {part: _checked(part) for part in ("database", "redis")}
    serving = all(state == "ok" for state in checks.values())
    details = {**checks, "engine": _checked("engine"), "embedding_engine": _checked("embedding_engine")}
    return _answer(request, "ok" if serving else "unavailable", 200 if serving else 503, details)
