"""A web process's bound on the work it has taken and not yet begun to answer.

Every WebSocket handshake and HTTP request costs the process its most expensive part before the
response starts: the session and the user read through its one database thread, a page rendered,
a socket added to its groups. Past what its core does in a few seconds, more of them only wait:
handshakes time out, requests queue for a pooled database connection and fail, and the clients,
trying again, make the queue longer. `PendingBound` counts what is waiting for its response to
start (a request until `http.response.start`, a handshake until it is accepted or closed) and,
past `limit`, refuses at once, before anything is read: `busy` with reason `web_pending` and a
`retry_after` that is the next free slot at the rate the process takes work (`RetrySlots`), so a
storm of refused clients comes back no faster than the process takes them.

A refused request gets its status (429) and `Retry-After`, with a JSON error body (the shape
`json_body` gives for the path) or, for a browser asking for a page, a short page that reloads
itself. A refused handshake is accepted, told in one frame (`socket_frame`) and closed with 4429
(the socket's "try again later"), which the chat page reads as "reconnect after `retry_after`"; with
`tickets`, the frame carries its slot as a ticket (`slot`) and a socket that brings a due one back
(`?slot=`) is taken past the bound, up to TICKET_CEILING times it (httpkit.slottickets). A streaming
response (SSE) counts until its first bytes: what it holds afterwards is the answer's admission's
to bound, not this one's. Likewise a request whose answer admission has taken (`taken()`, which
answers.admission calls) stops counting then: a non-streaming API answer starts its response only
when the answer is done, and admission bounds answers already. Paths in `exempt` (health, metrics)
are never refused.
"""

import html
import json
from collections.abc import Callable
from contextvars import ContextVar
from urllib.parse import parse_qs

from httpkit.errors import Refusal, busy
from httpkit.json import retry_after_header
from httpkit.retryslots import RetrySlots, SharedRate
from httpkit.slottickets import SlotTickets

REASON = "web_pending"
# The socket's close code: 4429, as the product's 4401 mirrors HTTP's 401. RFC 6455's registry has
# 1013 (Try Again Later) for this, but daphne's WebSocket library sends only 1000 and 3000-4999.
TRY_AGAIN_LATER = 4429

# How far past the bound sockets with a due slot ticket are taken, as a multiple of it: far enough for
# a process started cold into a storm, whose first slots came from a rate it cannot keep yet (64 a
# bound: about 2.5 s of a warm process's handshakes), short of a connect's timeout.
TICKET_CEILING = 4

# The running request's way out of the count; tasks and threads the request starts inherit it.
_begun: ContextVar[Callable[[], None] | None] = ContextVar("pending_begun", default=None)


def taken() -> None:
    """The running request's work is bounded elsewhere from now on (its answer was admitted):
    it no longer counts as pending. Nothing outside a counted request."""
    begun = _begun.get()
    if begun is not None:
        begun()


class PendingBound:
    def __init__(
        self,
        app,
        *,
        limit: int,
        retry_slots: RetrySlots,
        socket_frame: Callable[[Refusal], dict],
        json_body: Callable[[str, Refusal], dict],
        on_refused: Callable[[str], None] = lambda reason: None,
        exempt: tuple[str, ...] = (),
        shared_rate: SharedRate | None = None,
        tickets: SlotTickets | None = None,
    ):
        self.app = app
        self.limit = limit  # 0: no bound
        self.retry_slots = retry_slots
        self.socket_frame = socket_frame
        self.json_body = json_body
        self.on_refused = on_refused
        self.exempt = exempt
        self.shared_rate = shared_rate
        self.tickets = tickets
        self.pending = 0  # one event loop a process: no lock

    async def __call__(self, scope, receive, send):
        counted = scope["type"] in ("http", "websocket") and not scope["path"].startswith(self.exempt)
        if not (counted and self.limit):
            return await self.app(scope, receive, send)
        if self.shared_rate is not None:
            self.shared_rate.tick()
        if self.pending >= self.limit and not self._holds_due_ticket(scope):
            self.on_refused(REASON)
            if self.shared_rate is not None:
                await self.shared_rate.read_first()
            refusal = busy(REASON, self.retry_slots.take(self.pending))
            if scope["type"] == "websocket":
                if self.tickets is not None:
                    refusal.extra["slot"] = self.tickets.issue(refusal.retry_after)
                return await self._refuse_socket(refusal, receive, send)
            return await self._refuse_request(scope, refusal, send)
        self.pending += 1
        started, alone, entered = False, self.pending == 1, self.retry_slots.clock()

        def begun() -> None:
            nonlocal started
            if not started:
                started = True
                took = self.retry_slots.clock() - entered if alone and self.pending == 1 else None
                self.retry_slots.left(saturated=2 * self.pending >= self.limit, alone=took)
                self.pending -= 1

        async def watched_send(message):
            if message["type"] in ("http.response.start", "websocket.accept", "websocket.close"):
                begun()
            await send(message)

        token = _begun.set(begun)
        try:
            await self.app(scope, receive, watched_send)
        finally:
            _begun.reset(token)
            begun()

    def _holds_due_ticket(self, scope) -> bool:
        """A socket back at the slot it was given, while the process is under its ceiling."""
        if (
            self.tickets is None
            or scope["type"] != "websocket"
            or self.pending >= TICKET_CEILING * self.limit
        ):
            return False
        slot = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("slot")
        return bool(slot) and self.tickets.due(slot[0])

    async def _refuse_socket(self, refusal: Refusal, receive, send) -> None:
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": json.dumps(self.socket_frame(refusal))})
        await send({"type": "websocket.close", "code": TRY_AGAIN_LATER})

    async def _refuse_request(self, scope, refusal: Refusal, send) -> None:
        wait = retry_after_header(refusal.retry_after)
        accept = dict(scope.get("headers") or ()).get(b"accept", b"").decode("latin-1")
        if wants_page(scope["method"], accept):
            body = busy_page(refusal).encode()
            content_type = b"text/html; charset=utf-8"
        else:
            body = json.dumps(self.json_body(scope["path"], refusal)).encode()
            content_type = b"application/json"
        await send(
            {
                "type": "http.response.start",
                "status": refusal.status,
                "headers": [
                    (b"content-type", content_type),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", wait.encode()),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def wants_page(method: str, accept: str) -> bool:
    """Whether a refused request is a browser's page load, answered with `busy_page` (else JSON)."""
    return method == "GET" and "text/html" in accept


def busy_page(refusal: Refusal) -> str:
    """What a browser asking for a page is shown: the refusal, and a reload after its Retry-After."""
    return PAGE.format(wait=retry_after_header(refusal.retry_after), detail=html.escape(refusal.detail))


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="{wait}">
<title>Busy</title></head>
<body><p>{detail}</p><p>This page tries again in {wait} seconds.</p></body></html>
"""
