"""Per-answer token streams in Redis, so an answer outlives its WebSocket.

The stream `chat:stream:<message id>` opens with a marker entry `1-0` when the
answer starts; then every frame (each `chat.token`, then the closing `chat.done` or
`chat.error`) is appended with the entry id `1-<seq + 1>`. A reader that has seen
token `seq` resumes with `XREAD ... 1-<seq + 1>` and receives exactly the frames
after it, from any tab and any web process. Streams have a bounded length and
expire CHAT_STREAM_TTL_SECONDS after their last entry.
"""

import json
from collections.abc import AsyncIterator

import redis.asyncio as aioredis
from django.conf import settings

import redisconn
from frontend.protocol import TERMINAL
from redisconn import keys


async def request_stop(r: aioredis.Redis, message_id: int) -> None:
    """Ask whichever process generates the answer to stop it.

    A pub/sub message reaches only subscribers, so the request is also left as a key
    that the answer's watcher reads once it has subscribed: a stop sent in the moment
    between an answer's start and its subscription is not lost."""
    async with r.pipeline(transaction=True) as pipe:
        pipe.set(keys.chat_stop_requested(message_id), 1, ex=int(settings.CHAT_LEASE_SECONDS))
        pipe.publish(keys.chat_stop_channel(message_id), "user")
        await pipe.execute()


def _entry_id(position: int) -> str:
    return f"1-{position + 1}"


async def open_stream(r: aioredis.Redis, message_id: int) -> None:
    """Create the stream with its marker, so readers can tell a started answer from a lost one.

    A leftover stream under the same id (a store that was reset) is replaced. The
    expiry set here outlasts the longest answer (CHAT_TOTAL_TIMEOUT), so tokens
    need not refresh it; the closing frame restarts it."""
    key = keys.chat_stream(message_id)
    async with r.pipeline(transaction=True) as pipe:
        pipe.delete(key)
        _xadd(pipe, key, "1-0", {"type": "chat.opened", "message": message_id})
        pipe.expire(key, settings.CHAT_STREAM_TTL_SECONDS)
        await pipe.execute()


async def publish(r: aioredis.Redis, message_id: int, position: int, frame: dict) -> None:
    """Append the frame at `position` (a token's seq; the closing frame takes the next one)."""
    key = keys.chat_stream(message_id)
    if frame["type"] not in TERMINAL:
        # One round trip per token: the hot path of every answer.
        await _xadd(r, key, _entry_id(position), frame)
        return
    async with r.pipeline(transaction=False) as pipe:
        _xadd(pipe, key, _entry_id(position), frame)
        pipe.expire(key, settings.CHAT_STREAM_TTL_SECONDS)
        await pipe.execute()


def _xadd(client, key: str, entry_id: str, frame: dict):
    return client.xadd(
        key,
        {"frame": json.dumps(frame)},
        id=entry_id,
        maxlen=settings.CHAT_STREAM_MAX_ENTRIES,
        approximate=False,
    )


async def exists(r: aioredis.Redis, message_id: int) -> bool:
    return bool(await r.exists(keys.chat_stream(message_id)))


async def follow(r: aioredis.Redis, message_id: int, after: int = -1) -> AsyncIterator[dict]:
    """Yield the frames after token `after` (-1: from the start), live, until the closing frame.

    Ends without a closing frame only if the stream disappears (expired, or its
    writer died and the stream was never written)."""
    key = keys.chat_stream(message_id)
    last = _entry_id(after)
    block_ms = int(settings.CHAT_STREAM_BLOCK_SECONDS * 1000)
    while True:
        result = await r.xread({key: last}, block=block_ms, count=256)
        redisconn.raise_if_cancelled()  # a follower whose reader left ends here
        if not result:
            if not await r.exists(key):
                return
            continue
        for entry_id, fields in result[0][1]:
            last = entry_id
            frame = json.loads(fields[b"frame"])
            yield frame
            if frame["type"] in TERMINAL:
                return
