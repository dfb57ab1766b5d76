"""`POST /chat/stream`: one chat answer as Server-Sent Events.

The answer is generated exactly as for the WebSocket: admission, a stored turn, a
`Generation` task publishing frames to the answer's Redis stream (frontend.streams).
This view follows that stream and writes each frame as an SSE event:

    data: {"token": "..."}                       one per delta
    data: {"done": true, "conversation": ..., "message": ..., "usage": {...}, ...}
    data: [DONE]

daphne serves the response from the event loop, so no thread is held per stream.
An HTTP client cannot resume, so one that goes away stops its answer (stored as stopped).
Failures before the first token are plain JSON errors with a status (docs/store.md);
later ones arrive as a `data: {"error": {...}}` event before `[DONE]`.
"""

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing

from django.conf import settings
from django.http import HttpRequest, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

import redisconn
from apitokens.auth import auser_for_request, bearer_token
from apitokens.models import Scope
from frontend import protocol, services, streams
from frontend.generation import Generation, answer_start
from frontend.http_json import ApiError, check_csrf, json_errors, read_json, refused, unauthenticated
from frontend.protocol import Refusal
from inference.engine import engine_client


class EventStreamResponse(StreamingHttpResponse):
    """An SSE response whose event iterator is closed the moment the response is.

    When the client goes away, Django closes the response's outer iterator, but not the
    iterator wrapped inside it: that one is left to the garbage collector, which may
    finalize it seconds later or only at its next cycle collection, so the answer ran
    on for nobody. Iterating ours under `aclosing` closes it, and its `finally` stops the
    answer, at once."""

    async def __aiter__(self):
        async with aclosing(self._iterator) as parts:
            async for part in parts:
                yield self.make_bytes(part)


def sse_event(payload: dict | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def _as_event(frame: dict, turn: services.Turn) -> dict:
    ids = {"conversation": turn.conversation_id, "message": turn.assistant_message_id}
    if frame["type"] == "chat.token":
        return {"token": frame["text"]}
    if frame["type"] == "chat.error":
        return {"error": {"code": frame["code"], "detail": frame["detail"]}, **ids}
    return {
        "done": True,
        **ids,
        "user_message": turn.user_message_id,
        "status": frame["status"],
        "finish_reason": frame["finish_reason"],
        "usage": frame["usage"],
        "ttft_ms": frame["ttft_ms"],
        "note": frame.get("note", ""),
    }


def _check_request(data: dict) -> tuple[str, int | None]:
    prompt = protocol.content_field(data, "prompt")
    return prompt, protocol.id_field(data, "conversation", nullable=True, required=False)


async def _events(first: dict, frames: AsyncIterator[dict], generation: Generation) -> AsyncIterator[bytes]:
    try:
        frame = first
        while True:
            yield sse_event(_as_event(frame, generation.turn))
            if frame["type"] in protocol.TERMINAL:
                break
            frame = await anext(frames)
        yield sse_event("[DONE]")
    finally:
        # Django cancels this iterator when the client disconnects; the request ends
        # once the stopped answer is stored.
        if not generation.task.done():
            generation.stop("disconnect")
        await asyncio.wait([generation.task])
        await frames.aclose()


@csrf_exempt
@json_errors
async def chat_stream(request: HttpRequest) -> StreamingHttpResponse:
    """Store the prompt, generate the answer, and stream it as SSE."""
    if request.method != "POST":
        raise ApiError(405, "method_not_allowed", "use POST")
    user = await auser_for_request(request, Scope.CHAT)
    if user is None:
        raise unauthenticated()
    # auser_for_request never falls back to the session when a bearer header is sent.
    check_csrf(request, by_token=bearer_token(request) is not None)
    # JSON may spell a character in up to six bytes (\\uXXXX).
    prompt, conversation_id = _check_request(
        read_json(request, max_bytes=settings.CHAT_MAX_CONTENT_CHARS * 6 + 1024)
    )
    generation = await answer_start(
        user=user,
        engine=engine_client(),
        start_turn=services.chat_turn_start,
        conversation_id=conversation_id,
        content=prompt,
    )
    frames = streams.follow(redisconn.client(), generation.message_id)
    try:
        first = await anext(frames)
    except BaseException:
        generation.stop("disconnect")
        await frames.aclose()
        raise
    if first["type"] == "chat.error":
        await frames.aclose()
        raise refused(Refusal(first["code"], first["detail"], retry_after=first.get("retry_after")))
    return EventStreamResponse(
        _events(first, frames, generation),
        content_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
