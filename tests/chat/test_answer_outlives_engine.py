"""A chat answer outlives its engine (answers.run): when the engine goes away mid-answer, the answer
waits for one to answer again (its readers told why, its deadlines paused) and asks it to carry on
the partial text, so its readers see one gapless answer, stored as shown, with both requests counted.
The engine here injects the faults; tests/topology/test_engine_replicas_end_to_end.py kills real
engines under it."""

import asyncio

import orjson
import pytest
from asgiref.sync import sync_to_async

from chat import streams
from chat.generation import Generation, _quiet, follow
from chat.http_stream import _as_event
from conversations import turns
from conversations.models import Message
from harness.waiting import until
from inference.client import EngineError
from redisconn import client as redis_client
from redisconn import keys
from tests.support.fake_engine import FakeEngine
from usage.models import UsageDay

pytestmark = pytest.mark.django_db(transaction=True)


def lost() -> EngineError:
    return EngineError("The engine is not reachable.", code="engine_unavailable")


class LosingEngine(FakeEngine):
    """Plays one plan a request: a script of deltas, then the failure it ends with (or None: it
    finishes). Past the last plan, every request fails as an engine that is away."""

    def __init__(self, *plans: tuple[list, EngineError | None]):
        super().__init__()
        self.plans = list(plans)

    async def stream_chat(self, request):
        self.script, self.fail_with = self.plans.pop(0) if self.plans else ([], lost())
        async for event in super().stream_chat(request):
            yield event


async def run(user, engine, content="hi") -> tuple[Generation, list[dict]]:
    turn = await sync_to_async(turns.chat_turn_start)(user=user, conversation_id=None, content=content)
    r = redis_client()
    owner = await streams.open_stream(r, turn.assistant_message_id, user_id=user.pk)
    generation = Generation(turn, user_id=user.pk, engine=engine, owner=owner)
    generation.start()
    frames = [frame async for frame in follow(turn.assistant_message_id)]
    await asyncio.wait_for(generation.task, 10)
    return generation, frames


async def test_an_answer_whose_engine_went_away_goes_on_when_it_is_back_as_one_gapless_answer(alice):
    gate = asyncio.Event()
    engine = LosingEngine((["a", "b"], lost()), ([], lost()), ([gate, "c", "d"], None))
    reading = asyncio.ensure_future(run(alice, engine))
    assert await until(lambda: len(engine.requests) >= 3, 10)  # it tries again while the engine is away
    message_id = engine.requests[0].request_id.removeprefix("chat-")
    # A reader in another process, whose stream is quiet meanwhile, is told why.
    notice = await _quiet(redis_client(), int(message_id))
    assert notice["type"] == "chat.notice" and notice["code"] == "engine_waiting"
    gate.set()
    generation, frames = await reading

    kinds = [frame["type"] for frame in frames]
    assert kinds == ["chat.token", "chat.token", "chat.notice", "chat.token", "chat.token", "chat.done"]
    tokens = [frame for frame in frames if frame["type"] == "chat.token"]
    assert [(f["seq"], f["text"]) for f in tokens] == [(0, "a"), (1, "b"), (2, "c"), (3, "d")]
    assert frames[-1]["status"] == "complete" and frames[-1]["content"] == "abcd"
    stored = await Message.objects.aget(pk=generation.message_id)
    assert (stored.status, stored.content) == ("complete", "abcd")

    # The engine that came back carried the partial text on, within what was left of the budget.
    resumed = engine.requests[-1]
    assert resumed.continue_final_message and resumed.messages[-1] == {"role": "assistant", "content": "ab"}
    made = len(await engine.tokenize("ab"))
    assert resumed.max_tokens == engine.requests[0].max_tokens - made
    # Both requests the engine began are counted: two prompts, and every token.
    counted = (2 * FakeEngine.PROMPT_TOKENS, made + 2)
    assert (stored.prompt_tokens, stored.completion_tokens) == counted
    day = await UsageDay.objects.aget(user=alice)
    assert (day.prompt_tokens, day.completion_tokens) == counted
    assert await redis_client().get(keys.chat_notice(generation.message_id)) is None


async def test_an_answer_ends_interrupted_when_no_engine_is_back_in_time(alice, settings):
    settings.CHAT_ENGINE_RESUME_SECONDS = 1.0
    engine = LosingEngine((["a", "b"], lost()))
    generation, frames = await run(alice, engine)
    assert frames[-1]["type"] == "chat.error" and frames[-1]["code"] == "engine_unavailable"
    assert frames[-1]["content"] == "ab"
    assert len(engine.requests) >= 2, "it never tried again"
    stored = await Message.objects.aget(pk=generation.message_id)
    assert (stored.status, stored.content) == ("interrupted", "ab")


async def test_an_engine_unreachable_before_the_first_token_is_told_at_once(alice):
    engine = LosingEngine(([], lost()))
    _, frames = await run(alice, engine)
    assert frames[-1]["code"] == "engine_unavailable" and len(engine.requests) == 1


async def test_an_engine_that_reported_an_error_is_not_waited_for(alice):
    engine = LosingEngine((["a"], EngineError("The engine failed mid-answer: boom")))
    _, frames = await run(alice, engine)
    assert frames[-1]["code"] == "engine_error" and len(engine.requests) == 1


async def test_the_answer_s_deadlines_are_paused_while_it_waits_for_the_engine(alice, settings):
    # The whole answer may take 1.5 s; it waits about 1.5 s (0.5 + 1) for the engine to come back.
    settings.CHAT_TOTAL_TIMEOUT = 1.5
    engine = LosingEngine((["a"], lost()), ([], lost()), (["b"], None))
    generation, frames = await run(alice, engine)
    assert frames[-1]["type"] == "chat.done", frames[-1]
    assert generation._waited >= 1.5, "the answer did not wait as long as its whole deadline"
    assert frames[-1]["content"] == "ab"


async def test_a_notice_reaches_readers_here_and_an_http_stream(alice):
    gate = asyncio.Event()
    engine = LosingEngine((["a"], lost()), ([gate, "b"], None))
    turn = await sync_to_async(turns.chat_turn_start)(user=alice, conversation_id=None, content="hi")
    owner = await streams.open_stream(redis_client(), turn.assistant_message_id, user_id=alice.pk)
    generation = Generation(turn, user_id=alice.pk, engine=engine, owner=owner)
    generation.start()
    seen = []
    async for frame in follow(turn.assistant_message_id):
        seen.append(frame)
        if frame["type"] == "chat.notice":
            event, event_id = _as_event(frame, {"message": turn.assistant_message_id})
            assert event["notice"]["code"] == "engine_waiting" and event_id is None
            kept = await redis_client().get(keys.chat_notice(turn.assistant_message_id))
            assert orjson.loads(kept) == frame
            gate.set()
    assert [f["type"] for f in seen] == ["chat.token", "chat.notice", "chat.token", "chat.done"]
    await generation.task
