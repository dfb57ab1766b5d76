"""`POST /chat/stream`: one chat answer as Server-Sent Events; `GET /chat/stream?message=ID` resumes
one; `POST /chat/stop` stops one. The chat page falls back to these where WebSockets are blocked.

The answer is generated exactly as for the WebSocket: admission, a stored turn, a
`Generation` task publishing frames to the answer's Redis stream (chat.streams).
These views follow that stream and write each frame as an SSE event (docs/store.md):

    data: {"started": true, "conversation": ..., "message": ..., "user_message": ...}
    id: 0
    data: {"token": "..."}                       one per delta; `id` is its seq
    data: {"done": true, "conversation": ..., "message": ..., "usage": {...}, "content": ...,
           "sources": [...]}                  sources: where the question quoted passages
    data: [DONE]

A client that goes away stops reading, not the answer (as over the WebSocket): it resumes
with `GET /chat/stream?message=ID` and `Last-Event-ID` (the last seq it has), and stops an
answer explicitly with `POST /chat/stop`. daphne serves the response from the event loop,
so no thread is held per stream. Failures before the first token are plain JSON errors with
a status; later ones arrive as a `data: {"error": {...}}` event before `[DONE]`.
"""

from collections.abc import AsyncIterator
from contextlib import aclosing

from channels.db import database_sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

import redisconn
from apitokens.auth import auser_for_request, bearer_token
from apitokens.models import Scope
from chat import protocol, streams
from chat.generation import answer_start, answer_stop, follow
from conversations import selectors, turns
from conversations.models import Message
from httpkit.errors import Refusal, not_found, unauthenticated
from httpkit.json import check_csrf, json_view, read_json
from httpkit.sse import event_stream, sse_event
from httpkit.validation import checked
from inference.engine import engine_client


def _as_event(frame: dict, ids: dict) -> tuple[dict, int | None]:
    """A protocol frame as an SSE event, and its id (a token's seq)."""
    if frame["type"] == "chat.token":
        return {"token": frame["text"]}, frame["seq"]
    if frame["type"] == "chat.notice":
        return {"notice": {"code": frame["code"], "detail": frame["detail"]}, **ids}, None
    if frame["type"] == "chat.error":
        fields = {k: frame[k] for k in ("status", "content", "retry_after") if k in frame}
        return {"error": {"code": frame["code"], "detail": frame["detail"]}, **ids, **fields}, None
    return {
        "done": True,
        **ids,
        "status": frame["status"],
        "finish_reason": frame["finish_reason"],
        "usage": frame["usage"],
        "ttft_ms": frame["ttft_ms"],
        "note": frame.get("note", ""),
        "content": frame.get("content", ""),
        **({"sources": frame["sources"]} if "sources" in frame else {}),
    }, None


async def _events(first: dict | None, frames: AsyncIterator[dict], ids: dict) -> AsyncIterator[bytes]:
    """The answer's frames as SSE, from `first` (the one already read) to the closing one."""
    try:
        frame = first if first is not None else await anext(frames, None)
        while frame is not None:
            yield sse_event(*_as_event(frame, ids))
            if frame["type"] in protocol.TERMINAL:
                break
            frame = await anext(frames, None)
        yield sse_event("[DONE]")
    finally:
        # The client went away, or the answer ended: stop following. The answer itself goes on
        # until it ends or is stopped; the client resumes it with Last-Event-ID.
        await frames.aclose()


def _turn_request(data: dict) -> tuple:
    """What kind of turn the body asks for: (start_turn, its arguments)."""
    body = protocol.stream_body(data)
    if isinstance(body, protocol.StreamMessages):
        # Checked as the conversation's settings are, by the store.
        sampling = {name: data[name] for name in ("temperature", "max_tokens") if name in data}
        messages = [message.model_dump() for message in body.messages]
        return turns.chat_turn_from_messages, {"messages": messages, "settings_data": sampling}
    if isinstance(body, protocol.StreamRegenerate):
        return turns.chat_turn_regenerate, {"message_id": body.regenerate}
    if isinstance(body, protocol.StreamContinue):
        return turns.chat_turn_continue, {"message_id": body.message}
    if isinstance(body, protocol.StreamEdit):
        return turns.chat_turn_edit, {"message_id": body.edit, "content": body.prompt}
    return turns.chat_turn_start, {
        "content": body.prompt,
        "conversation_id": body.conversation,
        "parent_id": body.parent,
    }


