"""What the engine client puts on the wire, read by a server that records each request and
answers with a minimal OpenAI stream (the real engine's replies are tested end to end)."""

import asyncio
import json

import pytest

from inference import client as client_module
from inference.client import ChatRequest, ChunkReader, Completion, EngineError, OpenAIEngineClient, TextDelta

CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}


async def recording_server() -> tuple[asyncio.Server, str, list[tuple[dict, dict]]]:
    """(server, its URL, each request's (headers, JSON body))."""
    seen: list[tuple[dict, dict]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        headers = dict(line.split(": ", 1) for line in head[1:] if ": " in line)
        headers = {name.lower(): value for name, value in headers.items()}
        body = json.loads(await reader.readexactly(int(headers["content-length"])))
        seen.append((headers, body))
        events = [
            {**CHUNK, "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]},
            {**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
        payload = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
            + f"Content-Length: {len(payload)}\r\n\r\n{payload}".encode()
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", seen


async def test_it_sends_the_engines_api_key_on_every_request():
    server, url, seen = await recording_server()
    client = OpenAIEngineClient(url, "m", connect_timeout=2, token_timeout=10, api_key="engine-key")
    try:
        request = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0)
        [event async for event in client.stream_chat(request)]
    finally:
        await client.aclose()
        server.close()
    [(headers, body)] = seen
    assert headers["authorization"] == "Bearer engine-key"
    # Usage on every chunk: the first tells the prompt's size whenever the answer ends.
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


async def test_it_sends_the_conversation_as_the_routers_session_key_with_the_request_id():
    server, url, seen = await recording_server()
    client = OpenAIEngineClient(url, "m", connect_timeout=2, token_timeout=10)
    try:
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
        alone = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0)
        [event async for event in client.stream_chat(alone)]
    finally:
        await client.aclose()
        server.close()
    assert events[0] == TextDelta("hi") and isinstance(events[-1], Completion)
    (headers, body), (plain_headers, _) = seen
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
    payload = f"data: {json.dumps({**CHUNK, 'choices': [{'index': 0, 'delta': {'content': 'hi'}}]})}\n\n"
    payload += "data: [DONE]\n\n"
    connections = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        idle_since = None
        loop = asyncio.get_running_loop()
        while head := await reader.readuntil(b"\r\n\r\n"):
            if idle_since is not None and loop.time() - idle_since > keepalive:
                writer.close()  # closing it for idleness just as the request arrives
                return
            length = next(
                int(line.split(b": ")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                + f"Content-Length: {len(payload)}\r\n\r\n{payload}".encode()
            )
            await writer.drain()
            idle_since = loop.time()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    engine = OpenAIEngineClient(
        f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", "m", connect_timeout=2, token_timeout=10
    )
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0)
    try:
        first = [event async for event in engine.stream_chat(request)]
        await asyncio.sleep(2 * keepalive)
        second = [event async for event in engine.stream_chat(request)]
    finally:
        await engine.aclose()
        server.close()
    assert first[0] == second[0] == TextDelta("hi")
    assert len(connections) == 2


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


async def serving(reply: bytes) -> tuple[asyncio.Server, str]:
    """A server that answers every request with `reply` (status line, headers and body), then closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        length = next(int(line.split(": ")[1]) for line in head if line.lower().startswith("content-length"))
        await reader.readexactly(length)
        writer.write(reply)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def reply(status: str, body: bytes, *, kind: str = "application/json", length: int | None = None) -> bytes:
    length = len(body) if length is None else length
    return f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {length}\r\n\r\n".encode() + body


@pytest.mark.parametrize(
    ("answer", "code", "detail"),
    [
        (
            reply("400 Bad Request", b'{"error": {"message": "too long", "code": 400}}'),
            "engine_rejected",
            "too long",
        ),
        (
            reply("500 Internal Server Error", b'{"object": "error", "message": "boom"}'),
            "engine_error",
            "(500): boom",
        ),
        (
            reply(
                "200 OK", chunk("a") + b'data: {"error": {"message": "oops"}}\n\n', kind="text/event-stream"
            ),
            "engine_error",
            "mid-answer: oops",
        ),
        # The engine died mid-answer: the body ends short of its length.
        (
            reply("200 OK", chunk("a"), kind="text/event-stream", length=4096),
            "engine_unavailable",
            "not reachable",
        ),
    ],
    ids=["400", "500", "error-event", "cut-short"],
)
async def test_it_maps_the_engines_failures_to_stable_codes(answer, code, detail):
    server, url = await serving(answer)
    client = OpenAIEngineClient(url, "m", connect_timeout=2, token_timeout=10)
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0)
    try:
        with pytest.raises(EngineError) as failure:
            [event async for event in client.stream_chat(request)]
    finally:
        await client.aclose()
        server.close()
    assert failure.value.code == code and detail in failure.value.detail


async def test_it_gives_up_on_an_engine_silent_past_the_token_timeout():
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        writer.write(b"%x\r\n%s\r\n" % (len(chunk("a")), chunk("a")))
        await writer.drain()
        await asyncio.sleep(30)  # then nothing

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    client = OpenAIEngineClient(url, "m", connect_timeout=2, token_timeout=0.5)
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0)
    seen = []
    try:
        with pytest.raises(EngineError) as failure:
            async for event in client.stream_chat(request):
                seen.append(event)
    finally:
        await client.aclose()
        server.close()
    assert seen == [TextDelta("a")] and failure.value.code == "engine_timeout"
