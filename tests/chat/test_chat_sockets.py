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
