"""Nothing lost: answers outlive their sockets, resume exactly, stop from any tab,
time out, and are admitted within bounds. The engine here injects faults; the
same behaviours against vLLM are in test_chat_faults_end_to_end.py."""

import asyncio
import time
from dataclasses import replace
from datetime import timedelta

import orjson
import psutil
import pytest
import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone
from redis.asyncio.client import PubSub
from redis.exceptions import ConnectionError as RedisConnectionError

import redisconn
from answers import ownership
from chat import consumers, stream_reads, streams, sweeper
from chat.generation import Generation
from conversations import turns
from conversations.models import Conversation, Message
from harness.waiting import until
from redisconn import client as redis_client
from redisconn import keys, subscription
from tests.support.consumer_client import connected, until_closed
from tests.support.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)


def use_engine(monkeypatch, fake: FakeEngine) -> FakeEngine:
    monkeypatch.setattr(consumers, "engine_client", lambda: fake)
    return fake


async def test_it_keeps_generating_after_the_socket_drops_and_resumes_exactly_the_missed_tokens(
    alice, monkeypatch
):
    gate = asyncio.Event()
    use_engine(monkeypatch, FakeEngine(["a", "b", gate, "c", "d", "e"]))
    first = await connected(alice)
    await first.send_json_to({"type": "chat.send", "conversation": None, "content": "hi"})
    started = await first.receive_json_from(timeout=5)
    seen = [await first.receive_json_from(timeout=5) for _ in range(2)]
    assert [f["seq"] for f in seen] == [0, 1]
    await first.disconnect()
    gate.set()

    second = await connected(alice)
    await second.send_json_to({"type": "chat.resume", "message": started["message"], "after": 1})
    rest = await until_closed(second)
    assert [(f["seq"], f["text"]) for f in rest[:-1]] == [(2, "c"), (3, "d"), (4, "e")]
    assert rest[-1]["type"] == "chat.done" and rest[-1]["status"] == "complete"
    assert rest[-1]["content"] == "abcde"
    stored = await Message.objects.aget(pk=started["message"])
    assert (stored.status, stored.content) == ("complete", "abcde")

    # A finished answer resumes from the stored text even without its stream.
    redis.Redis.from_url(settings.REDIS_URL).delete(f"chat:stream:{started['message']}")
    await second.send_json_to({"type": "chat.resume", "message": started["message"], "after": 4})
    done = await second.receive_json_from(timeout=5)
    assert (done["type"], done["content"]) == ("chat.done", "abcde")
    await second.disconnect()


async def test_it_keeps_a_stop_sent_before_the_answers_process_listens_for_one(alice):
    turn = await sync_to_async(turns.chat_turn_start)(user=alice, conversation_id=None, content="hi")
    r = redis_client()
    owner = await streams.open_stream(r, turn.assistant_message_id, user_id=alice.pk)
    # Another process asks to stop it before this one has subscribed to the stop channel.
    await streams.request_stop(r, turn.assistant_message_id)
    fake = FakeEngine(["one "], hang=True)
    generation = Generation(turn, user_id=alice.pk, engine=fake, owner=owner)
    done, _ = await asyncio.wait([generation.start()], timeout=10)
    assert done, "the answer did not stop"
    stored = await Message.objects.aget(pk=turn.assistant_message_id)
    assert stored.status == Message.Status.STOPPED
    assert not await r.exists(keys.chat_stop_requested(turn.assistant_message_id))


