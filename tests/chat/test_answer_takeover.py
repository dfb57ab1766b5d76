"""An answer outlives its process: the registry and fencing tokens (answers.ownership), the takeover
scan (answers.takeover), drain and handover (answers.drain), frames kept while Redis is away, and
followers that never wait on a dead stream. The engine here injects faults; the same faults against
vLLM, supervisord, nginx and a killed Redis are in test_answer_takeover_end_to_end.py."""

import asyncio
import time
from dataclasses import replace

import pytest
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from redis.exceptions import ConnectionError as RedisConnectionError

from answers import drain, ownership, process, takeover
from answers.run import RUNNING
from chat import generation as generation_module
from chat import streams
from chat.generation import Generation, follow
from conversations import turns
from conversations.models import Message
from harness.waiting import until
from inference.client import EngineError
from openai_api import protocol as api_protocol
from openai_api import serving
from redisconn import client as redis_client
from redisconn import keys
from tests.support.consumer_client import first_frames
from tests.support.fake_engine import FakeEngine
from usage.models import UsageDay

pytestmark = pytest.mark.django_db(transaction=True)


async def running_answer(user, script, **engine) -> tuple[Generation, FakeEngine]:
    turn = await sync_to_async(turns.chat_turn_start)(user=user, conversation_id=None, content="count")
    owner = await streams.open_stream(redis_client(), turn.assistant_message_id, user_id=user.pk)
    fake = FakeEngine(script, **engine)
    generation = Generation(turn, user_id=user.pk, engine=fake, owner=owner)
    generation.start()
    return generation, fake


async def died(run, beat_ago: float = 3600) -> None:
    """The answer's process dies: its task stops without a word, its last heartbeat `beat_ago` s past."""
    run._stop_reason = "superseded"  # nothing stored, nothing released: as a SIGKILL leaves it
    run.task.cancel()
    run._watcher.cancel()  # and no heartbeat after it
    await asyncio.gather(run.task, run._watcher, return_exceptions=True)
    await redis_client().zadd(keys.CHAT_ANSWERS, {str(run.owner.answer): time.time() - beat_ago})


def tokens(frames: list[dict]) -> list[tuple[int, str]]:
    return [(f["seq"], f["text"]) for f in frames if f["type"] == "chat.token"]


async def test_exactly_one_of_two_processes_claims_a_stale_answer_and_the_old_owner_cannot_write():
    r, other = redis_client(), aioredis.Redis.from_url(settings.REDIS_URL)
    try:
        first = await streams.open_stream(r, 7001, user_id=3, lease="slot")
        token = {"type": "chat.token", "message": 7001, "seq": 0, "text": "a"}
        await streams.publish(r, first, 0, token)
        assert await takeover.ownership.claim(r, 7001) is None, "a live answer was claimed"
        await r.zadd(keys.CHAT_ANSWERS, {"7001": time.time() - 60})
        claims = await asyncio.gather(*(ownership.claim(c, 7001) for c in (r, other, r, other)))
        won = [c for c in claims if c is not None]
        assert won == [ownership.Claim(7001, 2, 3, "slot")]
        # The old owner, slow but alive, is fenced off: no frame, no heartbeat, no end.
        with pytest.raises(ownership.Fenced):
            await streams.publish(r, first, 1, {**token, "seq": 1})
        assert not await ownership.beat(r, first)
        assert not await ownership.leave(r, first)
        await streams.publish(r, won[0], 1, {**token, "seq": 1, "text": "b"})
        assert tokens(await streams.written(r, 7001)) == [(0, "a"), (1, "b")]
    finally:
        await r.delete(keys.chat_stream(7001), keys.chat_answer_owner(7001))
        await r.zrem(keys.CHAT_ANSWERS, "7001")
        await other.aclose()


