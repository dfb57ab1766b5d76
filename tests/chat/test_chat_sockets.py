"""The chat sockets of a web process, kept together (chat.sockets): their slots' leases renewed
in one round, and the notices for their groups heard on one subscription, both up only while the
process holds a socket. The same notices end to end, through daphne, are in
test_chat_end_to_end.py (logout, deactivation, new password, deletion)."""

import asyncio
import time
import uuid

from asgiref.sync import sync_to_async

from chat import rates, socket_auth, sockets
from harness.waiting import until
from redisconn import client as redis_client
from redisconn import keys


class Listener:
    def __init__(self, user_id: int) -> None:
        self.socket_id = uuid.uuid4().hex[:16]
        self.user_id = user_id
        self.heard: list[str] = []

    async def notice(self, kind: str) -> None:
        self.heard.append(kind)


async def test_a_round_renews_the_leases_and_the_users_sets_of_the_sockets_still_held():
    r = redis_client()
    held, gone = Listener(9101), Listener(9101)
    key = keys.chat_user_sockets(held.user_id)
    await r.delete(key)
    for socket in (held, gone):
        await rates.socket_open(r, user_id=socket.user_id, socket=socket.socket_id)
    await rates.socket_close(r, user_id=gone.user_id, socket=gone.socket_id)
    await r.expire(key, 5)  # as if acquired a while ago: a set that expired would drop every lease
    before = time.time()
    await rates.sockets_refresh(r, [(s.user_id, s.socket_id) for s in (held, gone)], chunk=1)
    assert await r.zscore(key, held.socket_id) >= before + rates.SOCKET_LEASE_SECONDS - 1
    assert await r.zscore(key, gone.socket_id) is None, "a socket closed meanwhile was held again"
    assert await r.ttl(key) > rates.SOCKET_LEASE_SECONDS - 5


async def test_a_notice_reaches_the_sockets_of_its_group_in_this_process_and_no_others():
    held = sockets.held()
    alice, alice_tab, bob = Listener(9201), Listener(9201), Listener(9202)
    held.add(alice, ["login-a", socket_auth.user_group(alice.user_id)])
    held.add(alice_tab, ["login-b", socket_auth.user_group(alice.user_id)])
    held.add(bob, ["login-c", socket_auth.user_group(bob.user_id)])
    try:
        await held._notices.wait(redis_client())
        # Published as a logout or a user's change publishes it: synchronously, from a view or a signal.
        await sync_to_async(socket_auth.send)("login-a", socket_auth.CLOSE)
        assert await until(lambda: alice.heard, 5), "the logout notice was not heard"
        await sync_to_async(socket_auth.send)(socket_auth.user_group(alice.user_id), socket_auth.RECHECK)
        assert await until(lambda: len(alice.heard) == 2 and alice_tab.heard, 5), "the user's notice"
        assert alice.heard == [socket_auth.CLOSE, socket_auth.RECHECK]
        assert alice_tab.heard == [socket_auth.RECHECK]
        assert bob.heard == []
    finally:
        for socket in (alice, alice_tab, bob):
            held.discard(socket)


async def test_the_round_and_the_subscription_run_only_while_a_socket_is_held():
    held = sockets.held()
    assert len(held) == 0 and held._refresher is None
    socket = Listener(9301)
    held.add(socket, [socket_auth.user_group(socket.user_id)])
    refresher = held._refresher
    assert refresher is not None and not refresher.done()
    await held._notices.wait(redis_client())
    held.discard(socket)
    held.discard(socket)  # a second close of the same socket changes nothing
    await asyncio.wait([refresher], timeout=5)
    assert refresher.cancelled() and held._refresher is None and len(held) == 0
    await sync_to_async(socket_auth.send)(socket_auth.user_group(socket.user_id), socket_auth.CLOSE)
    await asyncio.sleep(0.3)
    assert socket.heard == []


class Idle(Listener):
    """A socket that may follow an answer; sent away, it closes as a page's socket does."""

    def __init__(self, user_id: int, held, *, following: bool = False) -> None:
        super().__init__(user_id)
        self.held, self.answer, self.sent_at = held, following, None

    def following(self) -> bool:
        return self.answer

    async def send_away(self) -> None:
        assert self.sent_at is None, "sent away twice"
        self.sent_at = asyncio.get_running_loop().time()
        self.held.discard(self)


async def test_a_draining_process_sends_idle_sockets_away_at_its_rate_and_followers_once_their_answers_end():
    held = sockets.held()
    idle = [Idle(9401, held) for _ in range(60)]
    followers = [Idle(9402, held, following=True) for _ in range(2)]
    for socket in idle + followers:
        held.add(socket, [])
    answers = asyncio.get_running_loop().create_future()
    start = asyncio.get_running_loop().time()
    sending = asyncio.create_task(held.send_away(100, 30, answers))
    try:
        assert await until(lambda: all(s.sent_at for s in idle), 10), (
            "the idle sockets were not all sent away"
        )
        assert not any(s.sent_at for s in followers), "a socket that follows an answer was sent away"
        times = sorted(s.sent_at - start for s in idle)
        # Never ahead of the rate: the nth socket goes no sooner than n/100 s after the drain began.
        assert all(n <= 100 * t + 1 for n, t in enumerate(times, 1)), times
        followers[0].answer = False  # its answer ended
        assert await until(lambda: followers[0].sent_at, 5)
        assert not sending.done(), "it ended while the answers still drain"
        answers.set_result(None)
        assert await asyncio.wait_for(sending, 5) == 61
        assert followers[1].sent_at is None, "the socket still following goes with the process"
    finally:
        sending.cancel()
        for socket in idle + followers:
            held.discard(socket)


async def test_sockets_too_many_for_the_rate_are_all_sent_away_within_the_drain():
    held = sockets.held()
    idle = [Idle(9403, held) for _ in range(40)]
    for socket in idle:
        held.add(socket, [])
    answers = asyncio.get_running_loop().create_future()
    answers.set_result(None)
    try:
        # At 1 a second they would take 40 s: faster, so that all are closed within the 2 s drain.
        assert await asyncio.wait_for(held.send_away(1, 2, answers), 10) == 40
        assert all(s.sent_at for s in idle)
    finally:
        for socket in idle:
            held.discard(socket)
