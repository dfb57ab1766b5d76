"""Who owns a running answer, in Redis, so that exactly one process writes it at a time.

Every running answer is in one sorted set, `chat:answers`, scored by the time of its owner's last
heartbeat. Its owner record (a hash: the fencing token, the user, the admission lease) says which
claim is current: the process that starts an answer holds token 1; a process that takes it over
(answers.takeover) raises the token, and from then on every write of the earlier owner (a frame,
a heartbeat, the end) is refused by the scripts below, so a slow old owner (a long GC pause, a
network partition) cannot write after the new one. Frames are also idempotent by position: a
frame's entry id is its writer's token and its position (`<token>-<position + 1>`), so a frame
written twice (a retry after Redis came back) is written once, and a claim that moves the stream's
last id past the earlier token refuses that owner's frames without a read.
"""

import hashlib
import os
import socket
import time
from dataclasses import dataclass

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import NoScriptError, ResponseError

from redisconn import keys, packed

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

# Frames, each at its position (entry id <fence>-<position + 1>), written only by their answer's
# current owner and only right after the frame before them. KEYS: each frame's stream and owner
# record; ARGV[1]: the streams' length limit, then each frame's mode, fence, user, lease, position,
# frame and expiry. The reply, a frame each: its entry id; 0 when it is there already (written before
# a failure, or twice); FENCED; GAP <n> when the stream holds only the positions before n, n below
# the frame's (Redis lost frames), so the writer writes from n on.
#
# A `checked` frame reads its owner record and the stream's last entry first. A `fast` one is one
# XADD: its entry id alone refuses it when it is not the next one (a takeover moved the stream's
# last id to <new fence>-0, answers.ownership.claim), and the checks run only then. Its writer sends
# it fast only when the frame before it went on the same connection, unbroken since (chat.streams):
# Redis cannot have lost that frame meanwhile, and so no gap can open before this one.
_WRITE = (
    _OWNED
    + """
local function checked(stream, owner, fence, user, lease, position, frame, maxlen)
  if not owned(owner, fence, user, lease) then return 'FENCED' end
  local last = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)[1]
  if not last then
    redis.call('XADD', stream, '1-0', 'frame', '{"type":"chat.opened"}')
    last = {'1-0'}
  end
  local have = tonumber(string.match(last[1], '^%d+%-(%d+)$'))
  if have > position then return 0 end
  if have < position then return 'GAP ' .. have end
  local id = fence .. '-' .. (position + 1)
  local ok, written = pcall(redis.call, 'XADD', stream, 'MAXLEN', maxlen, id, 'frame', frame)
  if not ok then return 'ERROR ' .. tostring(written.err or written) end
  return written
end
local replies = {}
for i = 0, (#ARGV - 1) / 7 - 1 do
  local a, stream, owner = 1 + i * 7, KEYS[1 + i * 2], KEYS[2 + i * 2]
  local fence, position, frame, ttl = ARGV[a + 2], tonumber(ARGV[a + 5]), ARGV[a + 6], tonumber(ARGV[a + 7])
  local written = false
  if ARGV[a + 1] == 'fast' then
    local id = fence .. '-' .. (position + 1)
    local ok, added = pcall(redis.call, 'XADD', stream, 'NOMKSTREAM', 'MAXLEN', ARGV[1], id, 'frame', frame)
    if ok then written = added end
  end
  if not written then
    written = checked(stream, owner, fence, ARGV[a + 3], ARGV[a + 4], position, frame, ARGV[1])
  end
  if ttl > 0 and type(written) == 'string' and string.match(written, '^%d') then
    redis.call('EXPIRE', stream, ttl)
  end
  replies[i + 1] = written
end
return replies
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
# Its stream's last id moves to <new token>-0, so that the earlier owner's next frame (<its token>-<n>)
# is refused by the XADD itself (the fast writes of _WRITE); a stream that is gone has none to move.
_CLAIM = """
local beat = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not beat or tonumber(beat) > tonumber(ARGV[2]) then return nil end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('XSETID', KEYS[3], fence .. '-0') end
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

    async def load(self, r: aioredis.Redis) -> None:
        await r.script_load(self.source)

    async def load_on(self, link: aioredis.Connection) -> None:
        await link.send_command("SCRIPT", "LOAD", self.source)
        await link.read_response()

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


async def write_all(link: aioredis.Connection, frames: list[tuple[Claim, int, bytes, int | None, bool]]):
    """Write the frames (owner, position, the frame, its stream's expiry or None, whether the frame
    before it went on this connection, unbroken since: the fast write) in one round trip on `link`;
    the reply a frame: the entry id, 0 when the frame was there already, or FENCED, GAP <n>
    (`refusal`) or ERROR <what Redis said>. NoScriptError when Redis does not know the script
    (`WRITE.load_on` it).

    A fast frame that ends no stream is a plain XADD, the others go in one script call: Redis runs
    no script for the frames of answers streaming on, only for each answer's first and last frame
    and after a failure. A plain XADD refused (its id is not the next one: a takeover's fence, or the
    frame is there already) or without its stream is written again with the checks."""
    maxlen = settings.CHAT_STREAM_MAX_ENTRIES
    plain, scripted = [], []
    for i, (*_, ttl, fast) in enumerate(frames):
        (plain if fast and ttl is None else scripted).append(i)
    commands = [_xadd(*frames[i][:3], maxlen) for i in plain]
    if scripted:
        keys_, args = [], [maxlen]
        for owner, position, frame, ttl, fast in (frames[i] for i in scripted):
            keys_ += [keys.chat_stream(owner.answer), keys.chat_answer_owner(owner.answer)]
            args += ["fast" if fast else "checked", *owner.fields(), position, frame, ttl or 0]
        commands.append(packed.packed("EVALSHA", WRITE.sha, len(keys_), *keys_, *args))
    await packed.send(link, b"".join(commands))
    got = await packed.replies(link, len(commands))
    replies: list = [None] * len(frames)
    if scripted:
        if isinstance(got[-1], Exception):
            raise got[-1]
        for i, reply in zip(scripted, got[-1], strict=True):
            replies[i] = reply
    again = []
    for i, reply in zip(plain, got[: len(plain)], strict=True):
        if reply is None or isinstance(reply, ResponseError):
            again.append(i)
        replies[i] = reply
    if again:
        checked = await write_all(link, [(*frames[i][:4], False) for i in again])
        for i, reply in zip(again, checked, strict=True):
            replies[i] = reply
    return replies


def _xadd(owner: Claim, position: int, frame: bytes, maxlen: int) -> bytes:
    entry_id = f"{owner.fence}-{position + 1}"
    stream = keys.chat_stream(owner.answer)
    return packed.packed("XADD", stream, "NOMKSTREAM", "MAXLEN", maxlen, entry_id, "frame", frame)


class Gap(Exception):
    """The stream lacks frames before this one (Redis lost them): write from `position` on."""

    def __init__(self, position: int) -> None:
        super().__init__(f"the stream ends before position {position}")
        self.position = position


def refusal(reply: bytes | int) -> Exception | None:
    """Fenced, Gap or a ResponseError for a frame's reply (`write_all`) that is one; None for a
    written frame."""
    if isinstance(reply, int):
        return None
    text = reply.decode()
    if text.startswith("FENCED"):
        return Fenced()
    if text.startswith("GAP "):
        return Gap(int(text.removeprefix("GAP ")))
    if text.startswith("ERROR "):
        return ResponseError(text.removeprefix("ERROR "))
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
    keys_ = [keys.chat_answer_owner(answer), keys.CHAT_ANSWERS, keys.chat_stream(answer)]
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