async def test_an_answer_stopped_at_its_first_beat_beats_while_it_is_stored(alice, settings, monkeypatch):
    """Stored slower than CHAT_TAKEOVER_AFTER_SECONDS (a database past its knee), it is never stale:
    a stale one would be claimed and continued by another process after its user stopped it."""
    settings.CHAT_HEARTBEAT_SECONDS = 0.05
    settings.CHAT_TAKEOVER_AFTER_SECONDS = 0.3
    store = Generation._store

    def slow_store(self, outcome):
        time.sleep(1.0)
        store(self, outcome)

    monkeypatch.setattr(Generation, "_store", slow_store)
    turn = await sync_to_async(turns.chat_turn_start)(user=alice, conversation_id=None, content="hi")
    r = redis_client()
    owner = await streams.open_stream(r, turn.assistant_message_id, user_id=alice.pk)
    await streams.request_stop(r, turn.assistant_message_id)
    generation = Generation(turn, user_id=alice.pk, engine=FakeEngine(["one "], hang=True), owner=owner)
    task, stale = generation.start(), []
    while not task.done():
        stale += [a for a in await ownership.stale(r) if a == turn.assistant_message_id]
        await asyncio.sleep(0.02)
    assert stale == []
    stored = await Message.objects.aget(pk=turn.assistant_message_id)
    assert stored.status == Message.Status.STOPPED


async def test_a_stop_left_for_an_earlier_answer_under_the_same_id_does_not_stop_a_new_one(alice):
    """A store reset (or a rolled-back test database) hands an id out again; a stop sent to the
    earlier answer in its last moment is still in Redis for CHAT_LEASE_SECONDS."""
    turn = await sync_to_async(turns.chat_turn_start)(user=alice, conversation_id=None, content="hi")
    r = redis_client()
    await streams.request_stop(r, turn.assistant_message_id)
    owner = await streams.open_stream(r, turn.assistant_message_id, user_id=alice.pk)
    generation = Generation(turn, user_id=alice.pk, engine=FakeEngine(["one ", "two"]), owner=owner)
    await asyncio.wait_for(generation.start(), 10)
    stored = await Message.objects.aget(pk=turn.assistant_message_id)
    assert (stored.status, stored.content) == (Message.Status.COMPLETE, "one two")


async def hanging_answers(alice, count: int) -> list[Generation]:
    """`count` answers started in this loop, each past its first token and then waiting."""
    answers = []
    for _ in range(count):
        turn = await sync_to_async(turns.chat_turn_start)(user=alice, conversation_id=None, content="hi")
        owner = await streams.open_stream(redis_client(), turn.assistant_message_id, user_id=alice.pk)
        generation = Generation(turn, user_id=alice.pk, engine=FakeEngine(["one "], hang=True), owner=owner)
        generation.start()
        answers.append(generation)
    assert await until(lambda: all(g.seq == 1 for g in answers), 10), "the answers did not start"
    # Past their first heartbeat, which reads a stop sent before: any stop now must be heard.
    members = [str(g.message_id) for g in answers]
    registered = await redis_client().zmscore(keys.CHAT_ANSWERS, members)
    for _ in range(500):
        beats = await redis_client().zmscore(keys.CHAT_ANSWERS, members)
        if all(beat > first for beat, first in zip(beats, registered, strict=True)):
            return answers
        await asyncio.sleep(0.01)
    raise AssertionError("the answers' heartbeats did not start")


async def pattern_subscriptions() -> int:
    """Pattern subscriptions this process holds: Redis's own count (PUBSUB NUMPAT) is the server's,
    and another process on it (the session's web process, another suite) moves it too."""
    ours = {c.laddr.port for c in psutil.Process().net_connections(kind="tcp") if c.raddr}
    clients = await redis_client().client_list()
    return sum(int(c["psub"]) for c in clients if int(c["addr"].rsplit(":", 1)[1]) in ours)


async def test_the_answers_of_a_process_hear_stops_from_other_processes_on_one_subscription(alice):
    before = await pattern_subscriptions()
    answers = await hanging_answers(alice, 3)
    # One subscription for the three (each answer's own cost a Redis connection each).
    assert await pattern_subscriptions() == before + 1
    # Another process's stop: a message on the answer's channel, with no key left behind.
    await redis_client().publish(keys.chat_stop_channel(answers[1].message_id), "user")
    done, _ = await asyncio.wait([answers[1].task], timeout=10)
    assert done, "the published stop was not heard"
    assert not answers[0].task.done() and not answers[2].task.done()
    for generation in (answers[0], answers[2]):
        generation.stop()
    await asyncio.wait([answers[0].task, answers[2].task], timeout=10)
    # No answer left to hear: the subscription is given back.
    for _ in range(200):
        if await pattern_subscriptions() == before:
            break
        await asyncio.sleep(0.05)
    assert await pattern_subscriptions() == before
    statuses = [m.status async for m in Message.objects.filter(role="assistant").order_by("pk")]
    assert statuses == [Message.Status.STOPPED] * 3


