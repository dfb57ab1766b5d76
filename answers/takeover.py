"""Taking over the answers whose process died: every web process scans for them, one claims each.

Every web process scans the registry (answers.ownership) every CHAT_TAKEOVER_SCAN_SECONDS; an
answer whose heartbeat is older than CHAT_TAKEOVER_AFTER_SECONDS is claimed by exactly one of them
(a script raises its fencing token), and that one takes it over as its kind says: a chat answer is
continued (chat.generation.take_over), an API answer, whose one reader was a connection to the dead
process, is recorded from its last heartbeat. A scan never claims an answer its own process runs,
so a lone web process, started again after a crash, takes over its predecessor's answers. Why web
processes and not a Celery task: docs/resilience.md, "An answer outlives its process".
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import RedisError

import redisconn
from answers import ownership
from answers.run import RUNNING, AnswerRun
from inference.client import EngineClient

log = logging.getLogger(__name__)


# What takes over an answer of each kind (ownership.kind): the chat continues it
# (chat.generation.take_over), the API records it (openai_api.serving.take_over); each app
# registers its own when it is ready.
Taker = Callable[[aioredis.Redis, ownership.Claim, EngineClient], Awaitable[AnswerRun | None]]
TAKERS: dict[str, Taker] = {}


async def scan(r: aioredis.Redis, engine: EngineClient) -> list[AnswerRun]:
    """Claim and take over the stale answers this process wins; never one it runs itself (its
    heartbeat was only late: Redis was away). The answers continued here."""
    taken = []
    for answer in await ownership.stale(r):
        if answer in RUNNING:
            continue
        claim = await ownership.claim(r, answer)
        if claim is None:
            continue
        try:
            run = await TAKERS[ownership.kind(answer)](r, claim, engine)
        except (RedisError, OSError):
            raise  # Redis is away: keep_scanning waits for it
        except Exception:
            # This answer's failure is its own: the others are still taken; its claim lapses and a
            # later scan tries it again.
            log.exception("answer takeover: answer %s failed", answer)
            continue
        if run is not None:
            taken.append(run)
    return taken


async def keep_scanning(engine: EngineClient, stopped: asyncio.Event) -> None:
    """Scan until `stopped` is set (the process drains: it takes no more answers).

    After Redis was away, every heartbeat is late: the scan waits CHAT_TAKEOVER_AFTER_SECONDS
    more, so that the processes that are alive beat again before any of their answers is claimed."""
    r = redisconn.client()
    loop = asyncio.get_running_loop()
    away_until = 0.0
    while not stopped.is_set():
        try:
            if loop.time() >= away_until:
                await scan(r, engine)
            else:
                await r.ping()
        except (RedisError, OSError) as exc:
            log.warning("answer takeover: Redis is away (%s)", exc)
            away_until = loop.time() + settings.CHAT_TAKEOVER_AFTER_SECONDS
        except Exception:
            log.exception("answer takeover: a scan failed")
        try:
            await asyncio.wait_for(stopped.wait(), settings.CHAT_TAKEOVER_SCAN_SECONDS)
        except TimeoutError:
            pass
