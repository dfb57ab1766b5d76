"""A busy web process sends an answer's tokens together, a frame every CHAT_BUSY_FRAME_SECONDS at most,
and a process that keeps up a frame a token (answers.pacing); the text shown and stored is the same,
the seqs gapless. The real engine client reads the stand-in engine over HTTP, so the tokens made
while an answer waits gather where they do in production: in the engine stream's buffer."""

import asyncio
import dataclasses
import time

import pytest
from asgiref.sync import sync_to_async

from answers import pacing
from chat import streams
from chat.generation import Generation
from conversations import turns
from conversations.models import Message
from harness.stand_in_engine import WORD, StandInEngine, serving
from inference.client import OpenAIEngineClient
from redisconn import client as redis_client

pytestmark = pytest.mark.django_db(transaction=True)

TOKENS = 60
INTERVAL = 0.005  # the engine's pace: 60 tokens in 0.3 s


async def followed_frames(user, engine_url: str) -> tuple[list[dict], list[float], Message]:
    """The frames a follower in the answer's process is shown, when each arrived, and the stored row."""
    turn = await sync_to_async(turns.chat_turn_start)(user=user, conversation_id=None, content="count")
    turn = dataclasses.replace(turn, max_tokens=TOKENS)
    owner = await streams.open_stream(redis_client(), turn.assistant_message_id, user_id=user.pk)
    engine = OpenAIEngineClient(engine_url, "m", connect_timeout=2, token_timeout=10)
    try:
        generation = Generation(turn, user_id=user.pk, engine=engine, owner=owner)
        generation.start()
        frames, times = [], []
        async for frame in generation.frames_after(-1):
            frames.append(frame)
            times.append(time.monotonic())
        await generation.task
    finally:
        await engine.aclose()
    return frames, times, await Message.objects.aget(pk=turn.assistant_message_id)


@pytest.mark.parametrize("busy", [True, False])
async def test_a_busy_process_sends_the_tokens_made_meanwhile_in_one_frame(alice, settings, busy):
    settings.CHAT_BUSY_FRAME_SECONDS = 0.05
    # A lag of 0 or more is busy: every loop; 10 s is never reached here.
    settings.CHAT_BUSY_LAG_SECONDS = 0.0 if busy else 10.0
    with serving(StandInEngine(interval=INTERVAL)) as url:
        frames, times, message = await followed_frames(alice, url)

    tokens = [frame for frame in frames if frame["type"] == "chat.token"]
    assert frames[-1]["type"] == "chat.done" and frames[-1]["content"] == WORD * TOKENS
    assert [frame["seq"] for frame in tokens] == list(range(len(tokens)))
    assert "".join(frame["text"] for frame in tokens) == message.content == WORD * TOKENS
    if busy:
        # 0.3 s of tokens at a frame every 50 ms at most: the first alone, then about 6 of ~10 tokens.
        assert 2 <= len(tokens) <= 10, len(tokens)
        gaps = [b - a for a, b in zip(times[1 : len(tokens)], times[2 : len(tokens)], strict=False)]
        assert min(gaps) >= 0.04, gaps
        assert len(tokens[0]["text"]) == len(WORD)  # the first token does not wait
    else:
        # Each token in a frame of its own, or two where the event loop was slow to read one.
        assert len(tokens) >= TOKENS * 2 // 3, len(tokens)


async def test_the_loop_is_busy_while_callbacks_run_late_and_idle_again_after(settings):
    settings.CHAT_BUSY_LAG_SECONDS = 0.005
    lag = pacing.lag()
    assert not lag.busy()
    blocked_until = time.monotonic() + 0.5
    while time.monotonic() < blocked_until:  # callbacks that hold the loop 20 ms each
        time.sleep(0.02)  # noqa: ASYNC251 - the point: a callback that holds the loop
        await asyncio.sleep(0)
    assert lag.busy() and lag.seconds >= 0.005
    await asyncio.sleep(0.5)
    assert not lag.busy()


@pytest.mark.parametrize("busy", [True, False])
async def test_an_answer_started_while_busy_asks_for_several_tokens_an_engine_event(alice, settings, busy):
    settings.CHAT_BUSY_STREAM_INTERVAL = 4
    settings.CHAT_BUSY_LAG_SECONDS = 0.0 if busy else 10.0
    engine = StandInEngine(interval=INTERVAL, record=True)
    with serving(engine) as url:
        frames, _, message = await followed_frames(alice, url)

    ((_, body),) = engine.requests
    tokens = [frame for frame in frames if frame["type"] == "chat.token"]
    assert [frame["seq"] for frame in tokens] == list(range(len(tokens)))
    assert "".join(frame["text"] for frame in tokens) == message.content == WORD * TOKENS
    if busy:
        assert body["stream_interval"] == 4
        # The first token at once, then events of 4: 16 at most, fewer where the loop read two together.
        assert len(tokens[0]["text"]) == len(WORD)
        assert len(tokens) <= 1 + -(-(TOKENS - 1) // 4), len(tokens)
        assert all(len(frame["text"]) % (4 * len(WORD)) == 0 for frame in tokens[1:-1])
    else:
        assert "stream_interval" not in body
        assert len(tokens) >= TOKENS * 2 // 3, len(tokens)