async def test_a_stop_sent_while_the_subscription_was_lost_is_heard_when_it_is_back(alice, monkeypatch):
    (generation,) = await hanging_answers(alice, 1)
    r = redis_client()
    read = PubSub.get_message
    lost = asyncio.Event()

    async def stop_then_lose_the_connection(self, *args, **kwargs):
        if lost.is_set():
            return await read(self, *args, **kwargs)
        lost.set()
        # Another process's stop, then the subscription's connection fails before it is read.
        await streams.request_stop(r, generation.message_id)
        raise RedisConnectionError("connection lost")

    monkeypatch.setattr(PubSub, "get_message", stop_then_lose_the_connection)
    done, _ = await asyncio.wait([generation.task], timeout=15)
    assert lost.is_set() and done, "the stop sent while the subscription was lost was not heard"
    stored = await Message.objects.aget(pk=generation.message_id)
    assert stored.status == Message.Status.STOPPED


async def test_a_subscription_that_goes_quiet_is_made_again_and_hears_the_stop_it_missed(alice, monkeypatch):
    monkeypatch.setattr(subscription, "PING_SECONDS", 0.2)
    (generation,) = await hanging_answers(alice, 1)
    handle, subscribe = PubSub.handle_message, PubSub.psubscribe
    cut = asyncio.Event()

    async def nothing_arrives(self, *args, **kwargs):
        # A connection cut without a reset: silence, the replies to its pings included.
        return None if cut.is_set() else await handle(self, *args, **kwargs)

    async def subscribe_on_a_new_connection(self, *args, **kwargs):
        cut.clear()
        return await subscribe(self, *args, **kwargs)

    monkeypatch.setattr(PubSub, "handle_message", nothing_arrives)
    monkeypatch.setattr(PubSub, "psubscribe", subscribe_on_a_new_connection)
    cut.set()
    await streams.request_stop(redis_client(), generation.message_id)  # published into the silence
    done, _ = await asyncio.wait([generation.task], timeout=15)
    assert done, "the quiet subscription was not made again"
    assert not cut.is_set()


async def test_it_stops_an_answer_from_another_tab_and_keeps_the_partial_text(alice, monkeypatch):
    fake = use_engine(monkeypatch, FakeEngine(["one ", "two "], hang=True))
    tab1, tab2 = await connected(alice), await connected(alice)
    await tab1.send_json_to({"type": "chat.send", "conversation": None, "content": "hi"})
    started = await tab1.receive_json_from(timeout=5)
    for _ in range(2):
        await tab1.receive_json_from(timeout=5)
    await tab2.send_json_to({"type": "chat.stop", "message": started["message"]})
    done = await tab1.receive_json_from(timeout=5)
    assert (done["type"], done["status"], done["content"]) == ("chat.done", "stopped", "one two ")
    assert fake.closed.is_set(), "the engine stream was not closed"
    stored = await Message.objects.aget(pk=started["message"])
    assert (stored.status, stored.content) == ("stopped", "one two ")
    await tab2.send_json_to({"type": "chat.stop", "message": started["message"]})
    again = await tab2.receive_json_from(timeout=5)
    assert again["code"] == "not_running"
    await tab1.disconnect()
    await tab2.disconnect()


