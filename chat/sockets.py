"""The chat sockets an event loop holds, kept together rather than each on its own.

Each socket holds one of its user's socket slots in Redis (chat.rates), a lease that must be
refreshed, and hears its login's logout and its user's changes (chat.socket_auth). Here one
task refreshes the leases of all the loop's sockets, a pipeline of commands a round, and one
subscription (redisconn.subscription) hears the notices for them all and hands each to the sockets
it names. A task of each socket for its lease and a channel of the channel layer with two groups
for its notices cost about 9 KiB a socket, two Redis round trips at each handshake and each close,
and one every 20 s (docs/benchmarks.md, "Memory per connection").

Notices are best effort, as the channel layer's groups were: one published while Redis is away is
not heard, and the socket still checks its login before the next frame it acts on.
"""

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol

import orjson
import redis
import redis.asyncio as aioredis
from redis.exceptions import RedisError

import redisconn
from chat import rates
from eventloops import PerLoop
from redisconn import keys
from redisconn.subscription import Subscription

log = logging.getLogger(__name__)


class Socket(Protocol):
    socket_id: str
    user_id: int

    async def notice(self, kind: str) -> None: ...


class _Sockets:
    """The sockets of one event loop: their leases, refreshed by one task, and their notice
    groups, heard on one subscription; both run while the loop holds any socket."""

    def __init__(self) -> None:
        self._sockets: dict[str, Socket] = {}
        self._groups: defaultdict[str, set[str]] = defaultdict(set)
        self._in_groups: dict[str, tuple[str, ...]] = {}
        self._refresher: asyncio.Task | None = None
        self._notices = Subscription("socket notices", keys.CHAT_SOCKET_NOTICES, self._deliver)
        self._handling: set[asyncio.Task] = set()

    def add(self, socket: Socket, groups: Iterable[str]) -> None:
        self._sockets[socket.socket_id] = socket
        self._in_groups[socket.socket_id] = tuple(groups)
        for group in self._in_groups[socket.socket_id]:
            self._groups[group].add(socket.socket_id)
        if self._refresher is None:
            r = redisconn.client()
            self._refresher = asyncio.create_task(self._refresh(r), name="chat-socket-leases")
            self._notices.start(r)

    def discard(self, socket: Socket) -> None:
        if self._sockets.pop(socket.socket_id, None) is None:
            return
        for group in self._in_groups.pop(socket.socket_id, ()):
            members = self._groups.get(group)
            if members is not None:
                members.discard(socket.socket_id)
                if not members:
                    del self._groups[group]
        if not self._sockets and self._refresher is not None:
            self._refresher.cancel()
            self._refresher = None
            self._notices.stop()

    def __len__(self) -> int:
        return len(self._sockets)

    async def _refresh(self, r: aioredis.Redis) -> None:
        while True:
            await asyncio.sleep(rates.SOCKET_LEASE_SECONDS / 3)
            try:
                await rates.sockets_refresh(r, [(s.user_id, s.socket_id) for s in self._sockets.values()])
            except (RedisError, OSError):
                log.warning("could not refresh the socket slots; trying again in a round", exc_info=True)
            redisconn.raise_if_cancelled()

    def _deliver(self, channel: str, data: bytes) -> None:
        notice = orjson.loads(data)
        for socket_id in list(self._groups.get(notice["group"], ())):
            socket = self._sockets.get(socket_id)
            if socket is not None:
                task = asyncio.create_task(socket.notice(notice["kind"]), name="chat-socket-notice")
                self._handling.add(task)
                task.add_done_callback(self._handled)

    def _handled(self, task: asyncio.Task) -> None:
        self._handling.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a socket notice failed", exc_info=task.exception())


# The running loop's sockets.
held = PerLoop(_Sockets)


def publish(r: redis.Redis, group: str, kind: str) -> None:
    """Tell every socket of `group`, in every web process, of `kind` (sync: views and signals)."""
    r.publish(keys.CHAT_SOCKET_NOTICES, orjson.dumps({"group": group, "kind": kind}))