async def _writer(request: HttpRequest):
    """The user of a request that changes something: by token (chat scope), or by session with CSRF."""
    user = await auser_for_request(request, Scope.CHAT)
    if user is None:
        raise unauthenticated()
    # auser_for_request never falls back to the session when a bearer header is sent.
    check_csrf(request, by_token=bearer_token(request) is not None)
    return user


@csrf_exempt
@json_view("POST", "GET")
async def chat_stream(request: HttpRequest) -> HttpResponse:
    """POST: store the prompt, generate the answer, and stream it. GET: resume an answer."""
    if request.method == "GET":
        return await _resume(request)
    user = await _writer(request)
    # JSON may spell a character in up to six bytes (\\uXXXX); a message list holds many.
    data = read_json(request, max_bytes=settings.CHAT_MAX_CONTENT_CHARS * 6 * 8 + 1024)
    start_turn, arguments = _turn_request(data)
    generation = await answer_start(user=user, engine=engine_client(), start_turn=start_turn, **arguments)
    frames = follow(generation.message_id)
    try:
        first = await anext(frames)
    except BaseException:
        await frames.aclose()
        raise
    if first["type"] == "chat.error":
        await frames.aclose()
        raise Refusal(first["code"], first["detail"], retry_after=first.get("retry_after"))
    turn = generation.turn
    ids = {"conversation": turn.conversation_id, "message": turn.assistant_message_id}

    async def events() -> AsyncIterator[bytes]:
        yield sse_event({"started": True, **ids, "user_message": turn.user_message_id})
        async with aclosing(_events(first, frames, {**ids, "user_message": turn.user_message_id})) as rest:
            async for event in rest:
                yield event

    return event_stream(events())


def _last_seen(request: HttpRequest) -> int:
    """The seq to resume after: Last-Event-ID (as EventSource sends it) or `after`; -1 for all."""
    raw = request.headers.get("Last-Event-ID") or request.GET.get("after") or "-1"
    try:
        after = int(raw)
    except ValueError:
        raise Refusal("invalid_field", "Last-Event-ID / 'after' must be a token seq") from None
    if after < -1:
        raise Refusal("invalid_field", "Last-Event-ID / 'after' must be a token seq")
    return after


async def _resume(request: HttpRequest) -> HttpResponse:
    user = await auser_for_request(request, Scope.CHAT)
    if user is None:
        raise unauthenticated()
    raw = request.GET.get("message", "")
    if not raw.isdigit() or int(raw) < 1:
        raise Refusal("invalid_field", "'message' must be a positive integer id")
    message_id, after = int(raw), _last_seen(request)
    message = await database_sync_to_async(selectors.message_get)(user=user, message_id=message_id)
    if message is None or message.role != Message.Role.ASSISTANT:
        raise not_found("message")
    ids = {"conversation": message.conversation_id, "message": message.pk, "user_message": message.parent_id}
    r = redisconn.client()
    if message.status == Message.Status.GENERATING or await streams.exists(r, message_id):
        return event_stream(_events(None, follow(message_id, after), ids))

    async def ended() -> AsyncIterator[bytes]:
        # Its stream is gone: the stored answer, whole, as its closing event.
        yield sse_event(_as_event(protocol.closing(message), ids)[0])
        yield sse_event("[DONE]")

    return event_stream(ended())


@csrf_exempt
@json_view("POST")
async def chat_stop(request: HttpRequest) -> JsonResponse:
    """Stop one of the user's answers, wherever it runs: `{"message": ID}`."""
    user = await _writer(request)
    message_id = checked(protocol.MessageRef, read_json(request, max_bytes=1024)).message
    await answer_stop(user=user, message_id=message_id)
    return JsonResponse({"stopping": message_id}, status=202)