async def test_a_dead_processs_answer_is_continued_by_one_scanner_gaplessly_and_stored_whole(alice):
    gate = asyncio.Event()
    dead, _ = await running_answer(alice, ["One, ", "two, ", gate], hang=True)
    assert len([f async for f in first_frames(dead.frames_after(-1), 2)]) == 2  # written
    await died(dead)
    engines = [FakeEngine(["three, ", "four."]), FakeEngine(["three, ", "four."])]
    r, other = redis_client(), aioredis.Redis.from_url(settings.REDIS_URL)
    try:
        taken = await asyncio.gather(takeover.scan(r, engines[0]), takeover.scan(other, engines[1]))
    finally:
        await other.aclose()
    [[continued]] = [t for t in taken if t]
    await asyncio.wait_for(continued.task, 10)
    [request] = [request for engine in engines for request in engine.requests]
    # The conversation and the partial answer, carried on: the prefix cache serves both.
    assert request.continue_final_message
    assert request.messages[-1] == {"role": "assistant", "content": "One, two, "}
    assert request.max_tokens == settings.CHAT_MAX_TOKENS - 2
    frames = [frame async for frame in streams.follow(r, dead.message_id)]
    assert tokens(frames) == [(0, "One, "), (1, "two, "), (2, "three, "), (3, "four.")]
    assert frames[-1]["type"] == "chat.done" and frames[-1]["content"] == "One, two, three, four."
    stored = await Message.objects.aget(pk=dead.message_id)
    assert (stored.status, stored.content) == ("complete", "One, two, three, four.")
    assert not await r.zscore(keys.CHAT_ANSWERS, str(dead.message_id))


async def test_an_answer_that_cannot_be_continued_ends_with_an_error_frame_and_its_partial_text(
    alice, settings
):
    settings.CHAT_ENGINE_RESUME_SECONDS = 0  # no waiting for the engine to come back
    dead, _ = await running_answer(alice, ["Half "], hang=True)
    assert len([f async for f in first_frames(dead.frames_after(-1), 1)]) == 1  # written
    await died(dead)
    down = FakeEngine(fail_with=EngineError("no engine", code="engine_unavailable"))
    [continued] = await takeover.scan(redis_client(), down)
    await asyncio.wait_for(continued.task, 10)
    frames = [frame async for frame in streams.follow(redis_client(), dead.message_id)]
    assert frames[-1]["type"] == "chat.error" and frames[-1]["content"] == "Half "
    stored = await Message.objects.aget(pk=dead.message_id)
    assert (stored.status, stored.content) == ("interrupted", "Half ")


async def test_an_owner_that_another_process_took_over_stops_without_writing(alice, settings):
    settings.CHAT_HEARTBEAT_SECONDS = 0.2
    old, fake = await running_answer(alice, ["a "], hang=True)
    # Its first token written (a follower here is shown it only then).
    assert [f["text"] async for f in first_frames(old.frames_after(-1), 1)] == ["a "]
    r = redis_client()
    # Made stale, then claimed; the owner's next beat (every 0.2 s) may come between: again.
    for _ in range(20):
        await r.zadd(keys.CHAT_ANSWERS, {str(old.message_id): time.time() - 3600})
        if (claim := await ownership.claim(r, old.message_id)) is not None:
            break
    assert claim is not None and claim.fence == 2
    await asyncio.wait_for(asyncio.gather(old.task, return_exceptions=True), 10)
    assert fake.aborted == 1  # its engine request closed
    assert tokens(await streams.written(r, old.message_id)) == [(0, "a ")]  # no end written
    assert (await Message.objects.aget(pk=old.message_id)).status == "generating"
    await ownership.leave(r, claim)


async def test_an_owner_whose_deadline_passes_after_a_takeover_stores_nothing(alice, settings):
    # Its heartbeat would tell it too late (a stalled event loop): the deadline fires first.
    settings.CHAT_HEARTBEAT_SECONDS = 3600
    settings.CHAT_TOKEN_TIMEOUT = 1.0
    old, fake = await running_answer(alice, ["a "], hang=True)
    assert [f["text"] async for f in first_frames(old.frames_after(-1), 1)] == ["a "]
    r = redis_client()
    for _ in range(50):  # made stale, then claimed; the owner's first beat may come between: again
        await r.zadd(keys.CHAT_ANSWERS, {str(old.message_id): time.time() - 3600})
        if (claim := await ownership.claim(r, old.message_id)) is not None:
            break
    assert claim is not None and claim.fence == 2
    await asyncio.wait_for(asyncio.gather(old.task, return_exceptions=True), 10)
    assert fake.aborted == 1  # the deadline ended its engine request
    # Not stored as timed out, nor announced: the answer is its new owner's to end.
    assert (await Message.objects.aget(pk=old.message_id)).status == "generating"
    assert tokens(await streams.written(r, old.message_id)) == [(0, "a ")]
    assert all(f["type"] == "chat.token" for f in await streams.written(r, old.message_id))
    await ownership.leave(r, claim)


