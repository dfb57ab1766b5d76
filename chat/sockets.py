"""The chat sockets an event loop holds, kept together rather than each on its own.

Each socket holds one of its user's socket slots in Redis (chat.rates), a lease that must be
refreshed, and hears its login's logout and its user's changes (chat.socket_auth). Here one
task refreshes the leases of all the loop's sockets, a pipeline of commands a round, and one
subscription (redisconn.subscription) hears the notices for them all and hands each to the sockets
it names (docs/benchmarks.md, "Socket notices"). With CHAT_SOCKET_NOTICES=layer the notices go
through channels-redis's pub/sub layer instead, a channel of it for each socket in its two groups
(chat.consumers), and the lease round stays here.

A notice published while Redis is away is not heard: once the subscription is up again, every
socket checks its login, one after another, and closes if it no longer holds.

A process that drains sends its sockets away spread over time (`send_away`), not all at its end.
"""

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol

import orjson
import redis
import redis.asyncio as aioredis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from redis.exceptions import RedisError

import redisconn
from chat import rates
from eventloops import PerLoop
from redisconn import keys
from redisconn.subscription import Subscription

# A socket notice that asks each socket to check its login again (chat.socket_auth.RECHECK).
RECHECK = "session.recheck"

log = logging.getLogger(__name__)


# How often the sockets of a draining process are sent away, a share of them each time.
SEND_AWAY_TICK = 0.05


class Socket(Protocol):
    socket_id: str
    user_id: int

    async def notice(self, kind: str) -> None: ...

    def following(self) -> bool:
        """Whether an answer is being forwarded to it."""
        ...

    async def send_away(self) -> None:
        """Close it so that its page opens again, to another process."""
        ...


class _Sockets:
    """The sockets of one event loop: their leases, refreshed by one task, and their notice
    groups, heard on one subscription; both run while the loop holds any socket."""

    def __init__(self) -> None:
        self._sockets: dict[str, Socket] = {}
        self._groups: defaultdict[str, set[str]] = defaultdict(set)
        self._in_groups: dict[str, tuple[str, ...]] = {}
        self._refresher: asyncio.Task | None = None
        self._notices = Subscription(
            "socket notices", keys.CHAT_SOCKET_NOTICES, self._deliver, resubscribed=self._resubscribed
        )
        self._handling: set[asyncio.Task] = set()
        # Whether the subscription was up since it started: up again means it was lost meanwhile.
        self._heard_before = False

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
            self._heard_before = False

    def __len__(self) -> int:
        return len(self._sockets)

    async def send_away(self, per_second: float, seconds: float, answers: asyncio.Future) -> int:
        """While the process drains: close the sockets that follow no answer, `per_second` a second
        (faster where the rest would otherwise not be closed within `seconds`), and each socket
        whose answers end meanwhile, until `answers` (the drain of the process's answers) is done
        and no idle socket is left, or `seconds` have passed. Their pages reconnect to another
        process spread out: closed all at the process's end, thousands come back within the page's
        first backoff, past what the kernel's accept queue holds (docs/resilience.md). A socket
        that still follows an answer then closes with the process. Returns how many were closed."""
        loop = asyncio.get_running_loop()
        start = last = loop.time()
        deadline = start + seconds
        sent: set[str] = set()
        credit = 0.0
        while (now := loop.time()) < deadline:
            idle = [s for s in self._sockets.values() if s.socket_id not in sent and not s.following()]
            if not idle:
                if answers.done():
                    break
                credit = 0.0
            else:
                rate = max(per_second, len(idle) / max(deadline - now, SEND_AWAY_TICK))
                # What a stalled loop owes is made up, but never in one burst.
                credit = min(credit + rate * (now - last), max(1.0, 4 * rate * SEND_AWAY_TICK))
                for socket in idle[: int(credit)]:
                    sent.add(socket.socket_id)
                    self._handle(socket.send_away())
                credit -= min(int(credit), len(idle))
            last = now
            await asyncio.sleep(SEND_AWAY_TICK)
        log.info("draining: sent %d sockets away in %.1f s", len(sent), loop.time() - start)
        return len(sent)

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
                self._handle(socket.notice(notice["kind"]))

    async def _resubscribed(self, r: aioredis.Redis) -> None:
        if self._heard_before:
            # What was published while the subscription was down is lost: every socket checks.
            log.info("socket notices heard again: %d sockets check their logins", len(self._sockets))
            self._handle(self._recheck_all())
        self._heard_before = True

    async def _recheck_all(self) -> None:
        # One after another: a query each, never thousands at once against the database pool.
        for socket in list(self._sockets.values()):
            if socket.socket_id in self._sockets:
                try:
                    await socket.notice(RECHECK)
                except Exception:  # one socket's failure is not the others'
                    log.exception("a socket could not check its login")

    def _handle(self, work) -> None:
        task = asyncio.create_task(work, name="chat-socket-work")
        self._handling.add(task)
        task.add_done_callback(self._handled)

    def _handled(self, task: asyncio.Task) -> None:
        self._handling.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a socket's notice or send-away failed", exc_info=task.exception())


# The running loop's sockets.
held = PerLoop(_Sockets)


def publish(r: redis.Redis, group: str, kind: str) -> None:
    """Tell every socket of `group`, in every web process, of `kind` (sync: views and signals)."""
    if settings.CHAT_SOCKET_NOTICES == "layer":
        async_to_sync(get_channel_layer().group_send)(group, {"type": kind})
    else:
        r.publish(keys.CHAT_SOCKET_NOTICES, orjson.dumps({"group": group, "kind": kind}))
