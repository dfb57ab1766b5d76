"""Per-answer token streams in Redis, so an answer outlives its WebSocket.

The stream `chat:stream:<message id>` opens with a marker entry `1-0` when the
answer starts; then every frame (each `chat.token`, then the closing `chat.done` or
`chat.error`) is appended with the entry id `1-<seq + 1>`. A reader that has seen
token `seq` resumes with `XREAD ... 1-<seq + 1>` and receives exactly the frames
after it, from any tab and any web process. Streams have a bounded length and
expire CHAT_STREAM_TTL_SECONDS after their last entry.

An answer's owner writes its frames through chat.answer_frames, which keeps them in memory too,
for the followers in its own process.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import NoScriptError, RedisError

import redisconn
from answers import ownership
from answers.ownership import Claim
from chat import stream_reads
from chat.protocol import TERMINAL
from chat.stream_reads import Frame
from eventloops import PerLoop
from redisconn import keys, packed


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


def _position(entry_id: bytes) -> int:
    """The token position of a stream entry: entries written after a takeover (ids <token>-<n>) all
    follow `1-<after + 1>`, so the position is the id's second part, less one."""
    return int(entry_id.rpartition(b"-")[2]) - 1


async def open_stream(r: aioredis.Redis, message_id: int, *, user_id: int, lease: str = "") -> Claim:
    """Create the stream with its marker, so readers can tell a started answer from a lost one,
    and make this process its owner (answers.ownership): the Claim its writes carry.

    A leftover stream under the same id (a store that was reset, or a test database
    rolled back) is replaced, and a leftover stop request for it dropped: one sent for the
    earlier answer in its last moment outlives it by up to CHAT_LEASE_SECONDS, and would
    stop this one before its first token. No stop for this answer can come earlier: its id
    reaches clients only once the stream is open. The expiry set here outlasts the longest
    answer (CHAT_TOTAL_TIMEOUT), so tokens need not refresh it; the closing frame restarts it."""
    key = keys.chat_stream(message_id)
    async with r.pipeline(transaction=True) as pipe:
        pipe.delete(key, keys.chat_stop_requested(message_id))
        _xadd(pipe, key, "1-0", {"type": "chat.opened", "message": message_id})
        pipe.expire(key, settings.CHAT_STREAM_TTL_SECONDS)
        owner = ownership.register_in(pipe, message_id, user_id=user_id, lease=lease)
        await pipe.execute()
    return owner


Written = Callable[[int], None]

# How long the frames of several answers gather before one command carries them. The engine sends
# the tokens of all its running answers at every step, but they reach this process over a millisecond
# or so, a few at a time; a write to Redis costs mostly its send, whatever it carries. Each frame is
# shown that much later, the gaps between an answer's tokens stay as they were; a lone answer's
# frames do not wait.
GATHER_SECONDS = 0.002


async def publish(
    r: aioredis.Redis, owner: Claim, position: int, frame: dict, written: Written | None = None
) -> None:
    """Append the frame at `position` (a token's seq; the closing frame takes the next one), as
    the answer's owner: ownership.Fenced when another process owns it now; a frame already at
    that position (written before Redis went away and came back) is left as it is; ownership.Gap
    when frames before it are missing (Redis lost them): write from the position it names.
    `written(position)` is called once Redis holds the frame, even when this call was cancelled
    meanwhile (a stop). The frames go on the running loop's own connection (`_FrameWriter`), not `r`'s."""
    ttl = settings.CHAT_STREAM_TTL_SECONDS if frame["type"] in TERMINAL else None
    data = frame.data if isinstance(frame, Frame) else orjson.dumps(frame)
    await _writer().write(owner, position, data, ttl, written)


