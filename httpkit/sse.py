"""Server-Sent Events responses: what the chat's `/chat/stream` and the OpenAI-compatible API's
streamed completions both send."""

import json
from collections.abc import AsyncIterator
from contextlib import aclosing

from django.http import StreamingHttpResponse


class EventStreamResponse(StreamingHttpResponse):
    """An SSE response whose event iterator is closed the moment the response is.

    When the client goes away, Django closes the response's outer iterator, but not the
    iterator wrapped inside it: that one is left to the garbage collector, which may
    finalize it seconds later or only at its next cycle collection. Iterating ours under
    `aclosing` closes it, and its `finally` lets go of what it holds (an answer's stream,
    an engine request) at once."""

    async def __aiter__(self):
        async with aclosing(self._iterator) as parts:
            async for part in parts:
                yield self.make_bytes(part)


def sse_event(payload: dict | str, event_id: int | None = None) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}data: {data}\n\n".encode()


def event_stream(events: AsyncIterator[bytes]) -> EventStreamResponse:
    """`events` as a response no proxy or browser holds back: uncached, unbuffered."""
    return EventStreamResponse(
        events,
        content_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