async def test_a_draining_process_finishes_what_it_can_and_hands_over_the_rest(alice, monkeypatch):
    quick, _ = await running_answer(alice, ["done ", 0.3, "soon"])
    slow, _ = await running_answer(alice, ["a long "], hang=True)
    assert await until(lambda: slow.seq == 1, 10)
    monkeypatch.setattr(process, "_draining", False)
    await drain.drain(1.5)
    assert drain.draining()
    assert (await Message.objects.aget(pk=quick.message_id)).status == "complete"
    # Left for another process at once, nothing stored or announced by this one.
    r = redis_client()
    beat = await r.zscore(keys.CHAT_ANSWERS, str(slow.message_id))
    # Stale at once, so a scan claims it, and no older: its followers wait for that claim.
    assert time.time() - 10 < beat <= time.time() - settings.CHAT_TAKEOVER_AFTER_SECONDS
    assert (await Message.objects.aget(pk=slow.message_id)).status == "generating"
    with pytest.raises(generation_module.Refusal, match="restarting"):
        await generation_module.answer_start(
            user=alice,
            engine=FakeEngine(),
            start_turn=turns.chat_turn_start,
            conversation_id=None,
            content="hi",
        )
    [continued] = await takeover.scan(r, FakeEngine(["long answer."]))
    await asyncio.wait_for(continued.task, 10)
    stored = await Message.objects.aget(pk=slow.message_id)
    assert (stored.status, stored.content) == ("complete", "a long long answer.")


async def test_a_follower_of_an_answer_no_process_continues_ends_within_seconds(alice, settings, monkeypatch):
    settings.CHAT_STREAM_BLOCK_SECONDS = 0.2
    settings.CHAT_TAKEOVER_AFTER_SECONDS = 0.5
    monkeypatch.setattr(generation_module, "TAKEOVER_GRACE", 0.5)
    dead, _ = await running_answer(alice, ["Left "], hang=True)
    assert len([f async for f in first_frames(dead.frames_after(-1), 1)]) == 1  # written
    # Stale for this test's 0.5 s, not yet for the 6 s of the suite's own web process (the browser
    # tests' daphne, on the same Redis and database), whose scan would otherwise continue the answer
    # with the real engine before this follower gave up on it.
    await died(dead, beat_ago=1.0)
    RUNNING.pop(dead.message_id, None)
    started = time.monotonic()
    frames = [frame async for frame in follow(dead.message_id)]
    assert time.monotonic() - started < 5
    assert tokens(frames) == [(0, "Left ")]
    assert (frames[-1]["type"], frames[-1]["status"], frames[-1]["content"]) == (
        "chat.error",
        "interrupted",
        "Left ",
    )


async def test_an_answer_goes_on_while_redis_is_away_and_its_frames_are_written_once_in_order(
    alice, monkeypatch
):
    publish, failing = streams.publish, {"left": 3}

    async def flaky(r, owner, position, frame, written=None):
        if frame["type"] == "chat.token" and position >= 1 and failing["left"]:
            failing["left"] -= 1
            raise RedisConnectionError("Redis is restarting")
        await publish(r, owner, position, frame, written)

    monkeypatch.setattr(streams, "publish", flaky)
    answer, _ = await running_answer(alice, ["a", "b", "c", "d", "e"])
    seen = [frame async for frame in follow(answer.message_id)]  # its own follower, from memory
    await asyncio.wait_for(answer.task, 10)
    assert await until(lambda: answer.frames.catching_up is None, 10)
    written = await streams.written(redis_client(), answer.message_id)
    assert tokens(written) == tokens(seen) == [(0, "a"), (1, "b"), (2, "c"), (3, "d"), (4, "e")]
    assert written[-1]["type"] == seen[-1]["type"] == "chat.done"
    stored = await Message.objects.aget(pk=answer.message_id)
    assert (stored.status, stored.content) == ("complete", "abcde")