class _FrameWriter:
    """Writes the frames that the answers of one event loop publish: those that wait together go
    in one round trip (ownership.write_all). A token is the hot path of every answer, and many
    answers' tokens come together (the engine makes one for each running answer at every step):
    one write carries them all, a plain XADD each. A frame's writer still waits for its own reply,
    so a failure reaches the answer that published it.

    The writes go on a connection of their own, so that the writer knows when Redis may have
    restarted (and lost the last frames) since an answer's last frame: only a broken connection,
    or a failed write, can hide that. An answer's frame is written with one XADD (a fast write)
    when its frame before went on this connection, unbroken since; else with the owner and gap checks."""

    def __init__(self) -> None:
        self._waiting: list[tuple[Claim, int, bytes, int | None, Written | None, asyncio.Future]] = []
        self._flushing: asyncio.Task | None = None
        self._link = redisconn.lone_connection()
        self._link.register_connect_callback(self._connected)
        # Which answers' last frame went on the connection since it was last made: its count of makings.
        self._connection = 0
        self._continued: dict[Claim, int] = {}

    async def write(
        self, owner: Claim, position: int, frame: bytes, ttl: int | None, written: Written | None
    ) -> None:
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((owner, position, frame, ttl, written, future))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.create_task(self._flush(), name="chat-frame-writer")
        await future

    def _connected(self, connection) -> None:
        self._connection += 1
        self._continued.clear()

    async def _connect(self) -> None:
        """Make the connection again if it broke (Redis closed it, or a write failed on it), so that
        the count of makings is current before the writes choose their way."""
        link = self._link
        if link.is_connected and packed.broken(link):
            await link.disconnect()
        await link.connect()

    async def _flush(self) -> None:
        while self._waiting:
            if len(self._continued) > 1:  # other answers are writing: their frames may come with these
                await asyncio.sleep(GATHER_SECONDS)
            batch, self._waiting = self._waiting, []
            connection = -1
            try:
                await self._connect()
                connection = self._connection
                fast = [self._continued.get(owner) == connection for owner, *_ in batch]
                replies = await self._execute(batch, fast)
            except Exception as exc:  # the connection failed: every frame of the batch did
                await self._link.disconnect()  # made again, and every answer checked, by the next
                replies = [exc] * len(batch)
            for (owner, position, _, ttl, written, future), reply in zip(batch, replies, strict=True):
                outcome = reply if isinstance(reply, Exception) else ownership.refusal(reply)
                if outcome is None:
                    self._continued[owner] = connection
                    if ttl is not None:  # the closing frame: no more of this answer
                        self._continued.pop(owner, None)
                    if written is not None:
                        written(position)
                else:
                    self._continued.pop(owner, None)
                if future.done():  # its writer was cancelled (a stop): the frame is written all the same
                    continue
                if outcome is None:
                    future.set_result(None)
                else:
                    future.set_exception(outcome)

    async def _execute(self, batch: list, fast: list[bool]) -> list:
        """Each frame's reply from one command; once more after loading the script when Redis had
        lost it (a restart): the writes are idempotent."""
        frames = [(*entry[:4], f) for entry, f in zip(batch, fast, strict=True)]
        try:
            replies = await ownership.write_all(self._link, frames)
        except NoScriptError:
            await ownership.WRITE.load_on(self._link)
            replies = await ownership.write_all(self._link, [(*frame[:4], False) for frame in frames])
        if len(replies) != len(batch):
            raise RedisError("no reply for every frame")
        return replies


# The writer of the running loop's answers: their frames share its commands.
_writer = PerLoop(_FrameWriter)


def _xadd(client, key: str, entry_id: str, frame: dict):
    return client.xadd(
        key,
        {"frame": orjson.dumps(frame)},
        id=entry_id,
        maxlen=settings.CHAT_STREAM_MAX_ENTRIES,
        approximate=False,
    )


async def exists(r: aioredis.Redis, message_id: int) -> bool:
    return bool(await r.exists(keys.chat_stream(message_id)))


async def written(r: aioredis.Redis, message_id: int) -> list[dict] | None:
    """Every frame of the answer's stream after its marker, in order; None when the stream is gone
    or lost its start (trimmed at CHAT_STREAM_MAX_ENTRIES)."""
    entries = await r.xrange(keys.chat_stream(message_id))
    if not entries or entries[0][0] != b"1-0":
        return None
    return [orjson.loads(fields[b"frame"]) for _, fields in entries[1:]]


Quiet = Callable[[], Awaitable[dict | None]]


async def _unread(r: aioredis.Redis, key: str, after: int) -> list[dict]:
    """The frames the stream holds after token `after`, in order."""
    entries = await r.xrange(key, min=f"({_entry_id(after)}")
    return [orjson.loads(fields[b"frame"]) for entry_id, fields in entries if _position(entry_id) > after]


async def follow(
    r: aioredis.Redis, message_id: int, after: int = -1, *, quiet: Quiet | None = None
) -> AsyncIterator[dict]:
    """Yield the frames after token `after` (-1: from the start), live, until the closing frame.

    After each CHAT_STREAM_BLOCK_SECONDS without a frame, `quiet` says whether to go on waiting
    (None, or a `chat.notice` saying why no token comes) or how the answer ended (a closing frame,
    yielded last). Without it, ends without a closing frame only if the stream disappears (expired,
    or never written)."""
    reader = stream_reads.Reader(keys.chat_stream(message_id), _entry_id(after))
    reads = stream_reads.reads()
    reads.add(reader)
    try:
        while True:
            got = await stream_reads.entries(reader, settings.CHAT_STREAM_BLOCK_SECONDS)
            redisconn.raise_if_cancelled()  # a follower whose reader left ends here
            if got is None:
                if quiet is not None:
                    if (ending := await quiet()) is not None:
                        if ending["type"] in TERMINAL:
                            # The answer has ended, and the stream may hold frames this reader was
                            # not given yet (its read came late): those first, and the stream's own end.
                            for frame in await _unread(r, reader.key, after):
                                yield frame
                                if frame["type"] in TERMINAL:
                                    return
                            yield ending
                            return
                        yield ending
                elif not await r.exists(reader.key):
                    return
                continue
            for entry_id, frame in got:
                if (position := _position(entry_id)) <= after:
                    continue
                after = position
                yield frame
                if frame["type"] in TERMINAL:
                    return
    finally:
        reads.discard(reader)
