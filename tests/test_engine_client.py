"""What the engine client puts on the wire, read by a server that records each request and
answers with a minimal OpenAI stream (the real engine's replies are tested end to end)."""

import asyncio
import json

from inference.client import ChatRequest, Completion, OpenAIEngineClient, TextDelta

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
