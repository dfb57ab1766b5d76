"""Who owns a running answer, in Redis, so that exactly one process writes it at a time.

Every running answer is in one sorted set, `chat:answers`, scored by the time of its owner's last
heartbeat. Its owner record (a hash: the fencing token, the user, the admission lease) says which
claim is current: the process that starts an answer holds token 1; a process that takes it over
(answers.takeover) raises the token, and from then on every write of the earlier owner (a frame,
a heartbeat, the end) is refused by the scripts below, so a slow old owner (a long GC pause, a
network partition) cannot write after the new one. Frames are also idempotent by position: the
stream's entry ids are the tokens' sequence numbers, so a frame written twice (a retry after
Redis came back) is written once.
"""

import hashlib
import os
import socket
import time
from dataclasses import dataclass

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import NoScriptError

from redisconn import keys

# Is ARGV[1] the current token? A record Redis lost (a restart without persistence) is made again
# by whoever writes next: no one can have claimed an answer the registry does not hold.
_OWNED = """
local function owned(owner, fence, user, lease)
  local current = redis.call('HGET', owner, 'fence')
  if current then return current == fence end
  redis.call('HSET', owner, 'fence', fence, 'user', user, 'lease', lease)
  redis.call('EXPIRE', owner, 3600)
  return true
end
"""

# A frame at position ARGV[4] (entry id 1-<position + 1>), written only by the current owner and only
# right after the frame before it: the reply is its entry id; 0 when it is there already (written
# before a failure, or twice); GAP <n> when the stream holds only the positions before n, n below
# this one (Redis lost frames: a restart without the last second of its append-only file), so the
# writer writes from n on.
_WRITE = (
    _OWNED
    + """
if not owned(KEYS[2], ARGV[1], ARGV[2], ARGV[3]) then return redis.error_reply('FENCED') end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
if not last then
  redis.call('XADD', KEYS[1], '1-0', 'frame', '{"type":"chat.opened"}')
  last = {'1-0'}
end
local have = tonumber(string.match(last[1], '^1%-(%d+)$'))
local position = tonumber(ARGV[4])
if have > position then return 0 end
if have < position then return redis.error_reply('GAP ' .. have) end
local written = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[6], '1-' .. (position + 1), 'frame', ARGV[5])
if tonumber(ARGV[7]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[7]) end
return written
"""
)

# The owner's heartbeat, with what it says of the answer so far (ARGV[6..], field and value): 1,
# or 0 when another process owns the answer now.
_BEAT = (
    _OWNED
    + """
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5])
if #ARGV > 5 then redis.call('HSET', KEYS[1], unpack(ARGV, 6)) end
return 1
"""
)

# The answer ended: out of the registry. Or it was handed over: its beat dated ARGV[5], just stale
# enough to be claimed at once, and recent enough that its followers wait for the claim.
_LEAVE = """
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] then return 0 end
if ARGV[2] == 'end' then
  redis.call('ZREM', KEYS[2], ARGV[3])
  redis.call('EXPIRE', KEYS[1], ARGV[4])
else
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[3])
end
return 1
"""

# A claim on an answer whose heartbeat is older than ARGV[2]: the new token, user and lease; or nil.
_CLAIM = """
local beat = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not beat or tonumber(beat) > tonumber(ARGV[2]) then return nil end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('HSET', KEYS[1], 'process', ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return {fence, redis.call('HGET', KEYS[1], 'user'), redis.call('HGET', KEYS[1], 'lease') or ''}
"""


