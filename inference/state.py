"""What the engine is doing, as its supervisor (`runinference`) tells it: starting (and which
step: loading the weights, sizing the KV cache...), serving, or restarting. Kept in Redis under
the engine's address, so every web process can say "starting" instead of an error while the
engine loads. A state the supervisor stopped refreshing (it died) expires."""

import json
import logging
import time

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import RedisError

import redisconn
from redisconn import keys

log = logging.getLogger(__name__)
WAITING = ("starting", "restarting")


def publish(state: str, detail: str) -> None:
    """Record the engine's state; a Redis failure is logged, never fatal to the engine."""
    value = json.dumps({"state": state, "detail": detail, "since": time.time()})
    # A start cannot take longer than its timeout; past it, the state is stale.
    expiry = int(settings.INFERENCE_STARTUP_TIMEOUT) + 60
    try:
        redisconn.sync_client().set(keys.engine_state(settings.INFERENCE_URL), value, ex=expiry)
    except RedisError as exc:
        log.warning("could not record the engine's state (%s): %s", state, exc)


def _parsed(raw: bytes | str | None) -> dict | None:
    return json.loads(raw) if raw else None


def read() -> dict | None:
    try:
        return _parsed(redisconn.sync_client().get(keys.engine_state(settings.INFERENCE_URL)))
    except RedisError:
        return None


async def aread(r: aioredis.Redis) -> dict | None:
    try:
        return _parsed(await r.get(keys.engine_state(settings.INFERENCE_URL)))
    except RedisError:
        return None


def waiting_detail(state: dict | None) -> str | None:
    """ "starting: loading the model's weights" while the engine is on its way up; else None."""
    if state is None or state.get("state") not in WAITING:
        return None
    return f"{state['state']}: {state['detail']}"


def unavailable_detail(state: dict | None, detail: str) -> str:
    """What a refused answer says while the engine is unreachable: why, if it is on its way up."""
    waiting = waiting_detail(state)
    if waiting is None:
        return detail
    return f"The engine is {waiting}; try again in a moment."
