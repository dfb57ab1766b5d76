"""One read of Redis for every answer stream that an event loop's followers read from there.

A socket follows an answer from Redis when another process generates it (or generated it: a
resume after its end). Each such follower used to hold a blocked XREAD of its own, a connection
and a command each; here one loop reads every followed stream with one XREAD (a stream each key,
from the oldest entry one of its followers still needs), decodes each entry once, and hands it to
the followers that need it. A follower that joins while the read is blocked on the streams that
were followed before wakes it (CLIENT UNBLOCK), so it waits no longer than a read's round trip.
"""

import asyncio
import logging

import orjson
from django.conf import settings
from redis.exceptions import RedisError

import redisconn
from eventloops import PerLoop
from redisconn import packed

log = logging.getLogger(__name__)
# How long the loop tries a Redis that went away before its followers give up (a restart takes seconds).
REDIS_AWAY_SECONDS = 30.0


class Frame(dict):
    """A frame as its reader yields it, with its JSON (`data`, UTF-8): encoded once, by its writer or
    as Redis holds it, and sent to every socket as it is."""

    __slots__ = ("data",)

    def __init__(self, frame: dict, data: bytes) -> None:
        super().__init__(frame)
        self.data = data

    @property
    def text(self) -> str:
        return self.data.decode()

    @classmethod
    def encoded(cls, frame: dict) -> "Frame":
        return cls(frame, orjson.dumps(frame))

    @classmethod
    def decoded(cls, data: bytes) -> "Frame":
        return cls(orjson.loads(data), data)


def _id(entry_id: bytes) -> tuple[int, int]:
    first, _, second = entry_id.partition(b"-")
    return int(first), int(second)


class Reader:
    """One follower's place in one stream: the entries after `last` come into `entries`, as
    (entry id, frame) lists, or an error when Redis stayed away."""

    def __init__(self, key: str, last: str) -> None:
        self.key = key.encode()
        self.last = _id(last.encode())
        self.entries: asyncio.Queue[list[tuple[bytes, Frame]] | Exception] = asyncio.Queue()


class _Reads:
    """The loop's followed streams, read by one task while any follower is there."""

    def __init__(self) -> None:
        self._readers: dict[bytes, set[Reader]] = {}
        self._task: asyncio.Task | None = None
        self._link = redisconn.lone_connection()
        # Which read is blocked in Redis now (a count of reads), and the connection's id, to wake it.
        self._blocked: int | None = None
        self._reads = 0
        self._client_id: int | None = None
        self._waking: asyncio.Task | None = None

    def add(self, reader: Reader) -> None:
        self._readers.setdefault(reader.key, set()).add(reader)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="chat-stream-reads")
        elif self._blocked is not None and (self._waking is None or self._waking.done()):
            self._waking = asyncio.create_task(self._wake(self._blocked), name="chat-stream-reads-wake")

    def discard(self, reader: Reader) -> None:
        readers = self._readers.get(reader.key)
        if readers is not None:
            readers.discard(reader)
            if not readers:
                del self._readers[reader.key]

    async def _wake(self, read: int) -> None:
        """Unblock read `read`, so the next one reads the new follower's stream too; again while
        Redis has not blocked it yet (the command is on its way)."""
        r = redisconn.client()
        while self._blocked == read and self._client_id is not None:
            try:
                if await r.client_unblock(self._client_id):
                    return
            except RedisError:
                return  # the read fails too, and the next one reads every stream
            await asyncio.sleep(0.002)

    async def _run(self) -> None:
        lost = None
        loop = asyncio.get_running_loop()
        while self._readers:
            try:
                starts, replies = await self._read()
            except (RedisError, OSError) as exc:
                await self._link.disconnect()
                lost = lost or loop.time()
                if loop.time() - lost > REDIS_AWAY_SECONDS:
                    self._fail(exc)
                    return
                await asyncio.sleep(0.5)
                continue
            lost = None
            for key, entries in replies or ():
                # Decoded once, for every follower of the stream.
                frames = [(entry_id, Frame.decoded(_field(fields, b"frame"))) for entry_id, fields in entries]
                self._deliver(key, frames, starts[key])

    async def _read(self):
        if not self._link.is_connected:
            await self._link.connect()
            await self._link.send_command("CLIENT", "ID")
            self._client_id = await self._link.read_response()
        streams = {key: min(reader.last for reader in readers) for key, readers in self._readers.items()}
        args = [*streams, *(f"{ms}-{seq}" for ms, seq in streams.values())]
        block = int(settings.CHAT_STREAM_BLOCK_SECONDS * 1000)
        self._reads += 1
        self._blocked = self._reads
        try:
            await packed.send(
                self._link, packed.packed("XREAD", "COUNT", 256, "BLOCK", block, "STREAMS", *args)
            )
            return streams, await self._link.read_response()
        finally:
            self._blocked = None

    def _deliver(self, key: bytes, entries: list[tuple[bytes, Frame]], start: tuple[int, int]) -> None:
        """Hand the entries after `start` to the stream's readers; one that joined during the read
        and needs entries from before `start` gets them from the next read, all in order."""
        for reader in list(self._readers.get(key, ())):
            if reader.last < start:
                continue
            news = [(entry_id, frame) for entry_id, frame in entries if _id(entry_id) > reader.last]
            if news:
                reader.last = _id(news[-1][0])
                reader.entries.put_nowait(news)

    def _fail(self, error: Exception) -> None:
        for readers in self._readers.values():
            for reader in readers:
                reader.entries.put_nowait(error)
        self._readers.clear()


def _field(fields: list, name: bytes) -> bytes:
    return fields[fields.index(name) + 1]


# The running loop's reads.
reads = PerLoop(_Reads)


async def entries(reader: Reader, wait: float) -> list[tuple[bytes, Frame]] | None:
    """The reader's next entries, or None after `wait` seconds without any. Raises the error
    Redis gave when it stayed away."""
    try:
        got = await asyncio.wait_for(reader.entries.get(), wait)
    except TimeoutError:
        return None
    if isinstance(got, Exception):
        raise got
    return got