@pytest.mark.parametrize(
    "script, setting, code",
    [
        ([1.0, "late"], "CHAT_FIRST_TOKEN_TIMEOUT", "timeout_first_token"),
        (["early", 1.0, "late"], "CHAT_TOKEN_TIMEOUT", "timeout_between_tokens"),
        (["a", 0.15, "b", 0.15, "c", 0.15, "d"], "CHAT_TOTAL_TIMEOUT", "timeout_total"),
    ],
)
async def test_it_aborts_the_engine_request_when_a_timeout_expires(
    alice, monkeypatch, settings, script, setting, code
):
    setattr(settings, setting, 0.3)
    fake = use_engine(monkeypatch, FakeEngine(script))
    communicator = await connected(alice)
    await communicator.send_json_to({"type": "chat.send", "conversation": None, "content": "hi"})
    frames = await until_closed(communicator)
    assert frames[-1]["type"] == "chat.error"
    assert (frames[-1]["code"], frames[-1]["status"]) == (code, "timeout")
    assert fake.closed.is_set()
    stored = await Message.objects.aget(pk=frames[0]["message"])
    assert stored.status == "timeout" and stored.error_code == code
    assert stored.content == "".join(f["text"] for f in frames if f["type"] == "chat.token")
    await communicator.disconnect()


class CountsForever(FakeEngine):
    """An engine that never finishes counting a prompt: assembly itself outlasts the first token's limit."""

    async def count_prompt_tokens(self, messages):
        self.counting = True
        await asyncio.Event().wait()


async def test_a_prompt_whose_counting_never_ends_times_out_as_the_first_token(alice, monkeypatch, settings):
    settings.CHAT_FIRST_TOKEN_TIMEOUT = 0.3
    # A question whose bytes do not clearly fit: the engine is asked to count it.
    settings.CHAT_MAX_TOKENS, settings.INFERENCE_MAX_MODEL_LEN = 16, 600
    fake = use_engine(monkeypatch, CountsForever(["never"]))
    communicator = await connected(alice)
    await communicator.send_json_to({"type": "chat.send", "conversation": None, "content": "w " * 500})
    frames = await until_closed(communicator)
    assert fake.counting
    assert (frames[-1]["type"], frames[-1]["code"]) == ("chat.error", "timeout_first_token")
    stored = await Message.objects.aget(pk=frames[0]["message"])
    assert (stored.status, stored.error_code) == ("timeout", "timeout_first_token")
    await communicator.disconnect()


async def test_it_refuses_past_the_concurrency_limit_with_retry_after_and_writes_nothing(
    alice, monkeypatch, settings
):
    settings.CHAT_MAX_ACTIVE_PER_USER = 1
    use_engine(monkeypatch, FakeEngine(["a"], hang=True))
    communicator = await connected(alice)
    await communicator.send_json_to({"type": "chat.send", "conversation": None, "content": "one"})
    started = await communicator.receive_json_from(timeout=5)
    await communicator.receive_json_from(timeout=5)
    before = await Message.objects.acount()
    await communicator.send_json_to({"type": "chat.send", "conversation": None, "content": "two"})
    refused = await communicator.receive_json_from(timeout=5)
    assert (refused["code"], refused["reason"]) == ("busy", "user_concurrency")
    assert refused["retry_after"] > 0
    assert await Message.objects.acount() == before
    await communicator.send_json_to({"type": "chat.stop", "message": started["message"]})
    await until_closed(communicator)
    await communicator.send_json_to({"type": "chat.send", "conversation": None, "content": "three"})
    third = await communicator.receive_json_from(timeout=5)
    assert third["type"] == "chat.started"
    # Its engine never finishes: stop it, so no answer outlives the test's event loop.
    await communicator.send_json_to({"type": "chat.stop", "message": third["message"]})
    await until_closed(communicator)
    await communicator.disconnect()


async def test_it_limits_messages_per_user_per_minute(alice, monkeypatch, settings):
    settings.CHAT_MESSAGES_PER_MINUTE = 2
    use_engine(monkeypatch, FakeEngine(["ok"]))
    communicator = await connected(alice)
    for _ in range(2):
        await communicator.send_json_to({"type": "chat.send", "conversation": None, "content": "hi"})
        assert (await until_closed(communicator))[-1]["type"] == "chat.done"
    await communicator.send_json_to({"type": "chat.send", "conversation": None, "content": "hi"})
    refused = await communicator.receive_json_from(timeout=5)
    assert (refused["code"], refused["reason"]) == ("busy", "user_rate")
    assert 0 < refused["retry_after"] <= 60
    await communicator.disconnect()


