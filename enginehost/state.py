"""What the engine is doing, told by its supervisor (`runinference`): starting (and which step),
serving, restarting or stopped. Kept in Redis under the engine's address, where every web process
reads it (inference.state). A state the supervisor stopped refreshing (it died) expires."""

import json
import logging
import time

from django.conf import settings
from redis.exceptions import RedisError

import redisconn
from redisconn import keys

log = logging.getLogger(__name__)


def publish(state: str, detail: str, url: str | None = None) -> None:
    """Record the state of the engine at `url` (INFERENCE_URL's by default); a Redis failure is
    logged, never fatal to the engine."""
    value = json.dumps({"state": state, "detail": detail, "since": time.time()})
    # A start cannot take longer than its timeout; past it, the state is stale.
    expiry = int(settings.INFERENCE_STARTUP_TIMEOUT) + 60
    try:
        redisconn.sync_client().set(keys.engine_state(url or settings.INFERENCE_URL), value, ex=expiry)
    except RedisError as exc:
        log.warning("could not record the engine's state (%s): %s", state, exc)
