"""The chat protocol (docs/protocol.md): every frame the server sends, and the checks of what a
client sends.

The WebSocket consumer, the SSE stream (`POST /chat/stream`) and the JSON views build
their frames and refuse bad input here, so a frame means the same on every transport; the
error codes they refuse with are every surface's (httpkit.errors). A test reads
docs/protocol.md against the names below.
"""

from typing import TYPE_CHECKING

from django.conf import settings

from httpkit.errors import Refusal
from httpkit.json import parse_json

if TYPE_CHECKING:
    from conversations.models import Message

CLIENT_FRAMES = ("chat.send", "chat.stop", "chat.resume", "chat.regenerate", "chat.edit", "chat.continue")
SERVER_FRAMES = ("chat.started", "chat.token", "chat.done", "chat.error")
# The frames that end an answer.
TERMINAL = frozenset({"chat.done", "chat.error"})

# Building frames.


def error(code: str, detail: str, **extra) -> dict:
    return {"type": "chat.error", "code": code, "detail": detail, **extra}


def refused(refusal: Refusal) -> dict:
    """The `chat.error` frame that tells the client of a refusal."""
    return error(refusal.code, refusal.detail, **refusal.extra)


def started(*, conversation_id: int, message_id: int, user_message_id: int) -> dict:
    """An answer has begun: `message_id` is the answer's, `user_message_id` the stored question's."""
    return {
        "type": "chat.started",
        "conversation": conversation_id,
        "message": message_id,
        "user_message": user_message_id,
    }


def token(message_id: int, seq: int, text: str) -> dict:
    return {"type": "chat.token", "message": message_id, "seq": seq, "text": text}


def text_of(frames: list[dict]) -> str:
    """The answer's text in `frames`: its token frames' texts, in order."""
    return "".join(frame["text"] for frame in frames if frame["type"] == "chat.token")


def usage(prompt_tokens: int | None, cached_tokens: int | None, completion_tokens: int | None) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "cached_tokens": cached_tokens,
        "completion_tokens": completion_tokens,
    }


def done(
    message_id: int,
    *,
    status: str,
    finish_reason: str,
    usage: dict,
    ttft_ms: float | None,
    note: str,
    content: str,
    sources: list[dict] | None = None,
) -> dict:
    """The closing frame of an answer; `sources`, where the question retrieved passages."""
    frame = {
        "type": "chat.done",
        "message": message_id,
        "status": status,
        "finish_reason": finish_reason,
        "usage": usage,
        "ttft_ms": ttft_ms,
        "note": note,
        "content": content,
    }
    if sources:
        frame["sources"] = sources
    return frame


def failed(message_id: int, *, code: str, detail: str, status: str, content: str, **extra) -> dict:
    """The closing frame of an answer that failed: its code, status and partial text."""
    return error(code, detail, message=message_id, status=status, content=content, **extra)


def closing(message: "Message") -> dict:
    """The closing frame of an answer that has ended, rebuilt from the store."""
    if message.status in {"complete", "stopped"}:
        return done(
            message.pk,
            status=message.status,
            finish_reason=message.finish_reason,
            usage=usage(message.prompt_tokens, message.cached_tokens, message.completion_tokens),
            ttft_ms=message.ttft_ms,
            note=message.note,
            content=message.content,
        )
    return failed(
        message.pk,
        code=message.error_code or "interrupted",
        detail=message.note or "The answer did not finish.",
        status=message.status,
        content=message.content,
    )


# Checking what clients send.


def decode(text: str) -> dict:
    """One client frame: a JSON object with a string `type`."""
    if len(text) > settings.CHAT_MAX_CONTENT_CHARS * 2 + 1024:
        raise Refusal("too_large", "frame too large")
    frame = parse_json(text)
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise Refusal("invalid_frame", "a frame is a JSON object with a string 'type'")
    return frame


# The largest id and position the database holds (a signed 64-bit integer) and frames can carry back.
MAX_ID = 2**63 - 1


def is_id(value: object) -> bool:
    # JSON true/false arrive as bool, which Python counts as int.
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_ID


def id_field(data: dict, name: str, *, nullable: bool = False, required: bool = True) -> int | None:
    """A positive integer id. None where `nullable` and the value is null, or where not
    `required` and the field is absent."""
    if name not in data:
        if required:
            raise Refusal("invalid_field", f"'{name}' is required")
        return None
    value = data[name]
    if value is None and nullable:
        return None
    if not is_id(value):
        raise Refusal("invalid_field", f"'{name}' must be a positive integer id")
    return value


def content_field(data: dict, name: str = "content") -> str:
    """A message text: a non-empty string of at most CHAT_MAX_CONTENT_CHARS characters."""
    content = data.get(name)
    if not isinstance(content, str) or not content.strip():
        raise Refusal("invalid_field", f"'{name}' must be a non-empty string")
    if len(content) > settings.CHAT_MAX_CONTENT_CHARS:
        raise Refusal("too_large", f"'{name}' is longer than {settings.CHAT_MAX_CONTENT_CHARS} characters")
    return content


def seq_field(data: dict, name: str = "after") -> int:
    """A token position to resume after; -1 for all."""
    value = data.get(name, -1)
    if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= MAX_ID:
        raise Refusal("invalid_field", f"'{name}' must be a token seq (or -1 for all)")
    return value
