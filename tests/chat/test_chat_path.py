"""The chat path's frames: shown once each and in order however a socket joins, shown only once
Redis holds them, and written with few Redis commands (docs/benchmarks.md, "The chat path")."""

import asyncio
import time

import pytest
import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from redis.exceptions import ConnectionError as RedisConnectionError

from answers import ownership
from chat import consumers, streams
from chat import generation as generation_module
from chat.generation import Generation
from conversations import turns
from conversations.models import Message
from redisconn import client as redis_client
from redisconn import keys, packed
from tests.support.consumer_client import connected, until_closed
from tests.support.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = [f"w{i} " for i in range(300)]


async def started_answer(user, script, **engine) -> Generation:
    turn = await sync_to_async(turns.chat_turn_start)(user=user, conversation_id=None, content="count")
    owner = await streams.open_stream(redis_client(), turn.assistant_message_id, user_id=user.pk)
    generation = Generation(turn, user_id=user.pk, engine=FakeEngine(script, **engine), owner=owner)
    generation.start()
    return generation


async def token_frames(communicator, count: int) -> list[dict]:
    return [await communicator.receive_json_from(timeout=10) for _ in range(count)]


async def followed(answer: Generation, how: str):
    """What a follower of `answer` in its process is shown: `queued` for the follower's iterator, or
    `pushed` to it (a socket's direct sender), then the rest its iterator yields (from Redis)."""
    if how == "queued":
        async for frame in answer.frames_after(-1):
            yield frame
        return
    got, end = asyncio.Queue(), object()

    async def rest() -> None:
        async for frame in answer.frames_after(-1, got.put_nowait):
            got.put_nowait(frame)
        got.put_nowait(end)

    reading = asyncio.create_task(rest())
    try:
        while (frame := await got.get()) is not end:
            yield frame
    finally:
        reading.cancel()


@pytest.mark.parametrize("path", ["memory", "pushed", "redis"])
async def test_a_socket_joining_mid_answer_and_a_reload_while_tokens_stream_see_each_token_once(
    alice, monkeypatch, path
):
    """`memory`: the sockets are in the answer's own process; `pushed`: there too, with a direct
    sender, to which the frames are pushed; `redis`: in another process, reading its stream."""
    if path == "redis":
        monkeypatch.setattr(consumers, "follow", lambda m, after, push: generation_module._followed(m, after))
    direct = path == "pushed"
    gate = asyncio.Event()
    monkeypatch.setattr(consumers, "engine_client", lambda: FakeEngine([*WORDS[:150], gate, *WORDS[150:]]))
    first = await connected(alice, direct=direct)
    await first.send_json_to({"type": "chat.send", "conversation": None, "content": "count"})
    message = (await first.receive_json_from(timeout=10))["message"]
    before_reload = await token_frames(first, 40)
    await first.disconnect()  # a reload, while the answer streams on to its 150th token
    reloaded, joining = await connected(alice, direct=direct), await connected(alice, direct=direct)
    await reloaded.send_json_to({"type": "chat.resume", "message": message, "after": 39})
    await joining.send_json_to({"type": "chat.resume", "message": message, "after": -1})
    joined_before_the_gate = await token_frames(joining, 10)
    gate.set()
    after_reload, joined = await until_closed(reloaded), joined_before_the_gate + await until_closed(joining)

    stored = await Message.objects.aget(pk=message)
    assert stored.content == "".join(WORDS)
    for frames in (before_reload + after_reload, joined):
        tokens = [f for f in frames if f["type"] == "chat.token"]
        assert [f["seq"] for f in tokens] == list(range(len(tokens)))  # no gap, no duplicate
        assert "".join(f["text"] for f in tokens) == stored.content == frames[-1]["content"]
    if direct:  # the answer's frames went through each socket's direct sender
        assert first.direct.sent >= 40
        assert (reloaded.direct.sent, joining.direct.sent) == (len(after_reload), len(joined))
    for communicator in (reloaded, joining):
        await communicator.disconnect()


@pytest.mark.parametrize("how", ["queued", "pushed"])
async def test_a_socket_in_the_answers_process_is_shown_a_frame_only_once_redis_holds_it(
    alice, monkeypatch, how
):
    write_all, failures = ownership.write_all, asyncio.Queue()
    failing = True

    async def failing_from_the_third(link, frames):
        if failing and any(position >= 2 for _, position, *_ in frames):
            failures.put_nowait(1)
            raise RedisConnectionError("Redis is restarting")
        return await write_all(link, frames)

    monkeypatch.setattr(ownership, "write_all", failing_from_the_third)
    answer = await started_answer(alice, ["a", "b", "c", "d"])
    follower = followed(answer, how)
    assert [(await anext(follower))["text"] for _ in range(2)] == ["a", "b"]
    await asyncio.wait_for(failures.get(), 10)
    shown = asyncio.ensure_future(anext(follower))
    for _ in range(50):  # every task that can run does, the answer's included
        await asyncio.sleep(0)
    assert not shown.done(), "a frame Redis does not hold was shown"
    failing = False
    rest = [await asyncio.wait_for(shown, 10)] + [frame async for frame in follower]
    assert [(f["seq"], f["text"]) for f in rest[:-1]] == [(2, "c"), (3, "d")]
    assert rest[-1]["type"] == "chat.done" and rest[-1]["content"] == "abcd"


