"""Every error code of every surface, in one table (docs/protocol.md, read against it by a test):
the HTTP status it is answered with, and what the OpenAI-compatible API calls it.

A code names one meaning wherever it is met: the WebSocket sends it in `chat.error`, the JSON
endpoints in `{"error": {"code", "detail"}}` with its status, and the OpenAI-compatible API in
OpenAI's shape with the type (and, where OpenAI has its own name, the code) of its row.
"""

from typing import NamedTuple

INVALID = "invalid_request_error"
UNAVAILABLE = "service_unavailable_error"


class ErrorCode(NamedTuple):
    status: int
    openai_type: str
    # OpenAI's own name for the same refusal, where clients of OpenAI know one; else the code itself.
    openai_code: str | None = None


ERRORS: dict[str, ErrorCode] = {
    "binary_frame": ErrorCode(400, INVALID),
    "invalid_json": ErrorCode(400, INVALID),
    "invalid_frame": ErrorCode(400, INVALID),
    "unknown_type": ErrorCode(400, INVALID),
    "invalid_field": ErrorCode(400, INVALID),
    "unsupported_field": ErrorCode(400, INVALID, "unsupported_parameter"),
    "prompt_too_long": ErrorCode(400, INVALID),
    "engine_rejected": ErrorCode(400, INVALID),
    "unauthenticated": ErrorCode(401, "authentication_error", "invalid_api_key"),
    "forbidden": ErrorCode(403, "permission_error"),
    "csrf_failed": ErrorCode(403, "permission_error"),
    "not_found": ErrorCode(404, INVALID),
    "model_not_found": ErrorCode(404, INVALID),
    "method_not_allowed": ErrorCode(405, INVALID),
    "not_running": ErrorCode(409, INVALID),
    "not_continuable": ErrorCode(409, INVALID),
    "conversation_busy": ErrorCode(409, INVALID),
    "too_large": ErrorCode(413, INVALID),
    "busy": ErrorCode(429, "rate_limit_error"),
    "quota_exceeded": ErrorCode(429, "rate_limit_error"),
    "internal_error": ErrorCode(500, "server_error"),
    "timeout_first_token": ErrorCode(503, UNAVAILABLE),
    "timeout_between_tokens": ErrorCode(503, UNAVAILABLE),
    "timeout_total": ErrorCode(503, UNAVAILABLE),
    "interrupted": ErrorCode(503, UNAVAILABLE),
    "redis_unavailable": ErrorCode(503, UNAVAILABLE),
    "history_unavailable": ErrorCode(503, UNAVAILABLE),
    "stream_unavailable": ErrorCode(503, UNAVAILABLE),
    "engine_unavailable": ErrorCode(503, UNAVAILABLE),
    "engine_timeout": ErrorCode(503, UNAVAILABLE),
    "engine_error": ErrorCode(503, UNAVAILABLE),
}


class Refusal(Exception):
    """A request that is not carried out, as the client is told: a code from ERRORS, a sentence
    for people, and the fields the code documents (`retry_after`, `reason`, `param`...)."""

    def __init__(self, code: str, detail: str, **extra):
        if code not in ERRORS:
            raise ValueError(f"undocumented error code {code!r}")
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.extra = extra

    @property
    def status(self) -> int:
        """The HTTP status of this refusal."""
        return ERRORS[self.code].status

    @property
    def retry_after(self) -> float | None:
        """Seconds after which trying again may succeed, where the refusal says so."""
        return self.extra.get("retry_after")


def not_found(what: str) -> Refusal:
    """What does not exist, or is not this user's: the two read the same."""
    return Refusal("not_found", f"no such {what}")


def unauthenticated(
    detail: str = "log in, or send 'Authorization: Bearer TOKEN' with the needed scope",
) -> Refusal:
    return Refusal("unauthenticated", detail)


BUSY_DETAILS = {
    "socket_rate": "Too many requests on this connection; slow down.",
    "user_sockets": "Too many chat tabs or windows open; close one.",
    "user_changes": "Too many changes to conversations at once; try again shortly.",
    "draining": "This server is restarting; try again in a moment.",
    "web_pending": "This server is busy; try again in a moment.",
    "user_document_reads": "Another of your documents is being read; attach this one when it is done.",
    "document_reads": "Many documents are being read right now; try again shortly.",
    "knowledge_uploads": "Too many uploads to collections at once; try again shortly.",
    "knowledge_searches": "Too many searches of collections at once; try again shortly.",
    "embeddings": "The embedding engine has many texts waiting; try again shortly.",
}


def busy(reason: str, retry_after: float) -> Refusal:
    """A bound's refusal (admission control, rates): `reason` says which bound was reached."""
    return Refusal(
        "busy",
        BUSY_DETAILS.get(reason, "Too many answers at once; try again shortly."),
        reason=reason,
        retry_after=round(retry_after, 1),
    )