def test_it_sweeps_answers_no_process_owns_keeping_the_text_their_readers_saw(alice, settings):
    conversation = Conversation.objects.create(owner=alice)
    # A continued answer (chat.continue): its stored text is what came before its stream.
    dead = Message.objects.create(
        conversation=conversation, role="assistant", status="generating", content="Before: "
    )
    live = Message.objects.create(conversation=conversation, role="assistant", status="generating")
    fresh = Message.objects.create(conversation=conversation, role="assistant", status="generating")
    old = timezone.now() - timedelta(seconds=settings.CHAT_STALE_AFTER_SECONDS + 5)
    Message.objects.filter(pk__in=[dead.pk, live.pk]).update(created_at=old)
    client = redis.Redis.from_url(settings.REDIS_URL)
    stream = keys.chat_stream(dead.pk)
    client.xadd(stream, {"frame": b'{"type":"chat.opened"}'}, id="1-0")
    for seq, text in enumerate(["Half ", "an answer"]):
        token = {"type": "chat.token", "message": dead.pk, "seq": seq, "text": text}
        client.xadd(stream, {"frame": orjson.dumps(token)}, id=f"1-{seq + 1}")
    client.zadd(keys.CHAT_ANSWERS, {str(live.pk): time.time(), str(dead.pk): time.time() - 3600})
    try:
        assert sweeper.messages_interrupt_stale() == 1
    finally:
        client.zrem(keys.CHAT_ANSWERS, str(live.pk), str(dead.pk))
        client.delete(stream)
    statuses = dict(Message.objects.values_list("pk", "status"))
    assert statuses == {dead.pk: "interrupted", live.pk: "generating", fresh.pk: "generating"}
    assert Message.objects.get(pk=dead.pk).content == "Before: Half an answer"


async def test_it_stores_and_announces_an_answer_stopped_twice_in_a_row(alice):
    turn = await sync_to_async(turns.chat_turn_start)(user=alice, conversation_id=None, content="hi")
    r = redis_client()
    owner = await streams.open_stream(r, turn.assistant_message_id, user_id=alice.pk)
    fake = FakeEngine(["one "], hang=True)
    generation = Generation(turn, user_id=alice.pk, engine=fake, owner=owner)
    task = generation.start()
    assert await until(lambda: fake.requests), "the engine was not asked"
    generation.stop("user")
    await asyncio.sleep(0)  # the first stop is being handled: the answer is storing itself
    generation.stop("user")
    done, _ = await asyncio.wait([task], timeout=10)
    assert done, "the answer did not stop"
    stored = await Message.objects.aget(pk=turn.assistant_message_id)
    assert stored.status == Message.Status.STOPPED
    frames = [f async for f in streams.follow(r, turn.assistant_message_id)]
    assert frames[-1]["type"] == "chat.done" and frames[-1]["status"] == "stopped"


async def test_a_stop_that_reaches_an_answer_being_ended_leaves_it_stored_and_announced(alice):
    """A stop sent as the answer makes its last token (its reader, behind a busy socket, saw only the
    first few) lands while the answer is being ended: its end is stored and announced all the same,
    where a stop that cut it short would leave its row generating (the conversation busy, its
    readers told it was interrupted) and no closing frame."""
    turn = await sync_to_async(turns.chat_turn_start)(user=alice, conversation_id=None, content="hi")
    r = redis_client()
    owner = await streams.open_stream(r, turn.assistant_message_id, user_id=alice.pk)
    generation = Generation(turn, user_id=alice.pk, engine=FakeEngine(["one ", "two"]), owner=owner)
    ending, go_on = asyncio.Event(), asyncio.Event()
    still_owned = generation._still_owned

    async def checked_slowly(r):  # the end's ownership check, held until the stop has come
        ending.set()
        await go_on.wait()
        return await still_owned(r)

    generation._still_owned = checked_slowly
    task = generation.start()
    await asyncio.wait_for(ending.wait(), 30)
    generation.stop("user")
    go_on.set()
    done, _ = await asyncio.wait([task], timeout=30)
    assert done, "the answer did not end"
    stored = await Message.objects.aget(pk=turn.assistant_message_id)
    assert (stored.status, stored.content) == (Message.Status.COMPLETE, "one two")

    async def frames_to_the_end():
        return [f async for f in streams.follow(r, turn.assistant_message_id)]

    frames = await asyncio.wait_for(frames_to_the_end(), 30)
    assert frames[-1]["type"] == "chat.done" and frames[-1]["status"] == "complete"


