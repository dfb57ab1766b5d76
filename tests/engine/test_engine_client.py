"""What the engine client puts on the wire and makes of each failure, against the stand-in engine
(the real engine's replies are tested end to end)."""

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import httpx
import pytest
from django.conf import settings

from harness.stand_in_engine import CUT, STALL, ErrorEvent, Refusal, StandInEngine, serving
from inference import client as client_module
from inference.client import ChatRequest, ChunkReader, Completion, EngineError, OpenAIEngineClient, TextDelta

CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
HI = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0)


@asynccontextmanager
async def client_of(
    engine: StandInEngine, *, token_timeout: float = 10, api_key: str = ""
) -> AsyncIterator[OpenAIEngineClient]:
    """The product's engine client of `engine`, served meanwhile."""
    with serving(engine) as url:
        client = OpenAIEngineClient(url, "m", connect_timeout=2, token_timeout=token_timeout, api_key=api_key)
        try:
            yield client
        finally:
            await client.aclose()


async def test_it_sends_the_engines_api_key_on_every_request():
    engine = StandInEngine(text="hi", record=True)
    async with client_of(engine, api_key="engine-key") as client:
        [event async for event in client.stream_chat(HI)]
    [(headers, body)] = engine.requests
    assert headers["authorization"] == "Bearer engine-key"
    # Usage on every chunk: the first tells the prompt's size whenever the answer ends.
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


async def test_it_sends_the_conversation_as_the_routers_session_key_with_the_request_id():
    engine = StandInEngine(text="hi", record=True)
    async with client_of(engine) as client:
        request = ChatRequest(
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=8,
            temperature=0,
            priority=3,
            cache_salt="salt",
            request_id="chat-9",
            affinity="conversation-7",
        )
        events = [event async for event in client.stream_chat(request)]
        [event async for event in client.stream_chat(HI)]
    assert events[0].text == "hi" and isinstance(events[-1], Completion)
    (headers, body), (plain_headers, _) = engine.requests
    assert (headers["x-session-id"], headers["x-request-id"]) == ("conversation-7", "chat-9")
    assert (body["priority"], body["cache_salt"]) == (3, "salt")
    # Without an affinity the router may send the request anywhere.
    assert "x-session-id" not in plain_headers and "x-request-id" not in plain_headers


async def test_it_never_sends_a_request_on_a_connection_the_engine_may_be_closing(monkeypatch):
    """An engine closes a connection idle past its keep-alive (vLLM: 5 s), and a request that
    meets the close fails. This one closes any connection that a request reaches after more
    than the client's own keep-alive of idleness: the client must have opened a new one."""
    keepalive = 0.3  # the client's, and the idleness past which this engine closes a connection
    monkeypatch.setattr(client_module, "KEEPALIVE_SECONDS", keepalive)
    engine = StandInEngine(text="hi", close_idle_after=keepalive)
    async with client_of(engine) as client:
        first = [event async for event in client.stream_chat(HI)]
        await asyncio.sleep(2 * keepalive)
        second = [event async for event in client.stream_chat(HI)]
    assert first[0].text == second[0].text == "hi"
    assert engine.connections == 2


async def test_it_asks_for_a_whole_answer_in_one_reply_where_nobody_reads_it_as_it_is_made():
    engine = StandInEngine(text="hello there", chunk=3, record=True)
    async with client_of(engine) as client:
        events = [event async for event in client.stream_chat(replace(HI, whole=True))]
    [(headers, body)] = engine.requests
    assert body["stream"] is False and "stream_options" not in body
    assert headers["accept"] == "application/json"
    assert events == [
        TextDelta("hello there", prompt_tokens=16),
        Completion("stop", prompt_tokens=16, completion_tokens=4),
    ]


def chunk(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {"content": content} if content is not None else {}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({**CHUNK, "choices": [choice]}).encode() + b"\n\n"


def test_the_reader_joins_the_deltas_one_read_brings_and_keeps_an_event_split_across_reads():
    reader = ChunkReader()
    assert reader.feed(chunk("a") + chunk("b") + chunk("c")[:20]) == "ab"
    assert reader.feed(chunk("c")[20:] + b": a comment\n\n") == "c"
    # One event in several data lines, CRLF line ends, no space after the colon.
    assert (
        reader.feed(
            b'data:{"choices": [{"delta": {"content": "d"},\r\ndata: "finish_reason": "length"}]}\r\n\r\n'
        )
        == "d"
    )
    usage = {"prompt_tokens": 5, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 2}}
    assert (
        reader.feed(b"data: " + json.dumps({**CHUNK, "choices": [], "usage": usage}).encode() + b"\n\n") == ""
    )
    assert reader.feed(b"data: [DONE]\n\n") == "" and reader.done
    assert reader.completion() == Completion("length", prompt_tokens=5, cached_tokens=2, completion_tokens=4)


