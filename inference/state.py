"""What the engine is doing, as its supervisor (`runinference`) tells it (enginehost.state):
starting (and which step: loading the weights, sizing the KV cache...), serving, or restarting.
Read from Redis under the engine's address, so every web process can say "starting" instead of
an error while the engine loads. With several replicas behind the router, each replica's
supervisor tells its own; the web tier reads them all."""

import json

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import RedisError

import redisconn
from inference.topology import replica_urls
from redisconn import keys

WAITING = ("starting", "restarting")


def _state_keys() -> list[str]:
    urls = dict.fromkeys([settings.INFERENCE_URL, *replica_urls(settings)])
    return [keys.engine_state(url) for url in urls]


def _chosen(raws: list) -> dict | None:
    """The state to tell: one on its way up if any engine is, else the first recorded."""
    states = [json.loads(raw) for raw in raws if raw]
    return next((s for s in states if s.get("state") in WAITING), states[0] if states else None)


def read() -> dict | None:
    try:
        return _chosen(redisconn.sync_client().mget(_state_keys()))
    except RedisError:
        return None


async def aread(r: aioredis.Redis) -> dict | None:
    try:
        return _chosen(await r.mget(_state_keys()))
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