async def test_a_reader_whose_reads_come_late_gets_every_frame_before_the_end_the_store_tells(monkeypatch):
    """A follower whose reads of the stream come back empty (a process past its knee) and that finds
    the answer ended in the store is given the frames the stream holds after its position first, and
    the stream's own closing frame where it holds one: never an end that skips the text between."""
    r = redis_client()
    message_id = 987_654_321
    key = keys.chat_stream(message_id)
    tokens = [
        {"type": "chat.token", "message": message_id, "seq": seq, "text": t} for seq, t in enumerate("abc")
    ]
    stored_end = {"type": "chat.done", "message": message_id, "status": "complete", "content": "abc"}

    async def read_late(reader, wait):
        return None

    async def quiet():
        return stored_end

    async def followed() -> list[dict]:
        return [f async for f in streams.follow(r, message_id, after=0, quiet=quiet)]

    monkeypatch.setattr(stream_reads, "entries", read_late)
    await r.delete(key)
    await r.xadd(key, {"frame": orjson.dumps({"type": "chat.opened", "message": message_id})}, id="1-0")
    try:
        for seq, token in enumerate(tokens):
            await r.xadd(key, {"frame": orjson.dumps(token)}, id=f"1-{seq + 1}")
        assert await asyncio.wait_for(followed(), 30) == [*tokens[1:], stored_end]
        its_end = {**stored_end, "note": "as the stream has it"}
        await r.xadd(key, {"frame": orjson.dumps(its_end)}, id="1-4")
        assert await asyncio.wait_for(followed(), 30) == [*tokens[1:], its_end]
    finally:
        await r.delete(key)


async def stopped_during_its_token(user, monkeypatch, write_token) -> int:
    """An answer of one token from an engine that then hangs, stopped while its token is being
    written: `write_token(publish, args, stop_now)` writes it and sets `stop_now` when the stop
    should come. Returns the answer's id once it has ended."""
    turn = await sync_to_async(turns.chat_turn_start)(user=user, conversation_id=None, content="hi")
    owner = await streams.open_stream(redis_client(), turn.assistant_message_id, user_id=user.pk)
    stop_now = asyncio.Event()
    publish = streams.publish

    async def publish_with(*args):
        if args[3]["type"] == "chat.token":
            await write_token(publish, args, stop_now)
        else:
            await publish(*args)

    monkeypatch.setattr(streams, "publish", publish_with)
    generation = Generation(turn, user_id=user.pk, engine=FakeEngine(["one "], hang=True), owner=owner)
    task = generation.start()
    await asyncio.wait_for(stop_now.wait(), 30)
    generation.stop("user")
    done, _ = await asyncio.wait([task], timeout=30)
    assert done, "the stop was lost"
    return turn.assistant_message_id


async def test_it_closes_the_stream_of_an_answer_stopped_while_a_token_is_being_written(alice, monkeypatch):
    async def write_then_wait(publish, args, stop_now):
        await publish(*args)
        stop_now.set()
        await asyncio.Event().wait()  # the token is in the stream; its writer has not heard back yet

    message_id = await stopped_during_its_token(alice, monkeypatch, write_then_wait)

    async def frames_to_the_end():
        return [f async for f in streams.follow(redis_client(), message_id)]

    frames = await asyncio.wait_for(frames_to_the_end(), 30)
    assert [f["type"] for f in frames] == ["chat.token", "chat.done"]
    assert frames[-1]["status"] == "stopped" and frames[-1]["content"] == "one "
    stored = await Message.objects.aget(pk=message_id)
    assert (stored.status, stored.content) == (Message.Status.STOPPED, "one ")