@pytest.mark.parametrize(
    ("engine", "code", "detail"),
    [
        (
            StandInEngine(fault=Refusal(400, {"error": {"message": "too long", "code": 400}})),
            "engine_rejected",
            "too long",
        ),
        (
            StandInEngine(fault=Refusal(500, {"object": "error", "message": "boom"})),
            "engine_error",
            "(500): boom",
        ),
        (
            StandInEngine(text="a", fault=ErrorEvent({"error": {"message": "oops"}})),
            "engine_error",
            "mid-answer: oops",
        ),
        # The engine died mid-answer: the stream ends short of its end.
        (StandInEngine(text="a", fault=CUT), "engine_unavailable", "not reachable"),
    ],
    ids=["400", "500", "error-event", "cut-short"],
)
async def test_it_maps_the_engines_failures_to_stable_codes(engine, code, detail):
    async with client_of(engine) as client:
        with pytest.raises(EngineError) as failure:
            [event async for event in client.stream_chat(HI)]
    assert failure.value.code == code and detail in failure.value.detail


@pytest.mark.parametrize(
    ("engine", "code", "detail"),
    [
        (StandInEngine(fault=Refusal(400, {"error": {"message": "long"}})), "engine_rejected", "long"),
        (StandInEngine(text="a", fault=ErrorEvent({"error": {"message": "oops"}})), "engine_error", "oops"),
        (StandInEngine(text="a", fault=CUT), "engine_unavailable", "not reachable"),
    ],
    ids=["400", "500", "cut-short"],
)
async def test_it_maps_the_engines_failures_of_a_whole_answer_to_the_same_codes(engine, code, detail):
    async with client_of(engine) as client:
        with pytest.raises(EngineError) as failure:
            [event async for event in client.stream_chat(replace(HI, whole=True))]
    assert failure.value.code == code and detail in failure.value.detail


async def test_it_gives_up_on_an_engine_silent_past_the_token_timeout():
    seen = []
    async with client_of(StandInEngine(text="a", fault=STALL), token_timeout=0.5) as client:
        with pytest.raises(EngineError) as failure:
            async for event in client.stream_chat(HI):
                seen.append((event, asyncio.get_running_loop().time()))
        silent = asyncio.get_running_loop().time() - seen[-1][1]
    assert [event for event, _ in seen] == [TextDelta("a")] and failure.value.code == "engine_timeout"
    # Within an eighth of the limit past it (the limit's checks), and the scheduler's slack.
    assert 0.5 <= silent < 0.5 * 9 / 8 + 0.25


async def test_the_token_timeout_counts_from_the_last_chunk_not_the_answers_start():
    # 12 tokens 0.05 s apart: 0.55 s in all, more than twice the limit, never 0.25 s without one.
    engine = StandInEngine(text=" ".join("abcdefghijkl") + " ", chunk=2, interval=0.05)
    async with client_of(engine, token_timeout=0.25) as client:
        events = [event async for event in client.stream_chat(replace(HI, max_tokens=12))]
    deltas = [event.text for event in events if isinstance(event, TextDelta)]
    assert len(deltas) == 12 and "".join(deltas) == " ".join("abcdefghijkl") + " "
    assert isinstance(events[-1], Completion)


async def test_vllm_sends_an_answer_in_the_events_of_the_stream_interval_asked(engine_url):
    """The real engine takes the stream_interval the product asks of it while busy (answers.pacing):
    the first token at once, then an event every 8; the client's answer and counts are the same."""
    model = settings.INFERENCE_MODEL_NAME
    engine = OpenAIEngineClient(engine_url, model, connect_timeout=5, token_timeout=120)
    question = [{"role": "user", "content": "Count from one to one hundred in words."}]
    asked = ChatRequest(messages=question, max_tokens=25, min_tokens=25, temperature=0, stream_interval=8)
    try:
        events = []
        async with httpx.AsyncClient(timeout=120) as http:
            body = engine._chat_body(asked)
            assert body["stream_interval"] == 8
            async with http.stream("POST", f"{engine_url}/v1/chat/completions", json=body) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        choices = json.loads(line[6:])["choices"]
                        if choices and choices[0]["delta"].get("content"):
                            events.append(choices[0]["delta"]["content"])
        # 25 tokens: 1, 8, 8, 8 (vLLM holds the rest of an interval until the answer ends).
        assert 2 <= len(events) <= 5, events
        answer = [event async for event in engine.stream_chat(asked)]
    finally:
        await engine.aclose()
    assert "".join(e.text for e in answer if isinstance(e, TextDelta)) == "".join(events)
    assert answer[-1].completion_tokens == 25