class Lua:
    """A script run by its digest, sent whole only when Redis does not know it (after a restart):
    redis-py's own scripts in a pipeline ask Redis whether it knows them on every execute, a
    round trip more on the path of every frame."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def add_to(self, pipe, keys_: list, args: list) -> None:
        """Run it in `pipe`; a NoScriptError reply means `load` it and run the pipeline again."""
        pipe.evalsha(self.sha, len(keys_), *keys_, *args)

    async def load(self, r: aioredis.Redis) -> None:
        await r.script_load(self.source)

    async def __call__(self, r: aioredis.Redis, keys_: list, args: list):
        try:
            return await r.evalsha(self.sha, len(keys_), *keys_, *args)
        except NoScriptError:
            return await r.eval(self.source, len(keys_), *keys_, *args)


WRITE, BEAT, LEAVE, CLAIM = Lua(_WRITE), Lua(_BEAT), Lua(_LEAVE), Lua(_CLAIM)


# Which process owns an answer, in its owner record: for operators, and the tests that kill it.
PROCESS = f"{socket.gethostname()}:{os.getpid()}"


class Fenced(Exception):
    """Another process owns the answer now: this one must stop writing it."""


# The registry's name of an answer of the OpenAI-compatible API (a chat answer's is its message id).
API_PREFIX = "api-"


@dataclass(frozen=True)
class Claim:
    """An answer this process owns: its id (a chat message's id, or API_PREFIX and an API answer's
    id), its fencing token, its user and admission lease."""

    answer: int | str
    fence: int
    user_id: int
    lease: str

    def fields(self) -> list:
        """What the scripts check and, for a record Redis lost, write again."""
        return [self.fence, self.user_id, self.lease]


def register_in(
    pipe: aioredis.client.Pipeline, answer: int | str, *, user_id: int, lease: str, **record: str
) -> Claim:
    """The commands that make the starting process the answer's owner (token 1), added to `pipe`;
    `record`: more for whoever takes it over (an API answer's request)."""
    owner = Claim(answer, 1, user_id, lease)
    key = keys.chat_answer_owner(answer)
    pipe.delete(key)
    pipe.hset(key, mapping={"fence": 1, "user": user_id, "lease": lease, "process": PROCESS, **record})
    pipe.expire(key, settings.CHAT_STREAM_TTL_SECONDS)
    pipe.zadd(keys.CHAT_ANSWERS, {str(answer): time.time()})
    return owner


def write_in(pipe, owner: Claim, position: int, frame: bytes, ttl: int | None) -> None:
    """Add one fenced, idempotent, in-order frame write to `pipe`; its reply is the entry id, 0 when
    the frame was there already, or a FENCED or GAP error (`refusal`)."""
    WRITE.add_to(
        pipe,
        [keys.chat_stream(owner.answer), keys.chat_answer_owner(owner.answer)],
        [*owner.fields(), position, frame, settings.CHAT_STREAM_MAX_ENTRIES, ttl or 0],
    )


class Gap(Exception):
    """The stream lacks frames before this one (Redis lost them): write from `position` on."""

    def __init__(self, position: int) -> None:
        super().__init__(f"the stream ends before position {position}")
        self.position = position


def refusal(error: Exception) -> Exception | None:
    """Fenced or Gap for a write's error reply that is one; None for any other error."""
    text = str(error)
    if text.startswith("FENCED"):
        return Fenced()
    if text.startswith("GAP "):
        return Gap(int(text.removeprefix("GAP ")))
    return None


async def beat(r: aioredis.Redis, owner: Claim, so_far: dict[str, str | int] | None = None) -> bool:
    """Refresh the answer's heartbeat, and keep `so_far` in its record (what a taker of an answer
    it cannot continue records: an API answer's usage); False when another process owns it now."""
    keys_ = [keys.chat_answer_owner(owner.answer), keys.CHAT_ANSWERS]
    pairs = [item for pair in (so_far or {}).items() for item in pair]
    return bool(await BEAT(r, keys_, [*owner.fields(), time.time(), owner.answer, *pairs]))


async def leave(r: aioredis.Redis, owner: Claim, *, handover: bool = False) -> bool:
    """The owner lets go: the answer ended (out of the registry), or, with `handover`, it is left
    for another process to take at once. False when the owner had already changed."""
    keys_ = [keys.chat_answer_owner(owner.answer), keys.CHAT_ANSWERS]
    stale_now = time.time() - settings.CHAT_TAKEOVER_AFTER_SECONDS
    args = [
        owner.fence,
        "handover" if handover else "end",
        owner.answer,
        settings.CHAT_STREAM_TTL_SECONDS,
        stale_now,
    ]
    return bool(await LEAVE(r, keys_, args))


def kind(answer: int | str) -> str:
    """ "api" for an answer of the OpenAI-compatible API, "chat" for a chat message's."""
    return "api" if isinstance(answer, str) and answer.startswith(API_PREFIX) else "chat"


def _answer(member: bytes) -> int | str:
    name = member.decode()
    return name if name.startswith(API_PREFIX) else int(name)


async def stale(r: aioredis.Redis, *, limit: int = 16) -> list[int | str]:
    """Answers whose owner has not beaten for CHAT_TAKEOVER_AFTER_SECONDS, oldest first."""
    before = time.time() - settings.CHAT_TAKEOVER_AFTER_SECONDS
    return [_answer(m) for m in await r.zrangebyscore(keys.CHAT_ANSWERS, "-inf", before, start=0, num=limit)]


async def claim(r: aioredis.Redis, answer: int | str) -> Claim | None:
    """Own a stale answer: exactly one of the processes that try it gets the Claim."""
    before = time.time() - settings.CHAT_TAKEOVER_AFTER_SECONDS
    keys_ = [keys.chat_answer_owner(answer), keys.CHAT_ANSWERS]
    got = await CLAIM(r, keys_, [answer, before, time.time(), PROCESS])
    if got is None:
        return None
    fence, user, lease = got
    return Claim(answer, int(fence), int(user), lease.decode() if isinstance(lease, bytes) else lease)


async def record(r: aioredis.Redis, owner: Claim) -> dict[str, str]:
    """The owner record of an answer: what it was registered with and its last heartbeat's `so_far`."""
    fields = await r.hgetall(keys.chat_answer_owner(owner.answer))
    return {name.decode(): value.decode() for name, value in fields.items()}


async def last_beat(r: aioredis.Redis, answer: int | str) -> float | None:
    """When the answer's owner last beat (a claim counts), or None when it is not running."""
    return await r.zscore(keys.CHAT_ANSWERS, str(answer))
