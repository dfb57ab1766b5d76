"""The chat protocol (docs/protocol.md): every frame the server sends, and the checks of what a
client sends.

The WebSocket consumer, the SSE stream (`POST /chat/stream`) and the JSON views build
their frames and refuse bad input here, so a frame means the same on every transport; the
error codes they refuse with are every surface's (httpkit.errors). A test reads
docs/protocol.md against the names below.
"""

from typing import TYPE_CHECKING, Annotated, Literal

from django.conf import settings
from pydantic import Field, StrictStr, field_validator

from httpkit.errors import Refusal
from httpkit.json import parse_json
from httpkit.validation import Id, Input, Seq, Text, at_most, checked, refuse

if TYPE_CHECKING:
    from conversations.models import Message

SERVER_FRAMES = ("chat.started", "chat.token", "chat.notice", "chat.done", "chat.error")
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


def notice(message_id: int, *, code: str, detail: str) -> dict:
    """Why a running answer makes no tokens for now (`engine_waiting`); its next token ends it."""
    return {"type": "chat.notice", "message": message_id, "code": code, "detail": detail}


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


class MessageRef(Input):
    """`chat.stop`, `chat.regenerate`, `chat.continue`; `POST /chat/stop`; the version shown."""

    message: Id


class ChatSend(Input):
    conversation: Id | None
    # The message the new one follows (another version's); default: the one shown.
    parent: Id | None = None
    content: Text = Field(None, validate_default=True)


class ChatEdit(MessageRef):
    content: Text = Field(None, validate_default=True)


class ChatResume(MessageRef):
    after: Seq = -1


CLIENT_FRAMES: dict[str, type[Input]] = {
    "chat.send": ChatSend,
    "chat.stop": MessageRef,
    "chat.resume": ChatResume,
    "chat.regenerate": MessageRef,
    "chat.edit": ChatEdit,
    "chat.continue": MessageRef,
}


def client_frame(frame: dict) -> Input:
    """A decoded frame of a known type, checked against its model."""
    return checked(CLIENT_FRAMES[frame["type"]], frame)


# `POST /chat/stream` bodies: which turn they ask for is the field they carry.


class StreamSend(Input):
    prompt: Text = Field(None, validate_default=True)
    conversation: Id | None = None
    parent: Id | None = None


class StreamEdit(Input):
    edit: Id
    prompt: Text = Field(None, validate_default=True)


class StreamRegenerate(Input):
    regenerate: Id


class StreamContinue(Input):
    message: Id = Field(alias="continue")


MESSAGES_LIMIT = 200


class StreamMessage(Input):
    role: Literal["system", "user", "assistant"] = Field(None, validate_default=True)
    content: Annotated[StrictStr, at_most("CHAT_MAX_CONTENT_CHARS", size=len)] = Field(
        None,
        validate_default=True,
        description="{param} must be a string of at most {CHAT_MAX_CONTENT_CHARS} characters",
    )


class StreamMessages(Input):
    """A whole conversation (OpenAI's layout): its system messages become the system prompt, the
    others its history, and the last, a user message, is answered."""

    messages: Annotated[
        list[
            Annotated[StreamMessage, Field(description="{param} needs a role of system, user or assistant")]
        ],
        Field(min_length=1, max_length=MESSAGES_LIMIT),
    ] = Field(
        None,
        validate_default=True,
        description=f"'messages' must be a list of 1 to {MESSAGES_LIMIT} messages",
    )

    @field_validator("messages")
    @classmethod
    def _ends_with_a_question(cls, messages: list[StreamMessage]) -> list[StreamMessage]:
        if messages[-1].role != "user" or not messages[-1].content.strip():
            raise refuse("invalid_field", "the last message must be a non-empty user message")
        return messages


STREAM_BODIES: dict[str, type[Input]] = {
    "messages": StreamMessages,
    "regenerate": StreamRegenerate,
    "continue": StreamContinue,
    "edit": StreamEdit,
}


def stream_body(data: dict) -> Input:
    """A `POST /chat/stream` body, checked as the turn it asks for: the first of STREAM_BODIES'
    fields it carries, else a new message (StreamSend)."""
    kind = next((model for name, model in STREAM_BODIES.items() if name in data), StreamSend)
    return checked(kind, data)