@pytest.mark.parametrize("how", ["queued", "pushed"])
async def test_a_frame_the_fence_refused_is_never_shown_to_a_socket_of_the_earlier_owner(alice, how):
    gate = asyncio.Event()
    old = await started_answer(alice, ["a", "b", gate, "c"], hang=True)
    follower = followed(old, how)
    assert [(await anext(follower))["text"] for _ in range(2)] == ["a", "b"]
    r = redis_client()
    for _ in range(50):  # made stale, then claimed; the owner's next beat may come between: again
        await r.zadd(keys.CHAT_ANSWERS, {str(old.message_id): time.time() - 3600})
        if (claim := await ownership.claim(r, old.message_id)) is not None:
            break
    assert claim is not None
    gate.set()  # "c": refused, the earlier owner stops
    await asyncio.wait_for(asyncio.gather(old.task, return_exceptions=True), 10)
    await streams.publish(
        r, claim, 2, {"type": "chat.token", "message": old.message_id, "seq": 2, "text": "C"}
    )
    await streams.publish(r, claim, 3, {"type": "chat.done", "message": old.message_id, "content": "abC"})
    rest = [frame async for frame in follower]
    assert [f.get("text") for f in rest] == ["C", None]
    assert [f["text"] for f in await streams.written(r, old.message_id) if f["type"] == "chat.token"] == [
        "a",
        "b",
        "C",
    ]
    await ownership.leave(r, claim)


def commands() -> dict[str, int]:
    stats = redis.Redis.from_url(settings.REDIS_URL).info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


async def test_the_frames_of_answers_streaming_together_cost_at_most_one_and_a_half_commands_each(
    alice, monkeypatch
):
    # Their tokens come together, as an engine's do: one for each running answer at every step.
    sent, pack = [], packed.packed
    monkeypatch.setattr(packed, "packed", lambda *command: sent.append(command[0]) or pack(*command))
    step = asyncio.Event()
    answers = [await started_answer(alice, [step, *WORDS[:100]]) for _ in range(8)]
    before = commands()
    step.set()
    await asyncio.wait_for(asyncio.gather(*(answer.task for answer in answers)), 30)
    after = commands()
    spent = {
        name: after.get(name, 0) - before.get(name, 0) for name in ("evalsha", "xadd", "hget", "xrevrange")
    }
    frames = 8 * (100 + 1)
    # A frame of an answer streaming on is one XADD, no script: only an answer's first frame (its
    # stream's checks) and its last (its stream's expiry) run one, shared by the answers then.
    assert sent.count("EVALSHA") <= 2 * 8, "frames of answers streaming on ran the script"
    assert sent.count("XADD") >= frames - 2 * 8
    for answer in answers:
        written = await streams.written(redis_client(), answer.message_id)
        assert [f["seq"] for f in written[:-1]] == list(range(100)) and written[-1]["type"] == "chat.done"
    assert sum(spent.values()) <= 1.5 * frames, spent


async def test_followers_reading_from_redis_share_one_read_and_one_joining_wakes_it(settings):
    """Ten sockets of another process follow ten answers: their frames come in shared XREADs, and
    a follower that joins while the read is blocked (for up to a minute here) is read at once."""
    settings.CHAT_STREAM_BLOCK_SECONDS = 60
    r = redis_client()
    answers = list(range(9101, 9111))
    owners = {m: await streams.open_stream(r, m, user_id=1) for m in answers}
    followers = [streams.follow(r, m) for m in answers]
    first = asyncio.ensure_future(anext(followers[0]))
    await asyncio.sleep(0.2)  # its read is blocked now, on its stream alone
    before = commands()
    reading = [first, *(asyncio.ensure_future(anext(f)) for f in followers[1:])]
    for step in range(30):
        await asyncio.gather(
            *(
                streams.publish(
                    r, owners[m], step, {"type": "chat.token", "message": m, "seq": step, "text": "x"}
                )
                for m in answers
            )
        )
        got = await asyncio.wait_for(asyncio.gather(*reading), 10)  # far less than a blocked read's minute
        assert [frame["seq"] for frame in got] == [step] * len(answers)
        reading = [asyncio.ensure_future(anext(f)) for f in followers]
    for task in reading:
        task.cancel()
    reads = commands().get("xread", 0) - before.get("xread", 0)
    assert reads < 30 * len(answers) / 3, f"{reads} reads for {30 * len(answers)} frames"
    for follower in followers:
        await follower.aclose()