async def test_a_claim_after_redis_lost_the_owner_record_goes_to_the_writer_that_comes_back():
    r = redis_client()
    owner = await streams.open_stream(r, 7002, user_id=4, lease="slot")
    try:
        await r.delete(keys.chat_answer_owner(7002))  # a Redis restarted without its data
        await streams.publish(r, owner, 0, {"type": "chat.token", "message": 7002, "seq": 0, "text": "x"})
        assert await ownership.beat(r, owner)
        with pytest.raises(ownership.Fenced):
            await streams.publish(
                r, replace(owner, fence=5), 1, {"type": "chat.token", "seq": 1, "text": "y"}
            )
    finally:
        await r.delete(keys.chat_stream(7002), keys.chat_answer_owner(7002))
        await r.zrem(keys.CHAT_ANSWERS, "7002")


async def test_frames_redis_lost_in_a_restart_are_written_again_before_the_next(alice):
    """Redis's append-only file is synced once a second: a SIGKILL can take the last frames with it
    while their writer has heard them written. The restart breaks the writer's connection, so the
    next frame is checked: it finds the gap and fills it first."""
    gate = asyncio.Event()
    answer, _ = await running_answer(alice, ["a", "b", "c", gate, "d", "e"])
    assert await until(lambda: answer.seq == 3, 10)
    r = redis_client()
    assert tokens(await streams.written(r, answer.message_id)) == [(0, "a"), (1, "b"), (2, "c")]
    # Positions 1 and 2 lost: the stream as an append-only file a second old gives it back.
    stream = keys.chat_stream(answer.message_id)
    kept = (await r.xrange(stream))[:2]
    await r.delete(stream)
    for entry_id, fields in kept:
        await r.xadd(stream, fields, id=entry_id)
    await r.client_kill_filter(_type="normal", skipme=True)  # what the restart does to every connection
    gate.set()
    await asyncio.wait_for(answer.task, 10)
    assert await until(lambda: answer.frames.catching_up is None, 10)
    written = await streams.written(r, answer.message_id)
    assert tokens(written) == [(0, "a"), (1, "b"), (2, "c"), (3, "d"), (4, "e")]
    assert written[-1]["type"] == "chat.done"


async def test_an_api_answer_whose_process_died_is_recorded_as_far_as_its_client_received_it(alice, settings):
    settings.CHAT_HEARTBEAT_SECONDS = 0.1
    body = {"model": settings.INFERENCE_MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}]}
    chat = api_protocol.chat_completion_request({**body, "store": True, "stream": True})
    answer = await serving.answer_start(user=alice, chat=chat, engine=FakeEngine(["Part", "ial"], hang=True))
    assert [await answer.events.get() for _ in range(2)] == [
        serving.TextDelta("Part"),
        serving.TextDelta("ial"),
    ]
    r = redis_client()
    owner = keys.chat_answer_owner(answer.owner.answer)
    for _ in range(200):  # a heartbeat after the second token
        if await r.hget(owner, "content") == b"Partial":
            break
        await asyncio.sleep(0.02)
    await died(answer)
    assert await takeover.scan(r, FakeEngine()) == []  # recorded, not continued: its reader is gone
    usage = await UsageDay.objects.aget(user=alice, source="api")
    assert (usage.prompt_tokens, usage.completion_tokens) == (FakeEngine.PROMPT_TOKENS, 2)
    stored = await Message.objects.aget(conversation__owner=alice, role="assistant")
    assert (stored.status, stored.content) == ("interrupted", "Partial")
    assert not await r.zscore(keys.CHAT_ANSWERS, answer.owner.answer)


async def dead_api_answer(user):
    """An API answer of `user` whose process died before any other answer's (the scan's first)."""
    body = {"model": settings.INFERENCE_MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}]}
    chat = api_protocol.chat_completion_request({**body, "store": True})
    answer = await serving.answer_start(user=user, chat=chat, engine=FakeEngine(["Hi"], hang=True))
    assert await answer.events.get() == serving.TextDelta("Hi")
    await died(answer, beat_ago=7200)
    return answer


