"""Taking over the answers whose process died: every web process scans for them, one claims each.

Why the web processes and not a Celery task: an answer is an asyncio task that relays the
engine's stream into Redis frame by frame, which is what a web process already does with its
event loop, its engine connections and its frame writer; a Celery worker runs one blocking task
per slot and is sized for bulk jobs. Every web process scans the registry
(answers.ownership) every CHAT_TAKEOVER_SCAN_SECONDS; an answer whose heartbeat is older than
CHAT_TAKEOVER_AFTER_SECONDS is claimed by exactly one of them (a script raises its fencing token),
and that one continues it: the conversation and the partial answer read back from its stream go to
the engine with `continue_final_message`, whose prefix cache serves both, and the new tokens follow
in the same stream from the next position. With a single web process, the one supervisord starts
again after a crash takes over its predecessor's answers within seconds of starting.
"""

import asyncio
import contextvars
import logging

import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from django.conf import settings
from redis.exceptions import RedisError

import redisconn
from answers import ownership
from frontend import admission, protocol, services, streams
from frontend.generation import ABANDONED, RUNNING, Generation
from frontend.models import Message
from inference.client import EngineClient

log = logging.getLogger(__name__)


async def take_over(r: aioredis.Redis, claim: ownership.Claim, engine: EngineClient) -> Generation | None:
    """Continue the claimed answer from what its stream holds; None when there is nothing to
    continue (it ended meanwhile, or its stream is gone, and then its row says so)."""
    message_id = claim.message_id
    turn = await database_sync_to_async(services.chat_turn_of_answer)(message_id=message_id)
    written = await streams.written(r, message_id)
    if turn is None or (written and written[-1]["type"] in protocol.TERMINAL):
        await ownership.leave(r, claim)  # it ended: its row was stored before its end was written
        return None
    if written is None:
        log.warning("answer %s: its stream is gone; it cannot be continued", message_id)
        await database_sync_to_async(services.message_finish)(
            message_id=message_id,
            content="",
            status=Message.Status.INTERRUPTED,
            error_code="interrupted",
            note=ABANDONED,
        )
        await ownership.leave(r, claim)
        return None
    lease = admission.Lease(user_id=claim.user_id, member=claim.lease) if claim.lease else None
    if lease is not None:
        async with r.pipeline(transaction=False) as pipe:
            admission.refresh_in(pipe, lease, retake=True)
            await pipe.execute()
    log.info("answer %s: taken over after %s frames (fence %s)", message_id, len(written), claim.fence)
    generation = Generation(
        turn, user_id=claim.user_id, engine=engine, owner=claim, lease=lease, earlier=written
    )
    # A fresh context, as every answer has (frontend.generation.answer_start).
    contextvars.Context().run(generation.start)
    return generation


async def scan(r: aioredis.Redis, engine: EngineClient) -> list[Generation]:
    """Claim and continue the stale answers this process wins; never one it runs itself (its
    heartbeat was only late: Redis was away)."""
    taken = []
    for message_id in await ownership.stale(r):
        if message_id in RUNNING:
            continue
        claim = await ownership.claim(r, message_id)
        if claim is not None and (generation := await take_over(r, claim, engine)) is not None:
            taken.append(generation)
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
