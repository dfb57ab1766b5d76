"""Commands on a lone connection (redisconn.lone_connection) sent as their writer packs them: the
path of every frame an answer writes.

redis-py packs each argument through its encoder, and waits for every write with `asyncio.wait_for`,
which on Python 3.11 runs the write as a task of its own. Here a command is packed in one pass
(`packed`) and written at once (`send`); the wait, with the connection's timeout, comes only when
the transport holds some of it back.
"""

import asyncio
import contextlib

import redis.asyncio as aioredis
from redis import exceptions


def packed(*args: bytes | str | int) -> bytes:
    """The command `args` in Redis's protocol (RESP), each argument one bulk string."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, int):
            arg = b"%d" % arg
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


async def send(link: aioredis.Connection, command: bytes) -> None:
    """Write a packed command on `link` (made if it is not); read its reply with `link.read_response()`.
    redis' ConnectionError or TimeoutError, the connection closed, as redis-py's own send raises them."""
    if not link.is_connected:
        await link.connect()
    writer = link._writer
    async with _closed_on_failure(link, "writing to"):
        writer.write(command)
        if writer.transport.is_closing():
            raise exceptions.ConnectionError("the connection to Redis closed")
        if writer.transport.get_write_buffer_size():
            await asyncio.wait_for(writer.drain(), link.socket_timeout)


async def replies(link: aioredis.Connection, count: int) -> list:
    """The next `count` replies on `link`, an error reply as its exception in its place, not raised:
    the replies of commands sent together, read under one timeout."""
    parser = link._parser
    async with _closed_on_failure(link, "reading from"), asyncio.timeout(link.socket_timeout):
        return [await parser.read_response() for _ in range(count)]


@contextlib.asynccontextmanager
async def _closed_on_failure(link: aioredis.Connection, doing: str):
    """A failure of the connection as redis' ConnectionError or TimeoutError, the connection closed."""
    try:
        yield
    except TimeoutError:
        await link.disconnect(nowait=True)
        raise exceptions.TimeoutError(f"Timeout {doing} Redis") from None
    except OSError as exc:
        await link.disconnect(nowait=True)
        raise exceptions.ConnectionError(f"Error {doing} Redis: {exc}") from exc
    except exceptions.ConnectionError:
        await link.disconnect(nowait=True)
        raise


def broken(link: aioredis.Connection) -> bool:
    """Whether `link`, with no reply due on it, is broken as far as the event loop has seen: Redis
    closed it, it failed, or it holds bytes nobody asked for. What `Connection.can_read_destructive`
    tells, without its wait: with hiredis, that is a read a zero timeout cancels, a task switch each time."""
    reader = link._reader
    return reader is None or reader.at_eof() or reader.exception() is not None or len(reader._buffer) > 0