async def dead_chat_answer(user):
    dead, _ = await running_answer(user, ["One, ", asyncio.Event()], hang=True)
    assert len([f async for f in first_frames(dead.frames_after(-1), 1)]) == 1
    await died(dead)
    return dead


async def test_an_api_answer_of_a_deleted_user_is_let_go_and_the_scan_takes_the_next(alice, bob):
    api = await dead_api_answer(bob)
    dead = await dead_chat_answer(alice)
    await bob.adelete()
    r = redis_client()
    [continued] = await takeover.scan(r, FakeEngine(["two."]))
    await asyncio.wait_for(continued.task, 10)
    assert continued.message_id == dead.message_id
    assert not await r.zscore(keys.CHAT_ANSWERS, api.owner.answer)  # let go, nothing to record
    assert not await UsageDay.objects.filter(source="api").aexists()


async def test_an_answer_whose_takeover_fails_leaves_the_others_taken(alice, bob, monkeypatch):
    def broken(r, claim, engine):
        raise RuntimeError("a taker's own failure")

    monkeypatch.setitem(takeover.TAKERS, "api", broken)
    api = await dead_api_answer(bob)
    dead = await dead_chat_answer(alice)
    r = redis_client()
    [continued] = await takeover.scan(r, FakeEngine(["two."]))
    await asyncio.wait_for(continued.task, 10)
    assert continued.message_id == dead.message_id
    assert await r.zscore(keys.CHAT_ANSWERS, api.owner.answer)  # claimed: a later scan tries it again


async def test_a_frame_whose_write_the_handover_cut_is_written_before_the_answer_is_left_and_shown_only_then(
    alice, monkeypatch
):
    publish, cut = streams.publish, asyncio.Event()

    async def hangs_once_on_the_third(r, owner, position, frame, written=None):
        if position == 2 and not cut.is_set():
            cut.set()
            await asyncio.Event().wait()  # the write is in flight when the handover comes
        await publish(r, owner, position, frame, written)

    monkeypatch.setattr(generation_module.streams, "publish", hangs_once_on_the_third)
    draining, _ = await running_answer(alice, ["One, ", "two, ", "three, "], hang=True)
    follower = draining.frames_after(-1)
    shown = [frame async for frame in first_frames(follower, 2)]
    assert await until(lambda: cut.is_set(), 10)
    # Made, but not written: a follower here is not shown it.
    third = asyncio.ensure_future(anext(follower))
    await asyncio.sleep(0.2)
    assert [f["text"] for f in shown] == ["One, ", "two, "] and not third.done()
    draining.stop("handover")
    await asyncio.gather(draining.task, return_exceptions=True)
    # The successor starts after what the handover wrote, not over it; the follower sees it once written.
    r = redis_client()
    assert tokens(await streams.written(r, draining.message_id)) == [
        (0, "One, "),
        (1, "two, "),
        (2, "three, "),
    ]
    assert (await asyncio.wait_for(third, 10))["text"] == "three, "
    [continued] = await takeover.scan(r, FakeEngine(["four."]))
    await asyncio.wait_for(continued.task, 10)
    stored = await Message.objects.aget(pk=draining.message_id)
    assert (stored.status, stored.content) == ("complete", "One, two, three, four.")
    await follower.aclose()


async def test_a_drain_that_lands_while_an_answer_is_being_stored_does_not_hand_it_over(alice, monkeypatch):
    storing, stored = asyncio.Event(), asyncio.Event()
    finish = Generation.finish

    async def slow_finish(self, r, outcome):
        storing.set()
        await stored.wait()
        await finish(self, r, outcome)

    monkeypatch.setattr(Generation, "finish", slow_finish)
    generation, _ = await running_answer(alice, ["a", "b"])
    await asyncio.wait_for(storing.wait(), 5)
    generation.stop("handover")  # the drain's deadline passes while it is stored
    stored.set()
    await asyncio.wait_for(generation.task, 5)
    message = await Message.objects.aget(pk=generation.message_id)
    assert (message.status, message.content) == ("complete", "ab")
    # Ended, not left for another process to continue past its end.
    assert str(generation.message_id) not in await ownership.stale(redis_client())
    assert await takeover.scan(redis_client(), FakeEngine(["c"])) == []