async def test_it_stops_an_answer_even_when_a_redis_command_swallowed_the_cancellation(
    alice, monkeypatch, settings
):
    settings.CHAT_TOKEN_TIMEOUT = settings.CHAT_TOTAL_TIMEOUT = 600  # only the stop can end it

    async def write_swallowing_the_cancellation(publish, args, stop_now):
        stop_now.set()
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            pass  # as redis-py's client can (redis/redis-py#2028)
        await publish(*args)

    message_id = await stopped_during_its_token(alice, monkeypatch, write_swallowing_the_cancellation)
    stored = await Message.objects.aget(pk=message_id)
    assert (stored.status, stored.content) == (Message.Status.STOPPED, "one ")


async def test_answers_frames_waiting_together_go_in_one_command_and_fail_one_by_one(monkeypatch):
    """Many answers' tokens come at once (one engine step); one command writes them all, and a
    frame Redis refuses fails its own writer only."""
    r = redis_client()
    owners = {m: await streams.open_stream(r, m, user_id=1) for m in (9001, 9002, 9003)}
    executed = []
    write_all = ownership.write_all

    def counting_write_all(client, frames):
        executed.append(len(frames))
        return write_all(client, frames)

    monkeypatch.setattr(ownership, "write_all", counting_write_all)
    token = {"type": "chat.token", "message": 0, "seq": 0, "text": "x"}
    results = await asyncio.gather(
        streams.publish(r, owners[9001], 0, token),
        streams.publish(r, owners[9002], 0, token),
        # An owner whose claim is not the current one: its write is refused.
        streams.publish(r, replace(owners[9002], fence=0), 1, token),
        # Position 0 again: the frame is there already, and written once.
        streams.publish(r, owners[9001], 0, token),
        streams.publish(r, owners[9003], 0, token),
        return_exceptions=True,
    )
    assert executed == [5], "the frames did not share one command"
    assert [isinstance(result, ownership.Fenced) for result in results] == [False, False, True, False, False]
    assert [result for result in results if not isinstance(result, Exception)] == [None] * 4
    for message_id in (9001, 9002, 9003):
        frames = await r.xrange(keys.chat_stream(message_id))
        assert len(frames) == 2  # the opening marker and one token


async def test_a_frame_sent_as_a_plain_xadd_that_redis_refuses_is_written_again_with_the_checks():
    """A frame of an answer streaming on is one XADD, no script: when its entry id is not the next
    one (written already, or a takeover's claim moved the stream past its fence) or its stream is
    gone, the script's checks say which, as for any frame."""
    r, link = redis_client(), redisconn.lone_connection()
    owner = await streams.open_stream(r, 9101, user_id=1)
    stream = keys.chat_stream(9101)

    def token(seq: int) -> bytes:
        return orjson.dumps({"type": "chat.token", "message": 9101, "seq": seq, "text": "x"})

    async def plain(position: int):
        before = (await r.info("commandstats")).get("cmdstat_evalsha", {}).get("calls", 0)
        (reply,) = await ownership.write_all(link, [(owner, position, token(position), None, True)])
        scripts = (await r.info("commandstats")).get("cmdstat_evalsha", {}).get("calls", 0) - before
        return ownership.refusal(reply), scripts

    try:
        await ownership.WRITE.load_on(link)
        await ownership.write_all(link, [(owner, 0, token(0), None, False)])
        assert await plain(1) == (None, 0)  # written, by the XADD alone
        assert await plain(1) == (None, 1)  # there already: the checks find it, nothing added
        assert [entry_id for entry_id, _ in await r.xrange(stream)] == [b"1-0", b"1-1", b"1-2"]
        await r.hset(keys.chat_answer_owner(9101), "fence", 2)  # a takeover's claim
        await r.execute_command("XSETID", stream, "2-0")
        refused, scripts = await plain(2)
        assert isinstance(refused, ownership.Fenced) and scripts == 1
        await r.delete(stream)  # gone (expired, or lost with Redis)
        await r.hset(keys.chat_answer_owner(9101), "fence", 1)
        refused, _ = await plain(2)
        assert isinstance(refused, ownership.Gap) and refused.position == 0
    finally:
        await link.disconnect()
